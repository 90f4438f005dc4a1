"""The loss against a cached teacher (teacher=cache, train/teacher_cache.py): forward KL over the target's stored
top-k tokens and one outcome for everything else, with a hand-written gradient, and the agreement metrics it allows.

    loss = sparse_forward_kl(student_logits, teacher_ids, teacher_logp, teacher_tail).mean()
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class _SparseKL(torch.autograd.Function):
    """The k + 1 outcome KL and its gradient in one pass over the vocabulary. With q the draft's softmax and
    r the target's distribution spread over the vocabulary (p on the top-k ids; the tail mass shared out in
    proportion to q), d KL / d logits = q - r: on a tail token that is q_v (1 - p_tail / q_tail), on a top-k
    token q_v - p_v (q is scaled by the stored p's total mass, 1 up to float16 rounding, to stay exact). Only that gradient is kept (no autograd record of the full-vocabulary steps)."""

    @staticmethod
    def forward(ctx, student_logits, ids, log_p_top, log_p_tail):
        z = student_logits.float()
        peak = z.amax(-1, keepdim=True)
        e = torch.sub(z, peak).exp_()  # softmax numerators; the one (N, V) buffer
        e_top = e.gather(-1, ids)
        e.scatter_(-1, ids, 0.0)
        tail_e = e.sum(-1)
        log_s = (tail_e + e_top.sum(-1)).log()
        log_q_top = z.gather(-1, ids) - peak - log_s.unsqueeze(-1)
        log_q_tail = tail_e.log() - log_s  # -inf when the draft leaves nothing outside the top-k
        # no tail term when the top-k cover the vocabulary (q's tail is empty; p's is rounding) or p holds no tail
        has_tail = (log_p_tail > float("-inf")) & (tail_e > 0)
        p_top, p_tail = log_p_top.exp(), torch.where(has_tail, log_p_tail.exp(), 0.0)
        loss = (p_top * (log_p_top - log_q_top)).sum(-1) + torch.where(has_tail, p_tail * (log_p_tail - log_q_tail), 0.0)
        if ctx.needs_input_grad[0]:
            # mass = sum of p over the k + 1 outcomes: 1 up to the float16 rounding of the stored log-probs
            mass = (p_top.sum(-1) + p_tail).unsqueeze(-1)
            scale = mass * (-log_s).exp().unsqueeze(-1) - (p_tail / tail_e.clamp_min(torch.finfo(tail_e.dtype).tiny)
                                                           ).unsqueeze(-1)  # (mass - p_tail / q_tail) / S
            grad = e.mul_(scale).scatter_(-1, ids, log_q_top.exp() * mass - p_top)
            ctx.save_for_backward(grad)
            ctx.student_dtype = student_logits.dtype
        return loss

    @staticmethod
    def backward(ctx, grad_out):
        (grad,) = ctx.saved_tensors
        return (grad_out.unsqueeze(-1) * grad).to(ctx.student_dtype), None, None, None


def sparse_forward_kl(student_logits: torch.Tensor, teacher_ids: torch.Tensor, teacher_logp: torch.Tensor,
                      teacher_tail: torch.Tensor) -> torch.Tensor:
    """KL(p || q) over k + 1 outcomes (the target's top-k tokens and everything else), per token, shape (N,).

    student_logits (N, V); teacher_ids / teacher_logp (N, k); teacher_tail (N,) = log(1 - sum of top-k p).
    Differentiable with respect to the student's logits (a hand-written gradient, tested against autograd)."""
    return _SparseKL.apply(student_logits, teacher_ids.long(), teacher_logp.float(), teacher_tail.float())


def sparse_metrics(student_logits: torch.Tensor, teacher_ids: torch.Tensor, teacher_logp: torch.Tensor,
                   teacher_tail: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-token top1 agreement (exact) and sum-min acceptance over the k + 1 outcomes (an upper bound of the
    full-vocabulary expected acceptance), shape (N,) each."""
    q = F.softmax(student_logits.float(), dim=-1)
    q_top = q.gather(-1, teacher_ids.long())
    q_tail = (1 - q_top.sum(-1)).clamp_min(0)
    accept = torch.minimum(teacher_logp.float().exp(), q_top).sum(-1) + torch.minimum(teacher_tail.float().exp(), q_tail)
    top1 = (student_logits.argmax(-1) == teacher_ids[:, 0].long()).float()
    return {"top1_agree": top1, "expected_accept": accept}
