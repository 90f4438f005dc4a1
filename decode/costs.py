"""Measure, on the machine at hand, what one draft step and one k-token target pass cost (the cost model)."""

from __future__ import annotations

import statistics
import time

import torch

from decode.feature_decoding import step_timer
from decode.feature_drafts import is_feature_draft
from decode.speculative import CachedLM


def _sync() -> None:
    if torch.cuda.is_available():  # GPU kernels run asynchronously: wait for them before reading the clock
        torch.cuda.synchronize()


def median_seconds(fn, repeats: int, between=None) -> float:
    """Median wall time of `fn()` over `repeats` calls, after one warm-up call (GPU work waited for).
    `between()`, if given, runs untimed before each timed call."""
    return median_seconds_each([fn], repeats, between)[0]


def seconds_in_turns(fns: list, repeats: int, between=None) -> list[list[float]]:
    """Per function, the wall times of `repeats` calls, after one warm-up call each (GPU work waited for). The
    functions take turns call by call, so a burst of load from elsewhere on a shared machine slows one call of
    several functions instead of every call of one (timed back to back, a burst lasting the repeats once made the
    cost model promise far more than decoding then delivered).
    `between()`, if given, runs untimed before each timed call."""
    for fn in fns:
        fn()  # warm-up
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, seen in zip(fns, times):
            if between is not None:
                between()
            _sync()
            t = time.perf_counter()
            fn()
            _sync()
            seen.append(time.perf_counter() - t)
    return times


def median_seconds_each(fns: list, repeats: int, between=None) -> list[float]:
    """Per function, its median wall time over `repeats` calls taken in turns (seconds_in_turns)."""
    return [statistics.median(seen) for seen in seconds_in_turns(fns, repeats, between)]


def fastest_ms(fns: dict, repeats: int) -> dict[str, float]:
    """Per named function, its fastest of `repeats` calls taken in turns (seconds_in_turns), in milliseconds: a burst
    of load slows one call of each, and the minimum leaves it out. For choosing between ways of doing the same work."""
    times = seconds_in_turns(list(fns.values()), repeats)
    return {name: round(min(seen) * 1e3, 2) for name, seen in zip(fns, times)}


def decoding_context(prompt: list[int], max_new_tokens: int) -> list[int]:
    """The prompt padded to its length halfway through decoding, to time passes at: a k-token pass costs more as the
    KV cache grows, the more so the larger k (docs/results.md). Attention cost depends on the length, not on the
    tokens."""
    return prompt + prompt[-1:] * (max_new_tokens // 2)


def cached_pass(model, context: list[int], role: str = "verify", keep: int | None = None):
    """A callable running one k-token pass of `model` after `context` is cached (`pass_(k)`), rolled back after every
    call, so every call sees the same context length. `keep`: logits rows kept (1 for a draft step)."""
    lm = CachedLM(model, role=role)
    lm.reset()
    lm.extend(context, keep=1)
    base = lm.length

    def pass_(k: int = 1) -> None:
        lm.extend(context[-1:] * k, keep=keep)
        lm.rollback(base)
    return pass_


def measure_costs(target, draft, context: list[int], max_k: int, repeats: int = 5,
                  target_pass_s: list[float] | None = None) -> dict:
    """Median seconds of: one 1-token draft step, and a k-token target pass for k = 1..max_k, each after
    `context` is cached (rolled back after every call, so all timings see the same context length). The k-token
    passes take turns (median_seconds_each). `target_pass_s` reuses passes timed before (for another draft of the
    same target and context), so several drafts are judged against the same target timings.

    As in decoding, each timed draft step follows a target pass: the target's pass pushes the draft's weights out
    of the CPU's caches, so a draft step timed alone is too cheap. Target passes are timed back to back, as in
    target-only decoding; a preceding draft step did not change them."""
    out = {"context_tokens": len(context), "repeats": repeats}
    target_pass = cached_pass(target, context)
    passes = list(target_pass_s) if target_pass_s else median_seconds_each(
        [lambda k=k: target_pass(k) for k in range(1, max_k + 1)], repeats)
    out["target_pass_s"] = passes
    if draft is not None and is_feature_draft(draft):  # one Medusa head / one EAGLE slot, no model pass
        out["draft_step_s"] = median_seconds(step_timer(draft, len(context)), repeats,
                                             between=lambda: target_pass(min(2, max_k)))
        out["cost_ratio_c"] = out["draft_step_s"] / passes[0]
    elif draft is not None:
        out["draft_step_s"] = median_seconds(cached_pass(draft, context, "draft", keep=1), repeats,
                                             between=lambda: target_pass(min(2, max_k)))
        out["cost_ratio_c"] = out["draft_step_s"] / passes[0]
    return out
