"""Confidence intervals across prompts. Pure functions (plain Python floats; no torch).

A speedup is a ratio of sums: tokens/s speculative over tokens/s target-only, both over the same prompts. Prompts
differ (some continue into text the draft predicts well, some not), so the interval that says how much a figure
would move on another draw of prompts resamples prompts, keeping each prompt's two timings together (paired).
"""

from __future__ import annotations

import random
from typing import Sequence


def ratio_of_sums_speedup(base_s: Sequence[float], spec_s: Sequence[float], base_tokens: Sequence[int],
                          spec_tokens: Sequence[int]) -> float:
    """(sum spec_tokens / sum spec_s) / (sum base_tokens / sum base_s): the speedup over a set of prompts."""
    return (sum(spec_tokens) / sum(spec_s)) / (sum(base_tokens) / sum(base_s))


def bootstrap_speedup_ci(base_s: Sequence[float], spec_s: Sequence[float], base_tokens: Sequence[int],
                         spec_tokens: Sequence[int], level: float = 0.95, resamples: int = 2000,
                         seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of `ratio_of_sums_speedup`, resampling prompts with replacement (each prompt's
    target-only and speculative timings stay paired). With a single prompt the interval is that prompt's point."""
    n = len(base_s)
    if not n or not (len(spec_s) == len(base_tokens) == len(spec_tokens) == n):
        raise ValueError("bootstrap_speedup_ci needs the same, non-zero number of prompts in every sequence.")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}.")
    rng = random.Random(seed)
    stats = []
    for _ in range(resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        stats.append(ratio_of_sums_speedup([base_s[i] for i in idx], [spec_s[i] for i in idx],
                                           [base_tokens[i] for i in idx], [spec_tokens[i] for i in idx]))
    return percentile_interval(stats, level)


def percentile_interval(stats: Sequence[float], level: float) -> tuple[float, float]:
    """The (1-level)/2 and (1+level)/2 empirical quantiles of `stats` (nearest rank)."""
    s = sorted(stats)
    lo = s[max(0, int((1 - level) / 2 * len(s)))]
    hi = s[min(len(s) - 1, int((1 + level) / 2 * len(s)))]
    return lo, hi


def ratio_alpha_ci(accepted: Sequence[int], judged: Sequence[int], level: float = 0.95, resamples: int = 2000,
                   seed: int = 0) -> tuple[float, float]:
    """Interval of alpha = sum accepted / sum judged (judged = accepted + rejected), prompts resampled."""
    n = len(accepted)
    if not n or len(judged) != n:
        raise ValueError("ratio_alpha_ci needs the same, non-zero number of prompts in both sequences.")
    rng = random.Random(seed)
    stats = []
    for _ in range(resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        total = sum(judged[i] for i in idx)
        stats.append(sum(accepted[i] for i in idx) / total if total else float("nan"))
    stats = [x for x in stats if x == x]
    return percentile_interval(stats, level) if stats else (float("nan"), float("nan"))
