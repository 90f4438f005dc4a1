"""Interleaved timing (eval/timing.py): every arm decodes every prompt back to back, in a rotating order; each
prompt's time is its fastest pass; real models give the target's own greedy output in every arm."""

import pytest
import torch

import eval.timing as timing
from conftest import make_model
from decode.core.speculative import Generation, NoProposer, SamplingParams, generate_all
from decode.proposers.draft_model import DraftModelProposer


def test_arms_take_turns_in_a_rotating_order_and_times_are_per_prompt_medians(monkeypatch):
    calls, clock = [], iter(range(1, 10_000))

    def fake_generate(target, proposer, prompt, gamma, max_new, params, eos, generator, record):
        calls.append((proposer, prompt[0]))
        return Generation([7] * (3 if proposer == "b" else 2), [], 0.0, float(next(clock)))

    monkeypatch.setattr(timing, "generate", fake_generate)
    arms = [timing.Arm("a", "a", 0), timing.Arm("b", "b", 1), timing.Arm("c", "c", 2)]
    out = timing.timed_interleaved(None, arms, [[0], [1]], 8, repeats=3)
    assert [p for _, p in calls[:3]] == [0, 0, 0]  # warm-up: each arm once on the first prompt, untimed
    calls = calls[3:]
    assert len(calls) == 3 * 2 * 3
    # prompt by prompt: all three arms decode prompt 0, then prompt 1; the order rotates each time
    assert [p for _, p in calls[:6]] == [0, 0, 0, 1, 1, 1]
    firsts = [calls[k][0] for k in range(0, len(calls), 3)]
    assert firsts == ["a", "b", "b", "c", "c", "a"]
    times = {}  # the fake clock: the k-th call took k seconds (the 3 warm-ups were calls 1..3)
    for k, (arm, p) in enumerate(calls, 4):
        times.setdefault((arm, p), []).append(k)
    for arm in "abc":
        assert out[arm]["prompt_seconds"] == [min(times[(arm, p)]) for p in (0, 1)]  # the fastest of 3 passes
        assert out[arm]["new_tokens"] == (6 if arm == "b" else 4)
    with pytest.raises(ValueError, match="distinct"):
        timing.timed_interleaved(None, arms + arms[:1], [[0]], 8)


def test_each_prompt_keeps_the_prefill_of_its_fastest_pass(monkeypatch):
    clock = iter([5.0, 3.0, 4.0, 9.0, 1.0, 2.0])  # decode seconds of: warm-up, then prompt 0 and 1 per pass

    def fake_generate(target, proposer, prompt, gamma, max_new, params, eos, generator, record):
        decode = next(clock)
        return Generation([7], [], decode / 10, decode)  # prefill: a tenth of the decode time

    monkeypatch.setattr(timing, "generate", fake_generate)
    out = timing.timed_interleaved(None, [timing.Arm("a", "a", 0)], [[0], [1]], 8, repeats=2)["a"]
    assert out["prompt_seconds"] == pytest.approx([1.1 * 3.0, 1.1 * 1.0])  # pass 1 for prompt 0, pass 2 for 1
    assert out["prompt_prefill_seconds"] == pytest.approx([0.3, 0.1])


def test_real_models_interleaved_equal_separate_runs():
    torch.manual_seed(0)
    target, draft = make_model(64, seed=1), make_model(64, layers=1, seed=2)
    prompts = [[1, 2, 3, 4], [5, 6, 7]]
    arms = [timing.Arm("target", NoProposer(), 0), timing.Arm("spec", DraftModelProposer(draft), 3)]
    for t in (0.0, 1.0):
        params = SamplingParams(t)
        out = timing.timed_interleaved(target, arms, prompts, 12, params, seed=5, repeats=2)
        alone = generate_all(target, DraftModelProposer(draft), prompts, 3, 12, params, seed=5)
        assert out["spec"]["tokens"] == alone["tokens"]  # same seeds: the same draws as a separate run
        if t == 0:
            assert out["spec"]["tokens"] == out["target"]["tokens"]
        assert sum(out["spec"]["prompt_steps"]) == len(out["spec"]["steps"])
