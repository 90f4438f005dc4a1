"""Training progress bars that count optimizer steps against the step budget.

Lightning's bars count batches within an epoch, and a run budgeted by `trainer.max_steps` (every run here) shows
'Epoch 1/-2'. These say 'Epoch 1 · step 120/160' instead; everything else is Lightning's.
"""

from __future__ import annotations

from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar


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


def progress_bar(kind: str):
    """rich | tqdm | none -> a callback or None."""
    if kind not in ("rich", "tqdm", "none"):
        raise ValueError(f"progress_bar must be rich, tqdm or none, got '{kind}'.")
    return None if kind == "none" else StepRichProgressBar() if kind == "rich" else StepTQDMProgressBar()
