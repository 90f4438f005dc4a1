"""Distillation losses and teacher-forced acceptance proxies. Pure torch: no Lightning, no Hydra.

Conventions: p is the target (teacher) distribution, q the draft (student). Per-token functions take
logits of shape (N, V) and return shape (N,). Everything is computed in fp32. `chunked_distill` applies
the output heads chunk by chunk over the masked tokens so a 150k vocabulary never materialises a
(batch, seq, vocab) tensor, and recomputes each chunk's draft logits in the backward pass.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def forward_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """KL(p_T || q_T) per token, times T^2 so gradients keep their scale across temperatures (Hinton)."""
    log_q = F.log_softmax(student_logits.float() / temperature, dim=-1)
    log_p = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    return (log_p.exp() * (log_p - log_q)).sum(-1) * temperature**2


LOSSES: dict[str, Callable[..., torch.Tensor]] = {"forward_kl": forward_kl}


def get_loss(name: str) -> Callable[..., torch.Tensor]:
    if name not in LOSSES:
        raise ValueError(f"Unknown loss '{name}'. Choose one of: {', '.join(sorted(LOSSES))}.")
    return LOSSES[name]


def expected_accept(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """Sum_v min(p, q): the probability that a token sampled from q is accepted (= 1 - TV distance)."""
    p = F.softmax(teacher_logits.float(), dim=-1)
    q = F.softmax(student_logits.float(), dim=-1)
    return torch.minimum(p, q).sum(-1)


def top1_agree(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """1.0 where the draft's argmax equals the target's argmax (greedy acceptance, teacher-forced)."""
    return (student_logits.argmax(-1) == teacher_logits.argmax(-1)).float()


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp_min(1)


def _chunk_loss(loss_fn, temperature, student_head, hidden, teacher_logits):
    return loss_fn(student_head(hidden).float(), teacher_logits, temperature).sum()


def chunked_distill(student_hidden: torch.Tensor, teacher_hidden: torch.Tensor, student_head: Callable,
                    teacher_head: Callable, mask: torch.Tensor, loss_fn: Callable = forward_kl,
                    temperature: float = 1.0, chunk_size: int = 1024,
                    metrics: bool = False) -> dict[str, torch.Tensor]:
    """Mean distillation loss over the tokens where `mask` is true, computed `chunk_size` tokens at a time.

    student_hidden / teacher_hidden: (..., H) final hidden states; heads map them to logits (..., V).
    Returns {"loss", "tokens"} and, with metrics=True, "kl" (forward KL at T=1), "top1_agree" and
    "expected_accept" (means over the same tokens, no gradient).
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}.")
    if temperature <= 0:
        raise ValueError(f"loss temperature must be > 0, got {temperature}.")
    keep = mask.bool()
    sh, th = student_hidden[keep], teacher_hidden[keep]
    n = sh.shape[0]
    total = student_hidden.new_zeros((), dtype=torch.float32)
    sums = {"kl": 0.0, "top1_agree": 0.0, "expected_accept": 0.0}
    for start in range(0, n, chunk_size):
        s_chunk = sh[start:start + chunk_size]
        with torch.no_grad():
            t_logits = teacher_head(th[start:start + chunk_size]).float()
        if torch.is_grad_enabled() and s_chunk.requires_grad:
            # recompute this chunk's draft logits in backward instead of keeping (chunk x vocab) floats alive
            total = total + checkpoint(_chunk_loss, loss_fn, temperature, student_head, s_chunk, t_logits,
                                       use_reentrant=False)
            s_logits = None
        else:
            s_logits = student_head(s_chunk).float()
            total = total + loss_fn(s_logits, t_logits, temperature).sum()
        if metrics:
            with torch.no_grad():
                if s_logits is None:
                    s_logits = student_head(s_chunk).float()
                sums["kl"] += forward_kl(s_logits, t_logits).sum().item()
                sums["top1_agree"] += top1_agree(s_logits, t_logits).sum().item()
                sums["expected_accept"] += expected_accept(s_logits, t_logits).sum().item()
    denom = max(n, 1)
    out = {"loss": total / denom, "tokens": torch.tensor(n)}
    if metrics:
        out.update({k: torch.tensor(v / denom) for k, v in sums.items()})
    return out
