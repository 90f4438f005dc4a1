"""The cost model for llama.cpp (eval/llamacpp_costs.py): pure parts."""

import json

import pytest

from eval.llamacpp_costs import break_even, break_even_draft_step, parse_bench, predicted_speedup, step_seconds, tokens_per_step


def test_prediction_from_pass_costs_and_acceptance():
    target = {1: 0.040, 2: 0.057, 3: 0.080, 4: 0.103, 5: 0.150}
    draft = {1: 0.015, 2: 0.020, 5: 0.045}
    assert tokens_per_step(0.5, 4) == 3.0
    # 3 tokens a step; a step costs the target's 5-token verify pass (150 ms), the draft's re-run of those 5 tokens
    # (45 ms) and 4 draft passes of 15 ms: 3 x 40 / 255
    assert step_seconds(4, target, draft) == pytest.approx(0.255)
    assert predicted_speedup(0.5, 4, target, draft) == pytest.approx(3 * 0.040 / 0.255)
    free = {1: 0.0, 2: 0.0}
    assert predicted_speedup(1.0, 1, target, free) == pytest.approx(2 * 0.040 / 0.057)  # a free, perfect draft
    assert predicted_speedup(0.0, 2, target, {1: 0.010, 3: 0.012}) < 1  # nothing accepted never pays
    # the re-run of the verify batch on the draft is a cost of its own: a dearer k-token draft pass predicts less
    assert predicted_speedup(0.8, 1, target, {1: 0.01, 2: 0.02}) < predicted_speedup(0.8, 1, target, {1: 0.01, 2: 0.01})


def test_break_even_is_where_the_prediction_crosses_plain_decoding():
    target = {1: 0.040, 2: 0.057, 3: 0.080, 4: 0.103, 5: 0.150}
    for gamma, draft in ((1, {1: 0.005, 2: 0.006}), (2, {1: 0.01, 3: 0.013}), (4, {1: 0.015, 5: 0.03})):
        share = break_even(gamma, target, draft)
        assert predicted_speedup(share, gamma, target, draft) == pytest.approx(1.0)
    assert break_even(4, target, {1: 0.015, 5: 0.03}) > 1  # a 4-token chain cannot pay even if all are accepted
    assert predicted_speedup(1.0, 4, target, {1: 0.015, 5: 0.03}) < 1


def test_the_dearest_draft_that_still_pays_matches_plain_decoding_exactly():
    target = {1: 0.040, 2: 0.057, 3: 0.080, 4: 0.103, 5: 0.150}
    for gamma, share, draft in ((1, 0.8, {1: 0.02, 2: 0.026}), (2, 0.6, {1: 0.01, 3: 0.015})):
        step = break_even_draft_step(share, gamma, target, draft)
        scaled = {k: v * step / draft[1] for k, v in draft.items()}  # the same draft, made cheaper or dearer
        assert predicted_speedup(share, gamma, target, scaled) == pytest.approx(1.0)
    assert break_even_draft_step(0.0, 4, target, {1: 0.01, 5: 0.02}) < 0  # nothing accepted: no draft is cheap enough


def test_llama_bench_json_is_read_per_pass_length():
    text = json.dumps([{"n_prompt": 1, "n_gen": 0, "avg_ns": 40_000_000}, {"n_prompt": 4, "n_gen": 0,
                                                                             "avg_ns": 103_000_000},
                       {"n_prompt": 0, "n_gen": 16, "avg_ns": 1}])
    assert parse_bench(text) == {1: 0.040, 4: 0.103}
