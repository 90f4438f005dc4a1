"""Loss laws: zero when equal, the direction its name says, masking, chunking, and the acceptance proxies."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import math

from train.losses import (LOSSES, chunked_distill, expected_accept, forward_kl, get_loss, jsd, masked_mean, reverse_kl,
                          skew_kl, top1_agree, tvd)


def logits(*shape, seed=0, scale=3.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


def test_forward_kl_is_zero_when_draft_equals_target():
    t = logits(16, 50)
    assert torch.allclose(forward_kl(t.clone(), t), torch.zeros(16), atol=1e-5)


def test_forward_kl_is_kl_target_to_draft_as_in_f_kl_div():
    s, t = logits(8, 40, seed=1), logits(8, 40, seed=2)
    # F.kl_div(input=log q, target=p) computes KL(p || q): the target is the reference distribution.
    reference = F.kl_div(F.log_softmax(s, -1), F.log_softmax(t, -1), reduction="none", log_target=True).sum(-1)
    assert torch.allclose(forward_kl(s, t), reference, atol=1e-5)
    reverse = F.kl_div(F.log_softmax(t, -1), F.log_softmax(s, -1), reduction="none", log_target=True).sum(-1)
    assert not torch.allclose(forward_kl(s, t), reverse, atol=1e-3)  # KL is asymmetric: the direction matters


def test_forward_kl_temperature_matches_softened_kl_times_t_squared():
    s, t, temp = logits(4, 30, seed=3), logits(4, 30, seed=4), 2.0
    ref = F.kl_div(F.log_softmax(s / temp, -1), F.log_softmax(t / temp, -1), reduction="none",
                   log_target=True).sum(-1) * temp**2
    assert torch.allclose(forward_kl(s, t, temp), ref, atol=1e-5)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(2, 40), st.integers(0, 10_000), st.floats(0.25, 4.0))
def test_kl_nonnegative_and_accept_in_unit_interval(n, v, seed, temp):
    s, t = logits(n, v, seed=seed), logits(n, v, seed=seed + 1)
    assert (forward_kl(s, t, temp) >= -1e-5).all()
    acc = expected_accept(s, t)
    assert ((acc >= 0) & (acc <= 1 + 1e-6)).all()


def test_expected_accept_is_one_minus_total_variation():
    s, t = logits(10, 25, seed=5), logits(10, 25, seed=6)
    tv = 0.5 * (F.softmax(s, -1) - F.softmax(t, -1)).abs().sum(-1)
    assert torch.allclose(expected_accept(s, t), 1 - tv, atol=1e-6)
    assert torch.allclose(expected_accept(t, t), torch.ones(10), atol=1e-6)


def test_top1_agree():
    t = torch.tensor([[0.0, 5.0, 1.0], [3.0, 0.0, 1.0]])
    s = torch.tensor([[0.0, 2.0, 1.9], [0.0, 1.0, 0.0]])
    assert top1_agree(s, t).tolist() == [1.0, 0.0]


def test_masked_mean_ignores_masked_values_and_empty_mask():
    values = torch.tensor([1.0, 100.0, 3.0])
    assert masked_mean(values, torch.tensor([1, 0, 1])).item() == pytest.approx(2.0)
    assert masked_mean(values, torch.zeros(3)).item() == 0.0


def _heads(hidden=12, vocab=30):
    torch.manual_seed(0)
    return torch.nn.Linear(hidden, vocab, bias=False), torch.nn.Linear(hidden, vocab, bias=False)


def test_chunked_equals_unchunked_in_value_and_gradient():
    student_head, teacher_head = _heads()
    teacher_head.requires_grad_(False)
    sh = logits(3, 7, 12, seed=7, scale=1.0).requires_grad_(True)
    th = logits(3, 7, 12, seed=8, scale=1.0)
    mask = torch.rand(3, 7, generator=torch.Generator().manual_seed(9)) > 0.3
    results = []
    for chunk in (1, 4, 1000):
        sh.grad, student_head.weight.grad = None, None
        out = chunked_distill(sh, th, student_head, teacher_head, mask, forward_kl, 1.5, chunk)
        out["loss"].backward()
        results.append((out["loss"].detach(), sh.grad.clone(), student_head.weight.grad.clone()))
    # unchunked reference: full logits, masked mean
    ref = masked_mean(forward_kl(student_head(sh), teacher_head(th), 1.5), mask)
    for loss, g_hidden, g_weight in results:
        assert torch.allclose(loss, ref, atol=1e-5)
        assert torch.allclose(g_hidden, results[-1][1], atol=1e-6)
        assert torch.allclose(g_weight, results[-1][2], atol=1e-6)


def test_masked_positions_do_not_change_loss_or_receive_gradient():
    student_head, teacher_head = _heads()
    sh = logits(2, 5, 12, seed=10, scale=1.0).requires_grad_(True)
    th = logits(2, 5, 12, seed=11, scale=1.0)
    mask = torch.tensor([[1, 1, 0, 1, 0], [0, 1, 1, 1, 1]], dtype=torch.bool)
    out = chunked_distill(sh, th, student_head, teacher_head, mask, chunk_size=3)
    out["loss"].backward()
    assert torch.all(sh.grad[~mask] == 0)
    assert torch.all(sh.grad[mask].abs().sum(-1) > 0)
    th2 = th.clone()
    th2[~mask] = 1e3  # garbage where masked: no effect
    out2 = chunked_distill(sh.detach(), th2, student_head, teacher_head, mask, chunk_size=3)
    assert torch.allclose(out["loss"].detach(), out2["loss"], atol=1e-6)
    assert int(out["tokens"]) == int(mask.sum())


def test_chunked_metrics_match_direct_computation():
    student_head, teacher_head = _heads()
    sh, th = logits(2, 6, 12, seed=12, scale=1.0), logits(2, 6, 12, seed=13, scale=1.0)
    mask = torch.ones(2, 6, dtype=torch.bool)
    with torch.no_grad():
        out = chunked_distill(sh, th, student_head, teacher_head, mask, chunk_size=5, metrics=True)
        s, t = student_head(sh).reshape(-1, 30), teacher_head(th).reshape(-1, 30)
    assert out["expected_accept"].item() == pytest.approx(expected_accept(s, t).mean().item(), abs=1e-5)
    assert out["top1_agree"].item() == pytest.approx(top1_agree(s, t).mean().item(), abs=1e-6)
    assert out["kl"].item() == pytest.approx(forward_kl(s, t).mean().item(), abs=1e-5)


def test_bad_arguments_fail_clearly():
    with pytest.raises(ValueError, match="Unknown loss"):
        get_loss("nope")
    student_head, teacher_head = _heads()
    x = torch.zeros(1, 2, 12)
    with pytest.raises(ValueError, match="temperature"):
        chunked_distill(x, x, student_head, teacher_head, torch.ones(1, 2), temperature=0)
    with pytest.raises(ValueError, match="chunk_size"):
        chunked_distill(x, x, student_head, teacher_head, torch.ones(1, 2), chunk_size=0)


# --- the other divergences: reverse KL, JSD(beta), TVD, skew KL; cross-entropy mixing -------------------------

def _p(x, temp=1.0):
    return F.softmax(x.float() / temp, -1)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(LOSSES)), st.integers(1, 5), st.integers(2, 30), st.integers(0, 10_000),
       st.floats(0.5, 3.0))
def test_every_divergence_is_nonnegative_and_zero_only_when_equal(name, n, v, seed, temp):
    s, t = logits(n, v, seed=seed), logits(n, v, seed=seed + 1)
    fn = get_loss(name)
    assert torch.all(fn(s, t, temp) >= -1e-6)
    assert torch.allclose(fn(t.clone(), t, temp), torch.zeros(n), atol=1e-5)
    assert fn(s, t, temp).sum() > 0  # random s != t


def test_reverse_kl_is_kl_draft_to_target():
    s, t = logits(8, 40, seed=21), logits(8, 40, seed=22)
    assert torch.allclose(reverse_kl(s, t), forward_kl(t, s), atol=1e-5)  # KL(q||p): roles swapped
    assert torch.allclose(reverse_kl(s, t, 2.0), F.kl_div(F.log_softmax(t / 2, -1), F.log_softmax(s / 2, -1),
                                                           reduction="none", log_target=True).sum(-1) * 4, atol=1e-5)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5), st.integers(2, 30), st.integers(0, 10_000), st.floats(0.05, 0.95))
def test_jsd_matches_its_definition_and_is_bounded(n, v, seed, beta):
    s, t = logits(n, v, seed=seed), logits(n, v, seed=seed + 1)
    p, q = _p(t), _p(s)
    m = beta * p + (1 - beta) * q
    ref = beta * (p * (p / m).log()).sum(-1) + (1 - beta) * (q * (q / m).log()).sum(-1)
    assert torch.allclose(jsd(s, t, beta=beta), ref, atol=1e-4)
    entropy_bound = -(beta * math.log(beta) + (1 - beta) * math.log(1 - beta))  # JSD_beta <= H(beta)
    assert torch.all(jsd(s, t, beta=beta) <= entropy_bound + 1e-5)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 5), st.integers(2, 30), st.integers(0, 10_000), st.floats(0.05, 0.95), st.floats(0.5, 3.0))
def test_jsd_gradient_equals_autograd_on_the_definition(n, v, seed, beta, temp):
    """jsd computes its gradient by hand: it must equal autograd through the textbook formula."""
    s, t = logits(n, v, seed=seed), logits(n, v, seed=seed + 1)
    weights = torch.rand(n, generator=torch.Generator().manual_seed(seed))
    s1, s2 = s.clone().requires_grad_(True), s.clone().requires_grad_(True)
    (jsd(s1, t, temp, beta) * weights).sum().backward()
    p, q = _p(t / temp), _p(s2 / temp)
    m = beta * p + (1 - beta) * q
    ref = (beta * (p * (p / m).log()).sum(-1) + (1 - beta) * (q * (q / m).log()).sum(-1)) * temp**2
    (ref * weights).sum().backward()
    assert torch.allclose(s1.grad, s2.grad, atol=1e-5), (s1.grad - s2.grad).abs().max()


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 5), st.integers(2, 30), st.integers(0, 10_000), st.floats(0.5, 3.0))
def test_forward_kl_gradient_equals_autograd_on_the_definition(n, v, seed, temp):
    """forward_kl computes its gradient by hand: it must equal autograd through KL(p_T || q_T) T^2."""
    s, t = logits(n, v, seed=seed), logits(n, v, seed=seed + 1)
    weights = torch.rand(n, generator=torch.Generator().manual_seed(seed))
    s1, s2 = s.clone().requires_grad_(True), s.clone().requires_grad_(True)
    (forward_kl(s1, t, temp) * weights).sum().backward()
    log_p, log_q = F.log_softmax(t / temp, -1), F.log_softmax(s2 / temp, -1)
    ref = (log_p.exp() * (log_p - log_q)).sum(-1) * temp**2
    assert torch.allclose(forward_kl(s, t, temp), ref, atol=1e-5)
    (ref * weights).sum().backward()
    assert torch.allclose(s1.grad, s2.grad, atol=1e-5), (s1.grad - s2.grad).abs().max()


def test_forward_kl_is_finite_where_the_target_gives_a_token_no_mass():
    s = torch.tensor([[0.0, -200.0, 5.0]], requires_grad=True)
    t = torch.tensor([[0.0, -300.0, float("-inf")]])
    loss = forward_kl(s, t)
    loss.sum().backward()
    assert loss.isfinite().all() and s.grad.isfinite().all()


def test_jsd_gradient_is_finite_where_both_distributions_underflow():
    s = torch.tensor([[0.0, -200.0, 5.0]], requires_grad=True)
    t = torch.tensor([[0.0, -300.0, float("-inf")]])
    jsd(s, t).sum().backward()
    assert s.grad.isfinite().all() and jsd(s, t).isfinite().all()


def test_symmetric_jsd_is_symmetric():
    s, t = logits(6, 25, seed=31), logits(6, 25, seed=32)
    assert torch.allclose(jsd(s, t), jsd(t, s), atol=1e-6)
    assert not torch.allclose(jsd(s, t, beta=0.2), jsd(t, s, beta=0.2), atol=1e-4)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5), st.integers(2, 30), st.integers(0, 10_000))
def test_tvd_is_one_minus_expected_acceptance(n, v, seed):
    s, t = logits(n, v, seed=seed), logits(n, v, seed=seed + 1)
    assert torch.allclose(tvd(s, t), 1 - expected_accept(s, t), atol=1e-5)
    assert torch.all(tvd(s, t) <= 1 + 1e-6)
    assert torch.allclose(tvd(s, t), tvd(t, s), atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5), st.integers(2, 30), st.integers(0, 10_000), st.floats(0.01, 0.9))
def test_skew_kl_matches_definition_is_bounded_and_reduces_to_forward_kl(n, v, seed, skew):
    s, t = logits(n, v, seed=seed, scale=6.0), logits(n, v, seed=seed + 1, scale=6.0)
    p, q = _p(t), _p(s)
    m = skew * p + (1 - skew) * q
    assert torch.allclose(skew_kl(s, t, skew=skew), (p * (p / m).log()).sum(-1), atol=1e-4)
    assert torch.all(skew_kl(s, t, skew=skew) <= -math.log(skew) + 1e-5)  # m >= skew * p
    assert torch.allclose(skew_kl(s, t, skew=0.0), forward_kl(s, t), atol=1e-6)


def test_divergence_parameters_are_checked():
    s = logits(2, 5)
    with pytest.raises(ValueError, match="beta"):
        jsd(s, s, beta=1.0)
    with pytest.raises(ValueError, match="skew"):
        skew_kl(s, s, skew=1.0)
    assert get_loss("cross_entropy") is None  # the baseline: no divergence at all
    assert get_loss("jsd", beta=0.3)(s, s).shape == (2,)


def test_ce_weight_mixes_cross_entropy_and_needs_no_target_at_weight_one():
    student_head, teacher_head = _heads()
    sh, th = logits(2, 5, 12, seed=40, scale=1.0), logits(2, 5, 12, seed=41, scale=1.0)
    mask = torch.tensor([[1, 1, 0, 1, 0], [0, 1, 1, 1, 1]], dtype=torch.bool)
    nxt = torch.randint(0, 30, (2, 5), generator=torch.Generator().manual_seed(42))
    s_logits, t_logits = student_head(sh)[mask], teacher_head(th)[mask]
    ce = F.cross_entropy(s_logits, nxt[mask])
    kl = forward_kl(s_logits, t_logits).mean()
    with torch.no_grad():
        mixed = chunked_distill(sh, th, student_head, teacher_head, mask, chunk_size=2, next_tokens=nxt, ce_weight=0.3)
        only_ce = chunked_distill(sh, None, student_head, None, mask, chunk_size=2, next_tokens=nxt, ce_weight=1.0)
    assert mixed["loss"].item() == pytest.approx((0.7 * kl + 0.3 * ce).item(), abs=1e-5)
    assert only_ce["loss"].item() == pytest.approx(ce.item(), abs=1e-5)
    with pytest.raises(ValueError, match="next_tokens"):
        chunked_distill(sh, th, student_head, teacher_head, mask, ce_weight=0.5)
    with pytest.raises(ValueError, match="teacher_hidden"):
        chunked_distill(sh, None, student_head, None, mask, next_tokens=nxt, ce_weight=0.5)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_every_divergence_trains_the_draft_toward_the_target(name):
    """A few gradient steps on any divergence raise teacher-forced expected acceptance."""
    torch.manual_seed(0)
    t = logits(64, 20, seed=50)
    s = torch.zeros(64, 20, requires_grad=True)
    before = expected_accept(s.detach(), t).mean()
    opt = torch.optim.Adam([s], lr=0.1)
    for _ in range(60):
        opt.zero_grad()
        get_loss(name)(s, t).mean().backward()
        opt.step()
    assert expected_accept(s.detach(), t).mean() > before + 0.3


def test_the_config_checks_know_every_loss_and_its_parameters():
    """train/checks.py checks loss settings without torch: its table names exactly the losses train/losses.py has,
    and each parameter it allows is one the loss takes."""
    import inspect

    from train.checks import LOSS_PARAMS
    from train.losses import CROSS_ENTROPY, LOSSES, LossSettings

    assert set(LOSS_PARAMS) == set(LOSSES) | {CROSS_ENTROPY}
    for name, params in LOSS_PARAMS.items():
        if name != CROSS_ENTROPY:
            assert set(params) <= set(inspect.signature(LOSSES[name]).parameters), name
    settings = LossSettings.from_config({"name": "jsd", "params": {"beta": 0.3}}, {"unroll_steps": 3})
    assert (settings.params, settings.steps, settings.mixed_ce_weight) == ({"beta": 0.3}, 3, 0.0)
    assert LossSettings(CROSS_ENTROPY).mixed_ce_weight == 1.0
