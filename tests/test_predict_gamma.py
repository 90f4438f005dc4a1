"""Per-step gamma predicted from the draft's calibrated confidence (decode/proposers/predict_gamma.py)."""

import random

import pytest

from conftest import make_model
from decode.core.speculative import NoProposer, generate
from decode.proposers.draft_model import DraftModelProposer
from decode.proposers.predict_gamma import Calibration, SurvivalStop, fit_calibration, pool_adjacent_violators


@pytest.mark.parametrize("seed", range(10))
def test_pool_adjacent_violators_is_monotone_and_keeps_the_weighted_mean(seed):
    rng = random.Random(seed)
    values = [rng.random() for _ in range(rng.randint(1, 12))]
    weights = [rng.randint(1, 5) for _ in values]
    out = pool_adjacent_violators(values, weights)
    assert all(a <= b + 1e-12 for a, b in zip(out, out[1:]))
    mean = lambda xs: sum(x * w for x, w in zip(xs, weights)) / sum(weights)  # noqa: E731
    assert mean(out) == pytest.approx(mean(values))
    assert pool_adjacent_violators(sorted(values), weights) == sorted(values)  # already monotone: unchanged


def test_calibration_follows_how_often_confident_tokens_are_accepted():
    rng = random.Random(0)
    positions = [[(c, rng.random() < c) for c in (rng.random() for _ in range(500))]]  # accepted w.p. = confidence
    calib = fit_calibration(positions, bins=5)
    assert len(calib.rates) == 5 and calib.rates == sorted(calib.rates)
    assert calib(0.05) < 0.3 < 0.7 < calib(0.95)
    assert calib.mean == pytest.approx(sum(a for _, a in positions[0]) / 500)
    with pytest.raises(ValueError, match="logged positions"):
        fit_calibration([[]])


def test_survival_stop_weighs_the_chain_against_the_costs():
    calib = Calibration([0.0, 0.5], [0.2, 0.9], 0.5)
    passes = [1.0, 1.0, 1.0, 1.0, 1.0]
    cheap, dear = SurvivalStop(calib, 0.05, passes), SurvivalStop(calib, 0.6, passes)
    assert not cheap([0.9]) and not cheap([0.9, 0.9]) and cheap([0.1, 0.1])  # 0.9*0.5 > 0.05; 0.04*0.5 < 0.05
    assert dear([0.9])  # a draft pass dearer than half a target step never pays for a second token


def test_greedy_output_is_the_targets_and_gamma_varies_per_step():
    target, draft = make_model(64, layers=2, seed=11, init=0.3), make_model(64, layers=1, seed=12, init=0.3)
    prompt = [5, 9, 14, 3, 22]
    reference = generate(target, NoProposer(), prompt, 0, 40).tokens
    stop = SurvivalStop(Calibration([0.0, 0.3, 0.6], [0.1, 0.5, 0.95], 0.5), 0.05, [1.0] * 10)
    gen = generate(target, DraftModelProposer(draft, stop_rule=stop), prompt, 6, 40)
    assert gen.tokens == reference
    assert len({s.drafted for s in gen.steps[:-1]}) >= 2  # the rule chose different lengths
