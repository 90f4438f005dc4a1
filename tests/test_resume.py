"""Fault tolerance: atomic checkpoint files, and a crashed run that resumes to the same result as an
uninterrupted one (same seed, same data order, optimizer and schedule restored)."""

import csv
import warnings

import pytest
import torch

from test_train import tiny_cfg
from train.checkpointing import AtomicCheckpointIO, find_resume
from train.distill import train
from train.module import DistillModule

RUN = ["trainer.max_steps=6", "trainer.val_check_interval=3", "checkpoint.every_n_steps=2", "optim.lr=1e-2",
       "spec_eval.enabled=false", "export.enabled=false", "trainer.log_every_n_steps=1"]


def step_losses(run_dir) -> dict[int, float]:
    with open(run_dir / "csv" / "metrics.csv") as f:
        return {int(r["step"]): float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")}


def loss_row_steps(run_dir) -> list[int]:
    with open(run_dir / "csv" / "metrics.csv") as f:
        return [int(r["step"]) for r in csv.DictReader(f) if r.get("train/loss")]


def validation_steps(run_dir) -> list[int]:
    with open(run_dir / "csv" / "metrics.csv") as f:
        return [int(r["step"]) for r in csv.DictReader(f) if r.get("val/kl")]


def crash_at(monkeypatch, step: int):
    original = DistillModule.training_step

    def crashing(self, batch, batch_idx):
        if self.global_step == step:
            raise RuntimeError("simulated crash (kill -9, preemption...)")
        return original(self, batch, batch_idx)
    monkeypatch.setattr(DistillModule, "training_step", crashing)


def test_crashed_run_resumes_and_ends_like_an_uninterrupted_one(tmp_path, tiny_target_dir, text_file, monkeypatch,
                                                                 caplog):
    whole = train(tiny_cfg(tmp_path / "whole", tiny_target_dir, text_file, *RUN))
    # one last.ckpt (the periodic writer and Lightning's save_last share it) and one best: no last-v1.ckpt copies
    names = sorted(p.name for p in (tmp_path / "whole" / "run" / "checkpoints").iterdir())
    assert names[0] == "last.ckpt" and len(names) == 2 and names[1].startswith("step6-"), names
    with monkeypatch.context() as m:
        crash_at(m, 5)  # last.ckpt was written at step 4
        with pytest.raises(RuntimeError, match="simulated crash"):
            train(tiny_cfg(tmp_path / "crashed", tiny_target_dir, text_file, *RUN))
    run = tmp_path / "crashed" / "run"
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 4
    caplog.set_level("INFO")
    with warnings.catch_warnings(record=True) as caught:
        resumed = train(tiny_cfg(tmp_path / "crashed", tiny_target_dir, text_file, *RUN))  # the same command again
    # the weights before training are not validated again: the first attempt's figures, and one step-0 row
    assert resumed["before"] == whole["before"]
    assert "the before-training metrics are the first attempt's" in caplog.text
    assert validation_steps(run) == validation_steps(tmp_path / "whole" / "run")
    # it says it skips what step 4 had read, and Lightning's warning that it cannot is silenced
    assert "resumed at step 4 mid-epoch: this epoch skips the" in caplog.text
    assert not [w for w in caught if "not resumable" in str(w.message)]
    assert resumed["steps"] == whole["steps"] == 6
    for key in ("val/kl", "val/expected_accept", "val/top1_agree"):
        assert resumed["after"][key] == pytest.approx(whole["after"][key], rel=1e-4, abs=1e-6)
    # the steps after the crash saw the same batches with the same optimizer state
    w, r = step_losses(tmp_path / "whole" / "run"), step_losses(run)
    assert {4, 5} <= set(w) and {4, 5} <= set(r)
    assert [r[s] for s in (4, 5)] == pytest.approx([w[s] for s in (4, 5)], rel=1e-4)
    # one row per step, as in the uninterrupted run: what the crashed attempt logged after step 4 is not kept twice
    assert loss_row_steps(run) == loss_row_steps(tmp_path / "whole" / "run")


def test_ckpt_path_last_continues_the_newest_run_of_the_task(tmp_path, tiny_target_dir, text_file, monkeypatch):
    first = tmp_path / "runs" / "2026-01-01_00-00-00"
    with monkeypatch.context() as m:
        crash_at(m, 3)
        with pytest.raises(RuntimeError):
            train(tiny_cfg(tmp_path, tiny_target_dir, text_file, *RUN, f"paths.output_dir={first}"))
    second = tmp_path / "runs" / "2026-01-01_01-00-00"  # what rerunning the command gives: a new timestamp
    summary = train(tiny_cfg(tmp_path, tiny_target_dir, text_file, *RUN, f"paths.output_dir={second}",
                             "ckpt_path=last"))
    assert summary["output_dir"] == str(first.resolve()) and summary["steps"] == 6
    with pytest.raises(FileNotFoundError, match="no last.ckpt"):
        find_resume("last", tmp_path / "elsewhere" / "x", tmp_path / "elsewhere")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        find_resume(str(tmp_path / "missing.ckpt"), tmp_path, tmp_path)
    assert find_resume(None, tmp_path, tmp_path) == (None, tmp_path)


def test_metrics_csv_is_written_at_every_checkpoint(tmp_path):
    """A kill -9 loses no row logged before the checkpoint it resumes from (Lightning alone flushes every 100 steps)."""
    from types import SimpleNamespace

    from lightning.pytorch.loggers import CSVLogger

    from train.checkpointing import FlushLogsAtCheckpoints

    logger = CSVLogger(save_dir=str(tmp_path), name="csv", version="")
    logger.log_metrics({"val/kl": 0.5}, step=3)
    path = tmp_path / "csv" / "metrics.csv"
    assert not path.is_file() or "0.5" not in path.read_text()  # buffered
    FlushLogsAtCheckpoints().on_save_checkpoint(SimpleNamespace(loggers=[logger]), None, {})
    rows = list(csv.DictReader(path.open()))
    assert [(r["step"], r["val/kl"]) for r in rows] == [("3", "0.5")]


def test_checkpoint_writes_are_atomic(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"step": 1, "w": torch.ones(3)}, path)

    def broken_save(obj, f, *a, **k):
        f.write(b"half a checkpoint")
        raise OSError("disk full / killed mid-write")
    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError):
        io.save_checkpoint({"step": 2, "w": torch.zeros(3)}, path)
    monkeypatch.undo()
    assert torch.load(path)["step"] == 1  # the previous checkpoint is intact
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no temporary file left behind


@pytest.mark.integration
def test_kill_9_then_the_same_command_resumes(tmp_path, tiny_target_dir, text_file):
    """A real SIGKILL of `python train/distill.py` mid-training; rerunning the same command finishes the run."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from test_train import tiny_overrides

    repo = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "train/distill.py", *tiny_overrides(
        tmp_path, tiny_target_dir, text_file, "trainer.max_steps=400", "trainer.val_check_interval=200",
        "checkpoint.every_n_steps=5", "spec_eval.enabled=false", "export.enabled=false", "logger=none")]
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    proc = subprocess.Popen(cmd, cwd=repo, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "first.log", "w"))
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if last.is_file() and torch.load(last, weights_only=False)["global_step"] >= 10:
            break
        time.sleep(0.5)
    assert proc.poll() is None, "training ended before it could be killed: " + (tmp_path / "first.log").read_text()[-1500:]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = torch.load(last, weights_only=False)["global_step"]  # loads: never half-written
    assert 10 <= killed_at < 400
    done = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resuming from" in done.stderr + done.stdout
    assert torch.load(last, weights_only=False)["global_step"] == 400


def test_final_weights_are_exported_when_they_beat_the_best_validation_on_the_same_blocks():
    from train.checkpointing import final_weights_win

    assert final_weights_win("val/expected_accept", torch.tensor(0.75), {"val/expected_accept": 0.76})
    assert not final_weights_win("val/expected_accept", torch.tensor(0.75), {"val/expected_accept": 0.75})
    assert not final_weights_win("val/expected_accept", None, {"val/expected_accept": 0.71})  # nothing validated in fit
    assert not final_weights_win("val/top1_agree", 0.5, {"val/expected_accept": 0.9})  # the monitor was not measured
    # val/alpha after fit comes from test prompts: never a reason to choose
    assert not final_weights_win("val/alpha", 0.5, {"val/alpha": 0.9})


def test_a_disk_too_small_for_the_checkpoints_stops_the_run_before_training(tmp_path, monkeypatch):
    from collections import namedtuple

    from data.checks import UsageError
    from train.checkpointing import check_free_disk, checkpoint_bytes, disk_needed

    model = torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.Linear(10, 10))
    model[0].requires_grad_(False)  # frozen: weights only; trainable: weights and Adam's two moments
    assert checkpoint_bytes(model) == 110 * 4 + 3 * 110 * 4
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr("train.checkpointing.shutil.disk_usage", lambda p: usage(0, 0, 10_000))
    assert disk_needed(3000, 1000) == 10_000
    check_free_disk(tmp_path / "run", 3000, 1000)  # exactly enough; the folder need not exist yet
    with pytest.raises(UsageError, match=r"paths.output_dir=<a folder on a larger disk>.*check_free_disk=false"):
        check_free_disk(tmp_path / "run", 3001, 1000)
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)  # a resumed run's files are overwritten: they count
    (tmp_path / "run" / "checkpoints" / "last.ckpt").write_bytes(b"x" * 3)
    check_free_disk(tmp_path / "run", 3001, 1000)
