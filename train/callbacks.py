"""Judge the draft during training by real speculative decoding on held-out prompts.

At every `every_n_validations`-th validation of a fit, the bundled decoder generates from the `tune` prompts twice,
target-only and speculative (same code path), and logs val/alpha, val/tau (+1 bonus token included) and val/speedup:
what checkpoint selection (checkpoint.monitor=val/alpha) may read. At every stand-alone `trainer.validate` (the
before/after evaluations of train/distill.py) and at `report`, it decodes the `test` prompts instead and logs
test/alpha, test/tau and test/speedup: the figures reported, never used for a choice.
"""

from __future__ import annotations

import logging

import lightning as L
import torch

from decode.drafts.draft_vocab import restrict_vocab
from decode.proposers.feature_decoding import draft_proposer
from decode.kernels.fast_linear import fast_cpu_linears
from decode.drafts.quantize import quantize_draft, weights_label
from decode.core.metrics import acceptance
from decode.core.speculative import NoProposer, SamplingParams, generate, generate_all

log = logging.getLogger(__name__)


class SpeculativeEval(L.Callback):
    def __init__(self, prompts: list[list[int]], report_prompts: list[list[int]] | None = None, gamma: int = 4, max_new_tokens: int = 32,
                 every_n_validations: int = 1, temperature: float = 0.0, eos_token_ids: set[int] | None = None,
                 seed: int = 0, cpu_matmul: str = "auto", draft_quant: str = "auto",
                 draft_vocab: int | str | None = None, special_ids=(), confidence_threshold: float = 0.0,
                 draft_vocab_ranking: list[int] | None = None):
        report_prompts = prompts if report_prompts is None else report_prompts
        if gamma < 1 or max_new_tokens < 1 or every_n_validations < 1 or not prompts or not report_prompts:
            raise ValueError("spec_eval needs prompts, gamma >= 1, max_new_tokens >= 1 and every_n_validations >= 1.")
        if not 0 <= confidence_threshold < 1:
            raise ValueError(f"spec_eval.confidence_threshold must be in [0, 1) (0 = always draft gamma), "
                             f"got {confidence_threshold}.")
        # stop drafting after a token the draft is less sure of (no effect on one-token drafts: recorded as 0 there)
        self.threshold = confidence_threshold if gamma > 1 else 0.0
        self.prompts, self.report_prompts = prompts, report_prompts  # tune (choices) and test (reported) prompts
        self.gamma, self.max_new_tokens = gamma, max_new_tokens
        self.every, self.params, self.eos, self.seed = every_n_validations, SamplingParams(temperature), eos_token_ids, seed
        self.cpu_matmul = cpu_matmul  # decode/kernels/fast_linear.py: the small-batch matmul layout on CPU
        self.draft_quant = draft_quant  # decode/drafts/quantize.py: decode with an int8 copy of the draft on CPU
        self.draft_vocab, self.special_ids = draft_vocab, set(special_ids)  # decode/drafts/draft_vocab.py: a smaller head
        self.ranking = draft_vocab_ranking  # which ids it keeps (model.draft.train_vocab_from): those trained over
        self._fit_validations = 0
        self.last: dict = {}  # the last measurement on the test prompts
        self.last_tune: dict = {}  # the last one on the tune prompts (during fit)
        self.measured_at_step = -1  # global step of the last measurement during fit

    def measure(self, target, draft, prompts: list[list[int]] | None = None) -> dict:
        """alpha, tau, speedup and their conditions on `prompts` (default: the tune prompts)."""
        prompts = self.prompts if prompts is None else prompts
        run = dict(max_new_tokens=self.max_new_tokens, params=self.params, eos_token_ids=self.eos, seed=self.seed)
        trained = draft  # decoded from copies: the trained weights stay as they are
        draft, vocab = restrict_vocab(draft, self.draft_vocab, self.special_ids, copy=True, ranking=self.ranking)
        draft, quant = quantize_draft(draft, self.draft_quant, copy=draft is trained)
        with fast_cpu_linears([target, draft], self.gamma + 1, self.cpu_matmul):
            generate(target, draft_proposer(draft, self.threshold), prompts[0], self.gamma, 4)  # warm-up
            base = generate_all(target, NoProposer(), prompts, 0, **run)
            spec = generate_all(target, draft_proposer(draft, self.threshold), prompts, self.gamma, **run)
        stats = acceptance(spec["steps"])
        base_tok_s, spec_tok_s = base["new_tokens"] / base["seconds"], spec["new_tokens"] / spec["seconds"]
        return {"alpha": stats["alpha"], "tau": stats["tau"], "speedup": spec_tok_s / base_tok_s,
                "target_tok_s": base_tok_s, "spec_tok_s": spec_tok_s, "gamma": self.gamma,
                "confidence_threshold": self.threshold,
                "n_prompts": len(prompts), "max_new_tokens": self.max_new_tokens,
                "temperature": self.params.temperature, "threads": torch.get_num_threads(),
                "cpu_matmul": self.cpu_matmul, "draft_weights": weights_label(quant),
                "draft_vocab": vocab["size"] if vocab["restricted"] else None,
                "draft_vocab_order": vocab.get("order"),
                "draft_vocab_ranked_by": "the ids it trains over" if self.ranking and vocab["restricted"] else None}

    def _measure_module(self, pl_module, split: str) -> dict:
        was_training = pl_module.draft.training
        pl_module.draft.eval()
        try:
            prompts = self.prompts if split == "tune" else self.report_prompts
            return {**self.measure(pl_module.target, pl_module.draft, prompts), "split": split}
        finally:
            pl_module.draft.train(was_training)

    def report(self, pl_module) -> dict:
        """Measure the current weights on the test prompts (the figures reported); {test/alpha, test/tau,
        test/speedup}."""
        self.last = self._measure_module(pl_module, "test")
        return {f"test/{key}": float(self.last[key]) for key in ("alpha", "tau", "speedup")}

    def on_validation_epoch_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            return
        if trainer.state.fn != "fit":  # before/after evaluations: the reported figures, on test prompts
            for key, value in self.report(pl_module).items():
                pl_module.log(key, value)
            return
        self._fit_validations += 1
        if self._fit_validations % self.every:
            return
        self.last_tune = self._measure_module(pl_module, "tune")
        self.measured_at_step = trainer.global_step
        for key in ("alpha", "tau", "speedup"):
            pl_module.log(f"val/{key}", float(self.last_tune[key]), prog_bar=key == "alpha")


class LastFitValidation(L.Callback):
    """Remembers the global step of the last validation during fit, so train/distill.py can reuse its metrics
    as the 'after' numbers instead of validating the same weights a second time."""

    def __init__(self):
        self.step = -1

    def on_validation_epoch_end(self, trainer, pl_module):
        if trainer.state.fn == "fit" and not trainer.sanity_checking:
            self.step = trainer.global_step
