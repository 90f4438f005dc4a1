"""Per-step gamma predicted from context: draft while the next token is expected to pay for itself.

A chain's k-th drafted token is only worth anything if the k-1 before it are all accepted. From logged steps (the
replay of the target's greedy path on tune prompts, decode/core/replay.py) we fit how often the target accepts a token
the draft proposed with confidence x (`fit_calibration`: binned, made monotone). While drafting, the survival
probability S = product of the calibrated acceptance of the tokens drafted so far says how likely the chain is to
still be alive; one more draft pass is worth it when the expected token it adds, S * (mean acceptance) target steps,
outweighs what it costs: a draft pass plus the extra verified position (`SurvivalStop`). So gamma adapts per step to
the draft's confidence, with a bar set by the measured costs rather than tuned.

Lossless: the rule reads only the draft's own distribution before the target sees the drafts.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Sequence

from decode.core.metrics import pass_seconds
from decode.proposers.draft_model import DraftModelProposer


@dataclass
class Calibration:
    """P(the target accepts a drafted token | the draft's confidence in it): `rates[i]` for confidences in
    [edges[i], edges[i+1]). Non-decreasing in the confidence."""
    edges: list[float]
    rates: list[float]
    mean: float  # acceptance over all logged positions

    def __call__(self, confidence: float) -> float:
        i = bisect.bisect_right(self.edges, confidence) - 1
        return self.rates[min(max(i, 0), len(self.rates) - 1)]


def pool_adjacent_violators(values: Sequence[float], weights: Sequence[float]) -> list[float]:
    """The non-decreasing sequence closest to `values` in weighted squared error (isotonic regression). Pure."""
    blocks = []  # [mean, weight, count]
    for v, w in zip(values, weights):
        blocks.append([float(v), float(w), 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            v2, w2, n2 = blocks.pop()
            v1, w1, n1 = blocks[-1]
            total = w1 + w2
            blocks[-1] = [(v1 * w1 + v2 * w2) / total if total else (v1 + v2) / 2, total, n1 + n2]
    return [b[0] for b in blocks for _ in range(b[2])]


def fit_calibration(positions: Sequence[Sequence[tuple[float, bool]]], bins: int = 10) -> Calibration:
    """Calibration from (confidence, accepted) positions: equal-count bins over the confidences, each bin's
    acceptance rate (with one pseudo-count at the overall rate), made non-decreasing. Pure."""
    flat = sorted((float(c), bool(a)) for path in positions for c, a in path)
    if not flat:
        raise ValueError("predicted gamma needs logged positions to fit on (tune prompts with a non-empty greedy path).")
    mean = sum(a for _, a in flat) / len(flat)
    bins = max(1, min(bins, len(flat)))
    cuts = [round(i * len(flat) / bins) for i in range(bins + 1)]
    edges, rates, weights = [0.0], [], []
    for lo, hi in zip(cuts, cuts[1:]):
        chunk = flat[lo:hi]
        if not chunk:
            continue
        rates.append((sum(a for _, a in chunk) + mean) / (len(chunk) + 1))
        weights.append(len(chunk) + 1)
        edges.append(chunk[-1][0])
    edges = edges[:-1]  # bin i covers [edges[i], edges[i+1]); the last is open above
    return Calibration(edges, pool_adjacent_violators(rates, weights), mean)


class SurvivalStop:
    """The stop rule for `DraftModelProposer(stop_rule=...)`: after drafting tokens with these confidences, stop
    unless survival * mean acceptance * (one target step) > one draft pass + one more verified position."""

    def __init__(self, calibration: Calibration, draft_step_s: float, target_pass_s: Sequence[float]):
        self.calibration, self.draft_step_s, self.passes = calibration, float(draft_step_s), list(target_pass_s)

    def __call__(self, confidences: list[float]) -> bool:
        survival = 1.0
        for c in confidences:
            survival *= self.calibration(c)
        k = len(confidences)
        extra = max(pass_seconds(self.passes, k + 2) - pass_seconds(self.passes, k + 1), 0.0)
        return survival * self.calibration.mean * self.passes[0] <= self.draft_step_s + extra


def build(request):
    """proposers=[predicted] (decode/proposers/registry.py): the draft model stopped by the stop rule fitted on the
    tune prompts (`SurvivalStop`, in request.stop_rule)."""
    return DraftModelProposer(request.draft, stop_rule=request.stop_rule)
