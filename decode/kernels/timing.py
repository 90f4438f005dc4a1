"""Wall-clock timing that a shared machine cannot fool easily: calls taken in turns, GPU work waited for.

The cost model (decode/core/costs.py), the matmul layout choice (decode/kernels/fast_linear.py) and the draft
weight formats (decode/drafts/quantize.py) time their candidates with these."""

from __future__ import annotations

import statistics
import time

import torch


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
