"""Intervals across prompts (decode/core/stats.py) and provenance (eval/shared/provenance.py)."""

import random

import pytest
from hypothesis import given, settings, strategies as st

from decode.core.stats import bootstrap_speedup_ci, percentile_interval, ratio_alpha_ci, ratio_of_sums_speedup

times = st.lists(st.floats(0.05, 5.0), min_size=1, max_size=12)


@settings(max_examples=25, deadline=None)
@given(times, st.integers(0, 10_000))
def test_the_speedup_interval_contains_the_point_and_is_ordered(base, seed):
    rng = random.Random(seed)
    spec = [b * rng.uniform(0.5, 2.0) for b in base]
    tokens = [rng.randint(1, 128) for _ in base]
    point = ratio_of_sums_speedup(base, spec, tokens, tokens)
    lo, hi = bootstrap_speedup_ci(base, spec, tokens, tokens, resamples=200, seed=seed)
    assert lo <= hi
    assert min(t / s for t, s in zip(base, spec)) - 1e-9 <= lo and hi <= max(t / s for t, s in zip(base, spec)) + 1e-9
    # the point estimate lies within the spread of per-prompt ratios (a ratio of sums is a weighted mean of them)
    assert min(t / s for t, s in zip(base, spec)) - 1e-9 <= point <= max(t / s for t, s in zip(base, spec)) + 1e-9


def test_identical_prompts_give_a_zero_width_interval_at_the_true_speedup():
    lo, hi = bootstrap_speedup_ci([2.0] * 8, [1.6] * 8, [100] * 8, [100] * 8)
    assert lo == pytest.approx(1.25) and hi == pytest.approx(1.25)


def test_the_interval_narrows_with_more_prompts_and_covers_the_truth():
    """Per-prompt speedups drawn around 1.2 with noise: with 64 prompts the interval is narrower than with 8, and
    over repeated experiments the 95% interval covers 1.2 about 95% of the time (at least 80 of 100 here)."""
    def experiment(n, seed):
        rng = random.Random(seed)
        base = [1.0] * n
        spec = [1.0 / max(0.3, rng.gauss(1.2, 0.15)) for _ in range(n)]
        return bootstrap_speedup_ci(base, spec, [64] * n, [64] * n, resamples=200, seed=seed)

    widths8 = [hi - lo for lo, hi in (experiment(8, s) for s in range(20))]
    widths64 = [hi - lo for lo, hi in (experiment(64, s) for s in range(20))]
    assert sum(widths64) < 0.5 * sum(widths8)
    covered = sum(lo <= 1.2 <= hi for lo, hi in (experiment(24, s) for s in range(100)))
    assert covered >= 80, covered


def test_paired_resampling_cancels_per_prompt_length():
    """Prompts of very different lengths but the same speedup each: pairing keeps the interval at that speedup."""
    base = [0.5, 4.0, 1.0, 8.0]
    spec = [b / 1.3 for b in base]
    tokens = [16, 128, 32, 256]
    assert bootstrap_speedup_ci(base, spec, tokens, tokens) == pytest.approx((1.3, 1.3))


def test_alpha_interval_and_percentiles():
    lo, hi = ratio_alpha_ci([3, 0, 5, 2], [10, 10, 10, 10])
    assert 0.0 <= lo <= 10 / 40 <= hi <= 0.5
    assert percentile_interval(list(range(101)), 0.9) == (5, 95)


def test_bad_inputs_fail_clearly():
    with pytest.raises(ValueError, match="same, non-zero number"):
        bootstrap_speedup_ci([1.0], [1.0, 2.0], [1], [1])
    with pytest.raises(ValueError, match="level"):
        bootstrap_speedup_ci([1.0], [1.0], [1], [1], level=1.5)
    with pytest.raises(ValueError, match="same, non-zero number"):
        ratio_alpha_ci([1], [])


def test_provenance_names_the_code_the_machine_and_the_exact_weights(tmp_path):
    from eval.shared.provenance import git_state, provenance, target_weights, weights_hash

    state = git_state()
    assert len(state["commit"]) == 40 and isinstance(state["dirty"], bool)
    assert git_state(tmp_path) == {"commit": None, "dirty": None}  # not a checkout: said, not guessed
    (tmp_path / "model.safetensors").write_bytes(b"abc")
    first = weights_hash(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"abd")
    assert weights_hash(tmp_path) != first and weights_hash(tmp_path / "missing") is None
    embedded = target_weights("embedded:smollm2-135m-instruct")
    assert embedded["sha256"].startswith("b179c952") and embedded["hub_original"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert target_weights(str(tmp_path))["weights_sha256"] == weights_hash(tmp_path)
    p = provenance("embedded:smollm2-135m-instruct", [str(tmp_path)])
    assert p["commit"] == state["commit"] and p["cpu_model"] and p["draft_weights_sha256"][str(tmp_path)]
