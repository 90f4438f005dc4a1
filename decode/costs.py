"""Measure, on the machine at hand, what one draft step and one k-token target pass cost (the cost model)."""

from __future__ import annotations

import statistics
import time

import torch

from decode.speculative import CachedLM


def _sync() -> None:
    if torch.cuda.is_available():  # GPU kernels run asynchronously: wait for them before reading the clock
        torch.cuda.synchronize()


def median_seconds(fn, repeats: int) -> float:
    """Median wall time of `fn()` over `repeats` calls, after one warm-up call (GPU work waited for)."""
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        _sync()
        t = time.perf_counter()
        fn()
        _sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure_costs(target, draft, context: list[int], max_k: int, repeats: int = 5) -> dict:
    """Median seconds of: one 1-token draft step, and a k-token target pass for k = 1..max_k, each after
    `context` is cached (rolled back after every call, so all timings see the same context length)."""
    out = {"context_tokens": len(context), "repeats": repeats}
    t_lm = CachedLM(target)
    t_lm.reset()
    t_lm.extend(context, keep=1)
    base = t_lm.length
    passes = []
    for k in range(1, max_k + 1):
        def run(k=k):
            t_lm.extend(context[-1:] * k)
            t_lm.rollback(base)
        passes.append(median_seconds(run, repeats))
    out["target_pass_s"] = passes
    if draft is not None:
        d_lm = CachedLM(draft, role="draft")
        d_lm.reset()
        d_lm.extend(context, keep=1)
        d_base = d_lm.length

        def step():
            d_lm.extend(context[-1:], keep=1)
            d_lm.rollback(d_base)
        out["draft_step_s"] = median_seconds(step, repeats)
        out["cost_ratio_c"] = out["draft_step_s"] / passes[0]
    return out
