"""The cost model for llama.cpp (eval/llamacpp_costs.py): pure parts."""

import json

import pytest

from eval.llamacpp_costs import break_even, parse_bench, predicted_speedup, tokens_per_step


def test_prediction_from_pass_costs_and_acceptance():
    target = {1: 0.040, 2: 0.057, 3: 0.080, 4: 0.103, 5: 0.150}
    assert tokens_per_step(0.5, 4) == 3.0
    # 3 tokens a step; a step costs 4 draft passes of 15 ms and a 5-token pass of 150 ms: 3 x 40 / 210
    assert predicted_speedup(0.5, 4, target, 0.015) == pytest.approx(3 * 0.040 / 0.210)
    assert predicted_speedup(1.0, 1, target, 0.0) == pytest.approx(2 * 0.040 / 0.057)  # a free, perfect draft
    assert predicted_speedup(0.0, 2, target, 0.010) < 1  # nothing accepted never pays


def test_break_even_is_where_the_prediction_crosses_plain_decoding():
    target = {1: 0.040, 2: 0.057, 3: 0.080, 4: 0.103, 5: 0.150}
    for gamma, draft in ((1, 0.005), (2, 0.01), (4, 0.015)):
        share = break_even(gamma, target, draft)
        assert predicted_speedup(share, gamma, target, draft) == pytest.approx(1.0)
    assert break_even(4, target, 0.015) > 1  # a 4-token chain cannot pay even if every token is accepted
    assert predicted_speedup(1.0, 4, target, 0.015) < 1


def test_llama_bench_json_is_read_per_pass_length():
    text = json.dumps([{"n_prompt": 1, "n_gen": 0, "avg_ns": 40_000_000}, {"n_prompt": 4, "n_gen": 0,
                                                                             "avg_ns": 103_000_000},
                       {"n_prompt": 0, "n_gen": 16, "avg_ns": 1}])
    assert parse_bench(text) == {1: 0.040, 4: 0.103}
