"""Loss laws: zero when equal, the direction its name says, masking, chunking, and the acceptance proxies."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from train.losses import chunked_distill, expected_accept, forward_kl, get_loss, masked_mean, top1_agree


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
