"""A draft model's chain: a small causal LM drafts up to gamma tokens from its own KV cache (the proposer every
standalone draft decodes with, under the loop of decode/core/speculative.py).

    generate(target, DraftModelProposer(draft, confidence_threshold=0.3), prompt, gamma=4, max_new_tokens=64)
"""

from __future__ import annotations

import torch

from decode.core.sampling import sample
from decode.core.speculative import CachedLM, draft_confidence


class DraftModelProposer:
    """A small causal LM drafts up to gamma tokens autoregressively from its own KV cache.

    With `confidence_threshold` > 0 it stops early, after the first drafted token to which it gives a probability
    below the threshold (transformers' `assistant_confidence_threshold`): gamma becomes a maximum, long drafts go
    where the draft is sure and short ones where it is not. A `stop_rule` (decode/proposers/predict_gamma.py) decides from the
    confidences of the tokens drafted so far instead. Either decision uses only the draft's own distribution, so
    greedy output and the sampled distribution stay exactly the target's."""

    def __init__(self, draft, confidence_threshold: float = 0.0, stop_rule=None):
        if not 0.0 <= confidence_threshold < 1.0:
            raise ValueError(f"confidence_threshold must be in [0, 1) (0 = always draft gamma tokens), "
                             f"got {confidence_threshold}.")
        self.lm = CachedLM(draft, role="draft")
        self.threshold = confidence_threshold
        self.stop_rule = stop_rule  # or: a callable(confidences of the tokens drafted so far) -> stop now

    def start(self, prompt):
        self.lm.reset()
        if len(prompt) > 1:
            self.lm.extend(prompt[:-1], keep=1)

    def propose(self, tokens, gamma, params, generator):
        if gamma == 0:
            return [], torch.empty(0)
        logits = self.lm.extend(tokens[self.lm.length:], keep=1)[-1]  # everything not yet cached (1 or 2 tokens)
        drafted, probs, confidences = [], [], []
        judge = self.threshold > 0 or self.stop_rule is not None
        for i in range(gamma):
            if params.temperature == 0:  # greedy needs no draft distribution
                token = int(logits.argmax())
                conf = draft_confidence(logits, token) if judge else 1.0
            else:
                q = params.probs(logits)
                token = int(sample(q, generator))
                probs.append(q)
                conf = float(q[token])
            drafted.append(token)
            confidences.append(conf)
            if i + 1 == gamma or conf < self.threshold or (self.stop_rule is not None and self.stop_rule(confidences)):
                break
            logits = self.lm.extend([token], keep=1)[-1]
        return drafted, torch.stack(probs) if probs else torch.empty(0)

    def rollback(self, keep):
        self.lm.rollback(keep)
