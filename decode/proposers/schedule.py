"""Per-step draft length from a schedule: transformers' heuristic for assisted generation.

After a step whose drafts were all accepted, draft 2 more next time; after any rejection, 1 fewer (never below 1).
The loop's gamma is the ceiling. The choice is made from earlier steps only, before the target sees this step's
drafts, so greedy output and the sampled law stay the target's (any rule of that kind is lossless).
"""

from __future__ import annotations

from decode.proposers.draft_model import DraftModelProposer


def next_gamma(current: int, drafted: int, accepted: int, ceiling: int) -> int:
    """transformers' `num_assistant_tokens_schedule="heuristic"`: +2 after a fully accepted draft, else -1; within
    [1, ceiling]. A step that drafted nothing leaves it as it was. Pure."""
    if drafted == 0:
        return min(max(current, 1), ceiling)
    step = 2 if accepted == drafted else -1
    return min(max(current + step, 1), ceiling)


class HeuristicGammaProposer:
    """Wraps a proposer (the draft model) and drafts `current` tokens a step, moved by `next_gamma` after each step.
    `last_source` passes through what the wrapped proposer reports."""

    def __init__(self, inner, start: int = 1):
        if start < 1:
            raise ValueError(f"the heuristic schedule starts at gamma >= 1, got {start}.")
        self.inner, self.start_gamma = inner, start
        self.current, self._before, self._drafted, self._ceiling = start, 0, 0, start

    @property
    def last_source(self) -> str:
        return getattr(self.inner, "last_source", "")

    def start(self, prompt):
        self.current, self._drafted, self._ceiling = self.start_gamma, 0, 1
        self.inner.start(prompt)

    def propose(self, tokens, gamma, params, generator):
        self._ceiling = max(self._ceiling, gamma)  # the loop's gamma (it shrinks only at the end of the budget)
        want = min(self.current, gamma)
        drafted, q = self.inner.propose(tokens, want, params, generator)
        self._before, self._drafted = len(tokens), len(drafted)
        return drafted, q

    def rollback(self, keep):
        accepted = keep - self._before
        self.current = next_gamma(self.current, self._drafted, accepted, self._ceiling)
        self.inner.rollback(keep)


def build(request):
    """proposers=[heuristic] (decode/proposers/registry.py): the draft model under transformers' schedule."""
    return HeuristicGammaProposer(DraftModelProposer(request.draft, request.threshold))
