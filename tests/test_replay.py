"""decode/core/replay.py: greedy decoding replayed on the target's path gives the decoder's own steps."""

import pytest
import torch

from conftest import make_model
from decode.core.metrics import replayed_speedup
from decode.core.replay import best_rule, draft_positions, replay_steps
from decode.core.speculative import NoProposer, generate
from decode.proposers.draft_model import DraftModelProposer

V = 300


@pytest.fixture(scope="module")
def pair():
    return make_model(V, layers=3, hidden=32, seed=1, init=0.3), make_model(V, layers=1, hidden=32, seed=2, init=0.3)


def paths(target, n=3, new=30):
    prompts = [torch.randint(3, V, (4 + i,), generator=torch.Generator().manual_seed(i)).tolist() for i in range(n)]
    return prompts, [generate(target, NoProposer(), p, 0, new).tokens for p in prompts]


@pytest.mark.parametrize("gamma", [1, 2, 5])
def test_replay_is_the_decoders_steps_without_a_threshold(pair, gamma):
    target, draft = pair
    prompts, continuations = paths(target)
    replayed = replay_steps(draft_positions(draft, prompts, continuations), gamma)
    real = [(s.drafted, s.accepted) for p in prompts
            for s in generate(target, DraftModelProposer(draft), p, gamma, 30).steps]
    assert replayed == real and any(a < d for d, a in real)


@pytest.mark.parametrize("gamma,threshold", [(3, 0.1), (6, 0.2)])
def test_with_a_threshold_accepted_counts_are_exact(pair, gamma, threshold):
    """Drafted counts are exact in steps that kept every drafted token; past a rejection they are estimates."""
    target, draft = pair
    prompts, continuations = paths(target)
    replayed = replay_steps(draft_positions(draft, prompts, continuations), gamma, threshold)
    real = [(s.drafted, s.accepted) for p in prompts
            for s in generate(target, DraftModelProposer(draft, threshold), p, gamma, 30).steps]
    assert [a for _, a in replayed] == [a for _, a in real]
    assert all(r == s for r, s in zip(replayed, real) if s[0] == s[1])
    assert min(d for d, _ in real[:-1]) < gamma  # the threshold did stop drafts


def test_replay_on_hand_made_positions_and_best_rule():
    sure, unsure = (0.9, True), (0.3, False)
    path = [sure, sure, unsure, sure, (0.95, False), sure]
    # the last token is never drafted (the decoder drafts at most max_new_tokens - generated - 1)
    assert replay_steps([path], 2) == [(2, 2), (2, 1), (0, 0)]
    assert replay_steps([path], 4, threshold=0.5) == [(3, 2), (2, 1), (0, 0)]  # stopped after the unsure token
    assert replay_steps([path], 4, threshold=0.95) == [(1, 1), (1, 0), (1, 1), (0, 0)]
    flat = [1.0] * 5  # a k-token pass costs one step and drafting is free: the best rule emits most per step
    best = best_rule([path, path], 0.0, flat, 4, thresholds=[0.0, 0.5])
    assert best["expected_speedup"] == best["best_expected_speedup"] == pytest.approx(2.0)
    assert (best["gamma"], best["confidence_threshold"]) == (2, 0.0)  # the simplest of the rules that tie
    # gamma=1 expects 1.5 here: within a 30% tolerance, the simplest rule wins
    loose = best_rule([path, path], 0.0, flat, 4, thresholds=[0.0, 0.5], tolerance=0.3)
    assert (loose["gamma"], loose["expected_speedup"], loose["best_expected_speedup"]) == (1, 1.5, 2.0)
    steep = [1.0 + k for k in range(5)]  # each verified token costs a whole step: gamma=1 is least bad
    best = best_rule([path], 0.1, steep, 4, thresholds=[0.0, 0.5])
    assert best["gamma"] == 1 and best["expected_speedup"] == pytest.approx(
        replayed_speedup(replay_steps([path], 1), 0.1, steep))
