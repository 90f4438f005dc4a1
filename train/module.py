"""DistillModule: a frozen target teaches a trainable draft through its logits.

The target is registered as a submodule (so strategies such as FSDP can shard it) but it is frozen, kept
in eval mode, and stripped from every checkpoint: a checkpoint holds the draft, its config and the
tokenizer files, enough to export it alone (eval/shared/export.py).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import lightning as L
import torch

from eval.shared.export import CHECKPOINT_KEY as _META
from train.onpolicy import draft_continuations, is_onpolicy_step
from train.train_vocab import kept_head, remap
from decode.drafts.feature_drafts import final_hidden as model_hidden, is_feature_draft
from train.feature_loss import feature_distill
from train.losses import (LossSettings, chunked_distill, chunked_sparse_distill, get_loss, loss_mask,
                          own_precision)



def final_hidden(model, batch) -> torch.Tensor:
    """Last hidden states of a causal LM, without computing the full (batch, seq, vocab) logits."""
    return model_hidden(model, batch["input_ids"], batch["attention_mask"])


@dataclass(frozen=True)
class OptimSettings:
    """AdamW with linear warmup and cosine decay (conf/optim/adamw.yaml)."""
    lr: float = 1e-3
    weight_decay: float = 0.01
    betas: tuple = (0.9, 0.95)
    warmup_steps: int = 20
    min_lr_ratio: float = 0.1

    @classmethod
    def from_config(cls, optim) -> "OptimSettings":
        return cls(float(optim["lr"]), float(optim["weight_decay"]), tuple(float(b) for b in optim["betas"]),
                   int(optim["warmup_steps"]), float(optim["min_lr_ratio"]))


def warmup_cosine(step: int, warmup_steps: int, total_steps: int, min_ratio: float) -> float:
    """LR multiplier: linear warmup to 1, then cosine decay to min_ratio at total_steps."""
    if step < warmup_steps:
        return (step + 1) / max(1, warmup_steps)
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


class DistillModule(L.LightningModule):
    def __init__(self, target, draft, *, loss: LossSettings | None = None, optim: OptimSettings | None = None,
                 onpolicy: dict | None = None, meta: dict | None = None, train_vocab: int | None = None,
                 special_ids=(), train_vocab_ranking: list[int] | None = None):
        super().__init__()
        self.loss, self.optim = loss or LossSettings(), optim or OptimSettings()
        self.save_hyperparameters({"loss": asdict(self.loss), "optim": asdict(self.optim), "onpolicy": onpolicy,
                                   "train_vocab": train_vocab})
        # target None: the teacher is a cache that comes with each batch (train/teacher_cache.py): the target's top-k
        # logits, or for feature drafts its features
        self.target = target.eval().requires_grad_(False) if target is not None else None
        self.draft = draft
        self.loss_fn = get_loss(self.loss.name, **self.loss.params)
        self.ce_weight = self.loss.mixed_ce_weight
        self.meta = dict(meta or {})
        self.onpolicy = dict(onpolicy or {"fraction": 0.0})  # fraction, prompt_tokens, new_tokens, temperature
        self._last_step_time: float | None = None
        self._kept = None  # train_vocab: (kept ids, frozen head over them), train/train_vocab.py
        if train_vocab:
            if target is None and not is_feature_draft(draft):  # a feature draft holds the target's head itself
                raise ValueError("model.draft.train_vocab works with teacher=live (the cached teacher's top-k ids "
                                 "are not restricted). Fix: model.draft.train_vocab=null or teacher=live.")
            self._kept = kept_head(draft, int(train_vocab), special_ids, ranking=train_vocab_ranking)

    def train(self, mode: bool = True):
        super().train(mode)
        if self.target is not None:
            self.target.eval()  # frozen: no dropout, whatever Lightning asks of the module
        return self

    def _distill(self, batch, metrics: bool):
        """Training uses the configured loss; validation also measures the target-agreement metrics, and its
        `val/loss` is the same mixture so runs with one loss compare."""
        labels = batch["labels"]
        if is_feature_draft(self.draft):  # Medusa heads / EAGLE-style draft: train/feature_loss.py
            return feature_distill(self.draft, self.target, batch, self.loss_fn, temperature=self.loss.temperature,
                                   chunk_size=self.loss.chunk_size, ce_weight=self.ce_weight, metrics=metrics,
                                   decay=self.loss.decay, steps=self.loss.steps,
                                   kept=self._kept_head() if self._kept is not None else None)
        if self.target is None:  # cached teacher: sparse forward KL against the target's stored top-k
            return chunked_sparse_distill(final_hidden(self.draft, batch), self.draft.get_output_embeddings(),
                                          loss_mask(labels), batch["teacher_ids"], batch["teacher_logp"],
                                          batch["teacher_tail"], self.loss.chunk_size, metrics=metrics,
                                          next_tokens=torch.roll(labels, -1, dims=1), ce_weight=self.ce_weight)
        next_tokens, mask = torch.roll(labels, -1, dims=1), loss_mask(labels)
        draft_head, target_head = self.draft.get_output_embeddings(), self.target.get_output_embeddings()
        if self._kept is not None and not metrics:
            # training over the kept ids (model.draft.train_vocab): positions whose next token is not kept are left
            # out, and the teacher's logits are cut to the same ids (renormalised by the loss's softmax)
            ids, draft_head = self._kept_head()
            next_tokens, kept = remap(next_tokens, ids, self.draft.get_output_embeddings().out_features)
            mask = mask & kept
            full = target_head
            target_head = lambda h: full(h)[..., ids]  # noqa: E731
        teacher = None
        if metrics or self.ce_weight < 1:  # the cross-entropy baseline trains without the target
            with torch.no_grad(), own_precision(batch["input_ids"]):  # the teacher ignores bf16-mixed autocast
                teacher = final_hidden(self.target, batch)
        return chunked_distill(final_hidden(self.draft, batch), teacher, draft_head, target_head, mask, self.loss_fn,
                               self.loss.temperature, self.loss.chunk_size, metrics=metrics,
                               next_tokens=next_tokens, ce_weight=self.ce_weight)

    def _kept_head(self):
        """(kept ids, the frozen head over them), moved to the draft's device once (not a registered submodule)."""
        ids, head = self._kept
        if head.weight.device != self.device:
            self._kept = ids, head = ids.to(self.device), head.to(self.device)
        return ids, head

    def training_step(self, batch, batch_idx):
        op = self.onpolicy
        if is_onpolicy_step(self.global_step, op["fraction"]):  # the draft writes, the target grades
            gen = torch.Generator(device=batch["input_ids"].device).manual_seed(self.global_step)
            batch = draft_continuations(self.draft, batch, op["prompt_tokens"], op["new_tokens"], op["temperature"],
                                        gen)
            self.log("train/onpolicy", 1.0, on_step=True)
        out = self._distill(batch, metrics=False)
        if not torch.isfinite(out["loss"]):
            raise FloatingPointError(f"train/loss is {out['loss'].item()} at step {self.global_step}: stopping. "
                                     "The last good checkpoint is kept. Fix: lower optim.lr or use precision=32.")
        self.log("train/loss", out["loss"], prog_bar=True, on_step=True, batch_size=int(out["tokens"]))
        now = time.perf_counter()
        if self._last_step_time is not None:
            self.log("train/tokens_per_s", batch["input_ids"].numel() / (now - self._last_step_time), prog_bar=True)
        self._last_step_time = now
        return out["loss"]

    def validation_step(self, batch, batch_idx):
        out = self._distill(batch, metrics=True)
        n = max(int(out["tokens"]), 1)
        for key in ("kl", "top1_agree", "expected_accept"):
            self.log(f"val/{key}", out[key], on_epoch=True, batch_size=n, prog_bar=key != "kl", sync_dist=True)
        for key in (k for k in out if k.startswith("top1_agree_")):  # feature drafts: each head / depth
            self.log(f"val/{key}", out[key], on_epoch=True, batch_size=n, sync_dist=True)
        self.log("val/loss", out["loss"], on_epoch=True, batch_size=n, sync_dist=True)

    def on_validation_start(self):
        self._last_step_time = None  # a validation pause is not training time

    def configure_optimizers(self):
        decay, no_decay = [], []
        for param in self.draft.parameters():
            if param.requires_grad:
                (decay if param.ndim >= 2 else no_decay).append(param)
        if not decay and not no_decay:
            raise ValueError("The draft has no trainable parameter.")
        hp = self.optim
        optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": hp.weight_decay},
                                       {"params": no_decay, "weight_decay": 0.0}], lr=hp.lr, betas=tuple(hp.betas))
        total = int(self.trainer.estimated_stepping_batches)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: warmup_cosine(step, hp.warmup_steps, total, hp.min_lr_ratio))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    # --- checkpoints: the draft only -------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint):
        state = checkpoint["state_dict"]
        for key in [k for k in state if k.startswith("target.")]:
            del state[key]
        config = self.draft.config_dict() if is_feature_draft(self.draft) else self.draft.config.to_dict()
        checkpoint[_META] = {**self.meta, "draft_config": config}

    def on_load_checkpoint(self, checkpoint):
        if _META not in checkpoint:
            raise ValueError("This checkpoint was not written by Draftsmith's DistillModule (no 'draftsmith' entry).")
        # The frozen target is never saved: put the live one back so strict loading still checks the draft.
        if self.target is not None:
            checkpoint["state_dict"].update({f"target.{k}": v for k, v in self.target.state_dict().items()})
