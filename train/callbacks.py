"""Judge the draft during training by real speculative decoding on held-out prompts.

At every `every_n_validations`-th validation of a fit, and at every stand-alone `trainer.validate` (the
before/after evaluations of train/distill.py), the bundled decoder generates from the prompts twice, target-only
and speculative (greedy, same code path), and logs val/alpha, val/tau (+1 bonus token included) and val/speedup.
"""

from __future__ import annotations

import logging

import lightning as L
import torch

from decode.metrics import acceptance
from decode.speculative import DraftModelProposer, NoProposer, SamplingParams, generate

log = logging.getLogger(__name__)


class SpeculativeEval(L.Callback):
    def __init__(self, prompts: list[list[int]], gamma: int = 4, max_new_tokens: int = 32,
                 every_n_validations: int = 1, temperature: float = 0.0, eos_token_ids: set[int] | None = None,
                 seed: int = 0):
        if gamma < 1 or max_new_tokens < 1 or every_n_validations < 1 or not prompts:
            raise ValueError("spec_eval needs prompts, gamma >= 1, max_new_tokens >= 1 and every_n_validations >= 1.")
        self.prompts, self.gamma, self.max_new_tokens = prompts, gamma, max_new_tokens
        self.every, self.params, self.eos, self.seed = every_n_validations, SamplingParams(temperature), eos_token_ids, seed
        self._fit_validations = 0
        self.last: dict = {}

    def _decode(self, target, proposer, gamma) -> tuple[list, float, int]:
        steps, seconds, tokens = [], 0.0, 0
        for i, prompt in enumerate(self.prompts):
            gen = generate(target, proposer, prompt, gamma, self.max_new_tokens, self.params, self.eos,
                           torch.Generator().manual_seed(self.seed + i))
            steps += gen.steps
            seconds += gen.prefill_s + gen.decode_s
            tokens += len(gen.tokens)
        return steps, seconds, tokens

    def measure(self, target, draft) -> dict:
        generate(target, DraftModelProposer(draft), self.prompts[0], self.gamma, 4)  # warm-up
        _, base_s, base_n = self._decode(target, NoProposer(), 0)
        steps, spec_s, spec_n = self._decode(target, DraftModelProposer(draft), self.gamma)
        stats = acceptance(steps)
        return {"alpha": stats["alpha"], "tau": stats["tau"], "speedup": (spec_n / spec_s) / (base_n / base_s),
                "target_tok_s": base_n / base_s, "spec_tok_s": spec_n / spec_s, "gamma": self.gamma,
                "n_prompts": len(self.prompts), "max_new_tokens": self.max_new_tokens,
                "temperature": self.params.temperature, "threads": torch.get_num_threads()}

    def on_validation_epoch_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            return
        if trainer.state.fn == "fit":
            self._fit_validations += 1
            if self._fit_validations % self.every:
                return
        was_training = pl_module.draft.training
        pl_module.draft.eval()
        try:
            self.last = self.measure(pl_module.target, pl_module.draft)
        finally:
            pl_module.draft.train(was_training)
        for key in ("alpha", "tau", "speedup"):
            pl_module.log(f"val/{key}", float(self.last[key]), prog_bar=key == "alpha")
