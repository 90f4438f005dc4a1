"""The draft's LM head and a per-token loss in one pass, chunk by chunk, never keeping logits for backward.

For each chunk of tokens, the forward pass computes the logits once, the chunk's loss and its gradient with
respect to those logits (autograd on the chunk alone, which also runs a loss's hand-written gradient), and turns
that gradient at once into the gradients of the hidden states (G @ W) and, when the head is trainable, of its
weight and bias (G^T @ h, summed over chunks into one buffer). Only those are kept; the backward pass scales them.

The alternative, checkpointing each chunk, runs the head and the loss a second time in the backward pass: on the
default pair (576 hidden, 49k vocabulary, 4-layer draft) the head is the largest matmul of a training step, so
that saves a third of the head's cost and a whole evaluation of the loss. Peak memory stays at one chunk of logits.

Heads that are not a plain `torch.nn.Linear` (a wrapped or quantized head) take the checkpointed path.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

# chunk_fn(logits (n, V) float32, part: slice of the N tokens, record: whether to gather metrics) -> the chunk's
# summed loss, a 0-dim tensor. `record` is False only when a checkpointed chunk is recomputed.
ChunkFn = Callable[[torch.Tensor, slice, bool], torch.Tensor]


class _FusedHeadLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, chunk_fn: ChunkFn, chunk_size: int):
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.zeros_like(hidden) if need_h else None
        grad_w = torch.zeros_like(weight) if need_w else None
        grad_b = torch.zeros_like(bias) if need_b else None
        total = hidden.new_zeros((), dtype=torch.float32)
        for start in range(0, hidden.shape[0], chunk_size):
            part = slice(start, start + chunk_size)
            h = hidden[part]
            logits = F.linear(h, weight, bias).float()
            with torch.enable_grad():
                leaf = logits.requires_grad_()
                loss = chunk_fn(leaf, part, True)
                (g,) = torch.autograd.grad(loss, leaf)
            total += loss.detach().float()
            g = g.to(weight.dtype)
            if need_h:
                grad_h[part] = (g @ weight).to(hidden.dtype)
            if need_w:
                grad_w += (g.T @ h.to(weight.dtype)).to(weight.dtype)
            if need_b:
                grad_b += g.sum(0).to(bias.dtype)
        ctx.save_for_backward(grad_h, grad_w, grad_b)
        return total

    @staticmethod
    def backward(ctx, grad_out):
        return (*(None if g is None else g * grad_out.to(g.dtype) for g in ctx.saved_tensors), None, None)


def _plain(hidden: torch.Tensor, head: Callable, chunk_fn: ChunkFn, chunk_size: int) -> torch.Tensor:
    """Each chunk through the head and chunk_fn as is: values only under no_grad/inference mode, else a normal
    autograd record (then each chunk's logits stay alive until backward)."""
    total = hidden.new_zeros((), dtype=torch.float32)
    for start in range(0, hidden.shape[0], chunk_size):
        part = slice(start, start + chunk_size)
        total = total + chunk_fn(head(hidden[part]).float(), part, True)
    return total


def _checkpointed(hidden: torch.Tensor, head: Callable, chunk_fn: ChunkFn, chunk_size: int) -> torch.Tensor:
    """Any head, hidden states that need gradients: each chunk's logits are recomputed in the backward pass instead
    of kept. The recomputation calls `chunk_fn` again with `record=False`, so its metrics count each chunk once."""
    seen: set[int] = set()

    def run(h, part):
        record = part.start not in seen
        seen.add(part.start)
        return chunk_fn(head(h).float(), part, record)

    total = hidden.new_zeros((), dtype=torch.float32)
    for start in range(0, hidden.shape[0], chunk_size):
        part = slice(start, start + chunk_size)
        total = total + checkpoint(run, hidden[part], part, use_reentrant=False)
    return total


def head_loss(hidden: torch.Tensor, head: Callable, chunk_fn: ChunkFn, chunk_size: int = 1024) -> torch.Tensor:
    """Sum over chunks of `chunk_fn(head(hidden[part]), part, record)` for hidden states (N, H), differentiable with
    respect to `hidden` and the head's parameters, holding at most one (chunk_size, V) block of logits."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}.")
    params = list(head.parameters()) if isinstance(head, torch.nn.Module) else []
    if not (torch.is_grad_enabled() and (hidden.requires_grad or any(p.requires_grad for p in params))):
        return _plain(hidden, head, chunk_fn, chunk_size)  # validation: no_grad or inference mode
    if type(head) is torch.nn.Linear:
        return _FusedHeadLoss.apply(hidden, head.weight, head.bias, chunk_fn, chunk_size)
    if not hidden.requires_grad:  # only the head's own parameters train: nothing upstream to save memory for
        return _plain(hidden, head, chunk_fn, chunk_size)
    return _checkpointed(hidden, head, chunk_fn, chunk_size)
