"""Correctness laws of the speculative decoder (tiny random models, draft != target)."""

import pytest
import torch

from conftest import first_token_tv, make_model
from decode.core.metrics import (acceptance, best_gamma, expected_tokens_per_step, hardware_speedup, per_position_accept,
                            theoretical_speedup)
from hypothesis import given, settings, strategies as st

from decode.core.sampling import accept_reject, acceptance_probability, greedy_accept, logits_to_probs
from decode.core.speculative import CachedLM, NoProposer, SamplingParams, StepLog, generate
from decode.proposers.draft_model import DraftModelProposer

V = 300


@pytest.fixture(scope="module")
def pair():
    target = make_model(V, layers=3, hidden=32, seed=1, init=0.3)
    draft = make_model(V, layers=1, hidden=32, seed=2, init=0.3)
    return target, draft


def target_greedy(target, prompt, n):
    with torch.no_grad():
        out = target.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, min_new_tokens=n,
                              pad_token_id=0, eos_token_id=None)
    return out[0, len(prompt):].tolist()


@pytest.mark.parametrize("gamma", [1, 2, 4, 7])
def test_greedy_speculative_equals_target_greedy(pair, gamma):
    target, draft = pair
    for seed in range(3):
        prompt = torch.randint(3, V, (5 + seed,), generator=torch.Generator().manual_seed(seed)).tolist()
        reference = target_greedy(target, prompt, 24)
        spec = generate(target, DraftModelProposer(draft), prompt, gamma, 24)
        assert spec.tokens == reference
        plain = generate(target, NoProposer(), prompt, 0, 24)
        assert plain.tokens == reference and all(s.drafted == 0 for s in plain.steps)
        assert any(s.accepted < s.drafted for s in spec.steps)  # the draft really differs


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_draft_equal_to_target_accepts_everything(pair, gamma):
    target, _ = pair
    prompt = [5, 9, 17, 33]
    gen = generate(target, DraftModelProposer(target), prompt, gamma, 6 * (gamma + 1))
    stats = acceptance(gen.steps)
    assert stats["alpha"] == 1.0 and stats["tau"] == gamma + 1
    gen = generate(target, DraftModelProposer(target), prompt, gamma, 12, SamplingParams(temperature=1.0),
                   generator=torch.Generator().manual_seed(0))
    assert acceptance(gen.steps)["alpha"] == 1.0


def test_rollback_then_rerun_equals_fresh_forward(pair):
    target, _ = pair
    ids = torch.randint(3, V, (14,), generator=torch.Generator().manual_seed(4)).tolist()
    lm = CachedLM(target)
    lm.reset()
    assert lm.extend(ids[:6], keep=2).shape == (2, V)  # the LM head runs on the kept positions only
    lm.rollback(0)
    lm.extend(ids[:6])
    lm.extend([7, 8, 9, 10])  # drafted tokens that get rejected
    lm.rollback(6)
    assert lm.length == 6 and lm.cache.get_seq_length() == 6
    rerun = lm.extend(ids[6:])
    with torch.no_grad():
        fresh = target(torch.tensor([ids])).logits[0, 6:]
    assert torch.allclose(rerun, fresh, atol=1e-5)


def test_eos_and_max_new_tokens_stop_generation(pair):
    target, draft = pair
    prompt = [5, 6, 7]
    reference = target_greedy(target, prompt, 10)
    gen = generate(target, DraftModelProposer(draft), prompt, 4, 10, eos_token_ids={reference[3]})
    assert gen.tokens == reference[: reference.index(reference[3]) + 1]
    assert len(generate(target, DraftModelProposer(draft), prompt, 4, 7).tokens) == 7


def test_bad_arguments(pair):
    target, draft = pair
    with pytest.raises(ValueError, match="gamma"):
        generate(target, DraftModelProposer(draft), [1, 2], -1, 5)
    with pytest.raises(ValueError, match="temperature"):
        logits_to_probs(torch.zeros(4), temperature=-0.5)
    with pytest.raises(ValueError, match="top_p"):
        logits_to_probs(torch.zeros(4), temperature=1.0, top_p=1.5)
    with pytest.raises(ValueError, match="top_p"):
        logits_to_probs(torch.zeros(4), temperature=1.0, top_p=0.0)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6), st.integers(2, 5), st.data())
def test_greedy_accept_is_accept_reject_on_one_hot_distributions(gamma, vocab, data):
    drafted = data.draw(st.lists(st.integers(0, vocab - 1), min_size=gamma, max_size=gamma))
    target_argmax = data.draw(st.lists(st.integers(0, vocab - 1), min_size=gamma + 1, max_size=gamma + 1))
    q = torch.nn.functional.one_hot(torch.tensor(drafted), vocab).float()
    p = torch.nn.functional.one_hot(torch.tensor(target_argmax), vocab).float()
    assert greedy_accept(drafted, target_argmax) == accept_reject(torch.tensor(drafted), q, p)


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 8), st.floats(0.0, 2.0), st.integers(0, 10_000))
def test_acceptance_probability_laws(vocab, temperature, seed):
    g = torch.Generator().manual_seed(seed)
    p = logits_to_probs(torch.randn(5, vocab, generator=g) * 2, temperature)
    q = logits_to_probs(torch.randn(5, vocab, generator=g) * 2, temperature)
    beta = acceptance_probability(p, q)
    assert beta.shape == (5,)
    assert torch.allclose(beta, 1 - 0.5 * (p - q).abs().sum(-1), atol=1e-5)  # 1 - total variation
    assert torch.allclose(beta, acceptance_probability(q, p))
    assert torch.allclose(acceptance_probability(p, p), torch.ones(5), atol=1e-5)
    assert ((beta >= -1e-6) & (beta <= 1 + 1e-6)).all()
    if temperature == 0:  # greedy: accepted exactly when the argmaxes agree
        assert beta.tolist() == (p.argmax(-1) == q.argmax(-1)).float().tolist()


def test_acceptance_probability_is_the_rate_accept_reject_accepts():
    """Monte Carlo: accept_reject on one drafted token accepts with probability sum(min(p, q))."""
    g = torch.Generator().manual_seed(3)
    p = logits_to_probs(torch.randn(2, 7, generator=g) * 1.5, 1.0)
    q = logits_to_probs(torch.randn(1, 7, generator=g) * 1.5, 1.0)
    draws, accepted = 10_000, 0
    for _ in range(draws):
        accepted += accept_reject(torch.multinomial(q, 1, generator=g).squeeze(1), q, p, g)[0]
    expected = acceptance_probability(p[:1], q).item()
    assert abs(accepted / draws - expected) < 0.015, (accepted / draws, expected)  # 3 standard errors


def test_top_k_and_top_p_filtering():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert logits_to_probs(logits, 1.0, top_k=2).tolist() == pytest.approx([0.625, 0.375, 0, 0])
    assert logits_to_probs(logits, 1.0, top_p=0.8).tolist() == pytest.approx([0.625, 0.375, 0, 0])
    assert logits_to_probs(logits, 1.0, top_p=0.81).tolist() == pytest.approx([0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0])
    assert logits_to_probs(logits, 0.0).tolist() == [1, 0, 0, 0]


@pytest.mark.parametrize("temperature,top_p", [pytest.param(1.0, None, marks=pytest.mark.integration), (1.3, 0.9)])
def test_sampled_tokens_follow_the_target_distribution(temperature, top_p):
    """Emitted first token of a chain of gamma=3 drafts, over 10k draws: law equals the target's (TV <= 0.025, noise
    alone ~0.01), where the draft's own law is far from it."""
    vocab, draws, gamma = 6, 10_000, 3
    g = torch.Generator().manual_seed(0)
    t_logits = torch.randn(gamma + 1, vocab, generator=g) * 1.5
    d_logits = torch.randn(gamma, vocab, generator=g) * 1.5
    p = logits_to_probs(t_logits, temperature, top_p=top_p)
    q = logits_to_probs(d_logits, temperature, top_p=top_p)
    # q may put zero mass where p has some: the residual must cover it
    tv = first_token_tv(q, p, draws)
    assert tv <= 0.025, tv
    assert 0.5 * (q[0] - p[0]).abs().sum() > 0.1  # the test tells the draft's law from the target's


def test_metrics_on_hand_made_logs():
    steps = [StepLog(4, 4, 0, 0), StepLog(4, 1, 0, 0), StepLog(4, 0, 0, 0), StepLog(2, 2, 0, 0)]
    stats = acceptance(steps)
    # accepted 7; rejected: steps 2 and 3 stopped early -> 2; alpha = 7/9
    assert stats["alpha"] == pytest.approx(7 / 9)
    assert stats["accepted_per_proposed"] == pytest.approx(7 / 14)
    assert stats["tau"] == pytest.approx((7 + 4) / 4)
    # pos1: reached by 4 steps, accepted by 3; pos2: reached by steps with a>=1 (1,2,4) -> accepted 1 and 4
    # pos3: reached by steps 1 (d=4,a>=2) only (step 4 drafted 2) -> 1/1; pos4: step 1 -> 1/1
    assert per_position_accept(steps, 4) == pytest.approx([3 / 4, 2 / 3, 1.0, 1.0])
    assert acceptance([(3, 3), (3, 2)])["alpha"] == pytest.approx(5 / 6)


def test_cost_model():
    assert expected_tokens_per_step(1.0, 4) == 5
    assert expected_tokens_per_step(0.0, 4) == 1
    assert theoretical_speedup(0.8, 4, 0.0) == pytest.approx((1 - 0.8**5) / 0.2)
    assert theoretical_speedup(0.5, 2, 0.1) == pytest.approx(1.75 / 1.2)
    flat = [1.0] * 9  # a k-token target pass costs one step: classic case
    assert hardware_speedup(0.5, 2, 0.1, flat) == pytest.approx(theoretical_speedup(0.5, 2, 0.1))
    g, s = best_gamma(0.9, 0.05, flat)
    assert 1 <= g <= 8 and s == max(hardware_speedup(0.9, k, 0.05, flat) for k in range(1, 9))
    steep = [1.0 + k for k in range(9)]  # each extra verified token costs a whole step: never pays
    assert best_gamma(0.9, 0.05, steep)[1] < 1
    loose = best_gamma(0.9, 0.05, flat, tolerance=0.5)  # the smallest gamma expected within 50% of the best
    assert loose[0] < g and loose[1] >= s * 0.5 and best_gamma(0.9, 0.05, flat, tolerance=0.0) == (g, s)


def test_cost_timings_run_between_untimed_and_draft_steps_follow_target_passes(pair):
    import time

    from decode.core.costs import measure_costs
    from decode.kernels.timing import median_seconds

    calls = []
    seconds = median_seconds(lambda: calls.append("fn"), 3,
                             between=lambda: (calls.append("between"), time.sleep(0.05)))
    assert calls == ["fn"] + ["between", "fn"] * 3 and seconds < 0.05
    target, draft = pair
    order = []
    hooks = [model.register_forward_pre_hook(lambda *_, name=name: order.append(name))
             for name, model in (("target", target), ("draft", draft))]
    costs = measure_costs(target, draft, [5, 6, 7, 8], max_k=3, repeats=2)
    for hook in hooks:
        hook.remove()
    assert len(costs["target_pass_s"]) == 3 and costs["draft_step_s"] > 0
    assert order[-4:] == ["target", "draft", "target", "draft"]  # each timed draft step right after a target pass
    order.clear()
    shared = measure_costs(target, draft, [5, 6, 7, 8], max_k=3, repeats=2, target_pass_s=costs["target_pass_s"])
    assert shared["target_pass_s"] == costs["target_pass_s"]  # a second draft is judged on the same target timings


def test_median_seconds_each_takes_turns_so_a_burst_stays_out_of_the_medians():
    import time

    from decode.kernels.timing import median_seconds_each

    calls, slow = [], iter([0.0] * 4 + [0.2] * 3 + [0.0] * 100)  # a burst slows three calls in a row
    fns = [lambda name=name: (calls.append(name), time.sleep(next(slow))) for name in "ab"]
    a, b = median_seconds_each(fns, 5)
    assert calls == ["a", "b"] + ["a", "b"] * 5  # one warm-up each, then turns
    assert a < 0.1 and b < 0.1  # split between them, the burst is in neither median (back to back: in a's)


def test_sample_draws_each_row_from_its_law_and_never_a_zero():
    from decode.core.sampling import sample

    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3, 0.0], [0.0, 0.0, 0.0, 0.0, 2.0]])  # rows need not sum to 1
    g = torch.Generator().manual_seed(0)
    draws = torch.stack([sample(probs, g) for _ in range(40_000)])
    assert draws.shape == (40_000, 2) and (draws[:, 1] == 4).all()
    freq = torch.bincount(draws[:, 0], minlength=5) / 40_000
    assert freq[1] == 0 and freq[4] == 0
    assert 0.5 * (freq - probs[0]).abs().sum() < 0.01
    assert sample(probs[0], g).shape == ()  # one row in, one id out


def test_costs_are_timed_halfway_through_decoding():
    from decode.core.costs import decoding_context

    assert decoding_context([5, 6, 7], 8) == [5, 6, 7, 7, 7, 7, 7] and decoding_context([5], 1) == [5]
