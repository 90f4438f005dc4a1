"""Survive crashes: atomic checkpoint files, a last.ckpt every N steps, and finding the checkpoint to resume.

A crash (kill -9, OOM, preemption) at any moment leaves either the previous last.ckpt or the new one, never a
half-written file. Rerunning the same command with `ckpt_path=last` (or with a fixed `paths.output_dir`, where
the default `ckpt_path=auto` finds it) continues from the last checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import Callback

from data.atomic import temp_file
from data.checks import UsageError
from train.checkpoint_meta import auto_resume

log = logging.getLogger(__name__)
LAST = "last.ckpt"


@contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "wb"):
    """A file opened at a temporary name in `path`'s folder; when the block ends without error it is fsynced and
    renamed over `path` (atomic on POSIX), otherwise removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = temp_file(path.parent, path.name)
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_torch_save(obj, path: str | os.PathLike) -> None:
    """torch.save through atomic_file: a crash leaves the previous file or the new one, never half of one."""
    with atomic_file(path) as f:
        torch.save(obj, f)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer, with the file replaced atomically on local disks."""

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        if storage_options is not None or "://" in str(path):  # remote storage: Lightning's own writer
            return super().save_checkpoint(checkpoint, path, storage_options)
        atomic_torch_save(checkpoint, path)


class PeriodicLastCheckpoint(Callback):
    """Write <dir>/last.ckpt every `every_n_steps` optimizer steps, so a crash loses at most that many; and at each
    of `keep_steps` the weights as <dir>/step-<N>.ckpt, kept (the points of a learning curve)."""

    def __init__(self, dirpath: str | os.PathLike, every_n_steps: int, keep_steps=()):
        self.path = Path(dirpath) / LAST
        self.every = every_n_steps
        self.keep = {int(s) for s in keep_steps or ()}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        kept = self.path.with_name(f"step-{step}.ckpt")
        if step in self.keep and not kept.exists():
            trainer.save_checkpoint(kept, weights_only=True)  # the draft's weights and run meta: enough to export
        if self.every > 0 and step > 0 and step % self.every == 0 and getattr(self, "_saved", -1) != step:
            self._saved = step
            trainer.save_checkpoint(self.path, weights_only=False)  # full state: resumable (and no Lightning notice)


class FlushLogsAtCheckpoints(Callback):
    """Write the CSV logger's buffered rows whenever a checkpoint is taken, so metrics.csv holds every row up to the
    checkpoint a crashed run resumes from (Lightning flushes only every 100 steps: a validation logged between two
    flushes would be lost for good, as the resumed run does not repeat it)."""

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        for logger in trainer.loggers:
            if type(logger).__name__ == "CSVLogger":
                logger.save()


def load_before(path: Path, resume: str | None) -> dict | None:
    """The metrics of the weights before training, as the interrupted attempt of a resumed run measured them (None:
    a fresh run, or the attempt stopped before it wrote them). Saves a resumed run a second validation of the same
    starting weights, and metrics.csv a second step-0 row."""
    if not resume or not path.is_file():
        return None
    log.info("resumed run: the before-training metrics are the first attempt's (%s)", path)
    return {k: float(v) for k, v in json.loads(path.read_text()).items()}


def checkpoint_step(resume: str | None) -> int | None:
    """The training step a checkpoint was saved at (None: no checkpoint, or a sharded one kept as a folder). Read
    memory-mapped, so the weights are not loaded."""
    if not resume or not Path(resume).is_file():
        return None
    return int(torch.load(resume, map_location="cpu", mmap=True, weights_only=False)["global_step"])


def weight_bytes(model: torch.nn.Module, trainable_only: bool = False) -> int:
    """Bytes of `model`'s weights (of the trainable ones only, if asked)."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad or not trainable_only)


def checkpoint_bytes(model: torch.nn.Module) -> int:
    """About what one full checkpoint of `model` takes: its weights plus Adam's two moments per trainable weight."""
    return weight_bytes(model) + 2 * weight_bytes(model, trainable_only=True)


def disk_needed(ckpt: int, export: int) -> int:
    """Peak bytes a run writes: last.ckpt, its atomic replacement beside it and the best checkpoint (3), the export."""
    return 3 * ckpt + export


def check_free_disk(output_dir: Path, ckpt: int, export: int) -> None:
    """Stop before training when the output folder's disk cannot hold the run's checkpoints and export; the files
    a resumed run already has there count as room (they are overwritten)."""
    folder = Path(output_dir)
    while not folder.exists():
        folder = folder.parent
    have = sum(f.stat().st_size for sub in ("checkpoints", "export") for f in (Path(output_dir) / sub).glob("*")
               if f.is_file())
    free, need = shutil.disk_usage(folder).free, disk_needed(ckpt, export)
    if free + have < need:
        gb = 1e9
        raise UsageError(f"{output_dir} is on a disk with {free / gb:.1f} GB free; this run needs about "
                         f"{need / gb:.1f} GB (three checkpoints of {ckpt / gb:.1f} GB: last.ckpt, its atomic "
                         f"replacement and the best one; the export, {export / gb:.1f} GB). Fix: free space there, "
                         "or paths.output_dir=<a folder on a larger disk>, or checkpoint.check_free_disk=false to "
                         "run anyway (a full disk then stops the run at a checkpoint; the previous last.ckpt is kept).")


def find_resume(ckpt_path: str | None, output_dir: Path, task_dir: Path) -> tuple[str | None, Path]:
    """Which checkpoint to resume from, and the run folder to write into.

    None: start fresh. "auto": resume from <output_dir>/checkpoints/last.ckpt when it exists (fixed output
    folders: cluster requeues, the study runner). "last": the newest last.ckpt of any run under `task_dir`
    (outputs/<task_name>/<timestamp>/...), continuing in that run's folder. Anything else: a checkpoint path.
    """
    if ckpt_path in (None, "", "none"):
        return None, output_dir
    if ckpt_path == "auto":
        found = auto_resume(output_dir)
        if found is not None and found.name != LAST:
            log.warning("ckpt_path=auto: %s is cut short (a kill or a full disk while it was written); resuming from "
                        "the newest whole checkpoint, %s", output_dir / "checkpoints" / LAST, found)
        return (str(found) if found else None), output_dir
    if ckpt_path == "last":
        found = sorted(task_dir.glob(f"*/checkpoints/{LAST}"), key=lambda p: p.stat().st_mtime)
        if not found:
            raise FileNotFoundError(f"ckpt_path=last: no {LAST} under {task_dir}/*/checkpoints/. Fix: start without "
                                    "ckpt_path, or give the checkpoint's path.")
        return str(found[-1]), found[-1].parent.parent
    if not Path(ckpt_path).is_file():
        raise FileNotFoundError(f"ckpt_path={ckpt_path} does not exist. Fix: give a .ckpt file, 'last' or 'auto'.")
    return str(ckpt_path), output_dir


def final_weights_win(monitor: str, best_score, final: dict) -> bool:
    """export.checkpoint=best chooses among fit's validations; weights first validated after fit (max_steps not a
    multiple of the validation interval) are exported instead when they score higher on the same held-out blocks.
    Never by val/alpha: after fit it is measured on test prompts, which no choice may read."""
    if monitor == "val/alpha" or best_score is None or monitor not in final:
        return False
    return float(final[monitor]) > float(best_score)
