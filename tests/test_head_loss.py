"""The fused head + loss pass equals plain autograd over full logits, for trainable, frozen and non-Linear heads."""

import pytest
import torch
import torch.nn.functional as F

from decode.kernels.runtime import keep_freed_memory, setup_cpu
from train.head_loss import head_loss
from train.losses import forward_kl


def _setup(bias: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    head = torch.nn.Linear(8, 20, bias=bias)
    with torch.no_grad():
        head.weight.copy_(torch.randn(20, 8, generator=g))
        if bias:
            head.bias.copy_(torch.randn(20, generator=g))
    hidden = torch.randn(11, 8, generator=g)
    teacher = torch.randn(11, 20, generator=g) * 2
    nxt = torch.randint(0, 20, (11,), generator=g)
    return head, hidden, teacher, nxt


def _loss(logits, teacher, nxt):
    return 0.7 * forward_kl(logits, teacher, 1.5).sum() + 0.3 * F.cross_entropy(logits, nxt, reduction="sum")


def _grads(head, hidden, fn):
    head.zero_grad()
    h = hidden.clone().requires_grad_(True)
    loss = fn(h)
    (3.0 * loss).backward()  # a scaled loss: the backward pass must scale what the forward pass kept
    params = [p.grad.clone() if p.grad is not None else None for p in head.parameters()]
    return loss.detach(), h.grad, params


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("chunk", [1, 4, 100])
@pytest.mark.parametrize("wrap", [False, True])
def test_fused_and_checkpointed_heads_equal_full_logits_autograd(bias, chunk, wrap):
    head, hidden, teacher, nxt = _setup(bias)
    calls = []

    def chunk_fn(logits, part, record):
        if record:
            calls.append(part.start)
        return _loss(logits, teacher[part], nxt[part])

    used = torch.nn.Sequential(head) if wrap else head  # a non-Linear head takes the checkpointed path
    got = _grads(head, hidden, lambda h: head_loss(h, used, chunk_fn, chunk))
    ref = _grads(head, hidden, lambda h: _loss(head(h), teacher, nxt))
    assert torch.allclose(got[0], ref[0], atol=1e-4)
    assert torch.allclose(got[1], ref[1], atol=1e-5)
    for a, b in zip(got[2], ref[2]):
        assert torch.allclose(a, b, atol=1e-4)
    assert sorted(calls) == list(range(0, 11, chunk))  # metrics see every chunk exactly once


def test_frozen_head_gets_no_gradient_and_no_grad_mode_just_computes():
    head, hidden, teacher, nxt = _setup(bias=False)
    head.requires_grad_(False)
    fn = lambda logits, part, record: _loss(logits, teacher[part], nxt[part])  # noqa: E731
    got = _grads(head, hidden, lambda h: head_loss(h, head, fn, 3))
    ref = _grads(head, hidden, lambda h: _loss(head(h), teacher, nxt))
    assert head.weight.grad is None and torch.allclose(got[1], ref[1], atol=1e-5)
    with torch.no_grad():
        assert torch.allclose(head_loss(hidden, head, fn, 3), ref[0], atol=1e-4)


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
def test_trainable_head_in_validation_modes_just_computes_the_loss(mode):
    """Lightning validates under inference mode: a trainable head must not attempt any gradient work there."""
    head, hidden, teacher, nxt = _setup(bias=True)
    fn = lambda logits, part, record: _loss(logits, teacher[part], nxt[part])  # noqa: E731
    with mode():
        got = head_loss(hidden, head, fn, 4)
    assert torch.allclose(got, _loss(head(hidden), teacher, nxt).detach(), atol=1e-4)
    with pytest.raises(ValueError, match="chunk_size"):
        head_loss(hidden, head, fn, 0)


def test_cpu_setup_sets_threads_and_keeps_freed_memory_on_glibc():
    before = torch.get_num_threads()
    try:
        setup_cpu(1, keep_memory=True)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    import platform
    if platform.libc_ver()[0] == "glibc":
        assert keep_freed_memory() is True
