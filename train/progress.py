"""Training progress bars that count optimizer steps against the step budget.

Lightning's bars count batches within an epoch, and a run budgeted by `trainer.max_steps` (every run here) shows
'Epoch 1/-2'. These say 'Epoch 1 · step 120/160' instead; everything else is Lightning's. Written to a log file
(`nohup ... > log`, CI), rich's live bar shows nothing until training ends, so there `rich` becomes StepLines: a
logged line at most once a minute (step, loss, time per step, time left) and one after each validation.
"""

from __future__ import annotations

import logging
import time

from lightning.pytorch.callbacks import Callback, RichProgressBar, TQDMProgressBar

from data.progress import clock, on_a_terminal

log = logging.getLogger("draftsmith")


def step_description(epoch: int, step: int, max_steps: int | None) -> str:
    """'Epoch e · step s/S' when the run has a step budget, else 'Epoch e'."""
    if max_steps is not None and max_steps > 0:
        return f"Epoch {epoch} · step {step}/{max_steps}"
    return f"Epoch {epoch}"


class StepRichProgressBar(RichProgressBar):
    def _get_train_description(self, current_epoch: int) -> str:
        return step_description(current_epoch, self.trainer.global_step, self.trainer.max_steps)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if self.progress is not None and self.train_progress_bar_id is not None:
            self.progress.update(self.train_progress_bar_id,
                                 description=self._get_train_description(trainer.current_epoch))


class StepTQDMProgressBar(TQDMProgressBar):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if self.train_progress_bar is not None:
            self.train_progress_bar.set_description(
                step_description(trainer.current_epoch, trainer.global_step, trainer.max_steps), refresh=False)


class StepLines(Callback):
    """Training progress as log lines from the first process: at most one per `every_s` seconds, the last step, and
    each validation."""

    def __init__(self, every_s: float = 60.0):
        self.every_s, self.started, self.first_step, self.last = every_s, None, 0, 0.0

    def on_train_start(self, trainer, pl_module):
        self.started, self.first_step = time.monotonic(), trainer.global_step  # a resumed run starts past 0
        self.last = self.started

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        now, step, budget = time.monotonic(), trainer.global_step, trainer.max_steps
        if not trainer.is_global_zero:  # one line per step, not one per process
            return
        if now - self.last >= self.every_s or (budget and budget > 0 and step >= budget):
            self.last = now
            log.info(self.step_line(step, budget, now - self.started, trainer.callback_metrics))

    def step_line(self, step: int, budget: int | None, spent: float, metrics: dict) -> str:
        """'step 40/160 (25%), train/loss 0.412, 33.1 s/step, 0:22:04 spent, 1:06:12 left'."""
        parts = [f"step {step}/{budget} ({step / budget:.0%})" if budget and budget > 0 else f"step {step}"]
        parts += [f"{k} {float(v):.4g}" for k, v in metrics.items() if k.startswith("train/")]
        done = step - self.first_step
        if done > 0:
            parts.append(f"{spent / done:.1f} s/step")
        parts.append(f"{clock(spent)} spent")
        if done > 0 and budget and budget > step:
            parts.append(f"{clock(spent / done * (budget - step))} left")
        return ", ".join(parts)

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        val = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
        if val:
            log.info(f"validation at step {trainer.global_step}: "
                     + ", ".join(f"{k} {v:.4f}" for k, v in sorted(val.items())))


def progress_bar(kind: str, live: bool | None = None):
    """rich | tqdm | none -> a callback or None. rich off a terminal (`live` False; default: on_a_terminal()) is
    StepLines, which is not a Lightning progress bar: the trainer then runs with enable_progress_bar=False."""
    if kind not in ("rich", "tqdm", "none"):
        raise ValueError(f"progress_bar must be rich, tqdm or none, got '{kind}'.")
    if kind == "none":
        return None
    if kind == "tqdm":
        return StepTQDMProgressBar()
    return StepRichProgressBar() if (live if live is not None else on_a_terminal()) else StepLines()
