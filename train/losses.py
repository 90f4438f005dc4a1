"""Distillation losses and teacher-forced acceptance proxies. Pure torch: no Lightning, no Hydra.

Conventions: p is the target (teacher) distribution, q the draft (student). Per-token functions take
logits of shape (N, V) and return shape (N,). Everything is computed in fp32. `chunked_distill` applies
the output heads chunk by chunk over the masked tokens so a 150k vocabulary never materialises a
(batch, seq, vocab) tensor; train/head_loss.py forms each chunk's gradient in the forward pass and keeps no logits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import functools
import math
from typing import Callable

import torch
import torch.nn.functional as F

from train.head_loss import head_loss


def _log_probs(student_logits, teacher_logits, temperature):
    return (F.log_softmax(student_logits.float() / temperature, dim=-1),
            F.log_softmax(teacher_logits.float() / temperature, dim=-1))


def _kl(log_a: torch.Tensor, log_b: torch.Tensor) -> torch.Tensor:
    """KL(a || b) per row from log-probabilities; 0 * log 0 counts as 0."""
    return torch.where(log_a.isfinite(), log_a.exp() * (log_a - log_b), 0.0).sum(-1)


class _ForwardKL(torch.autograd.Function):
    """KL(p_T || q_T) * T^2 with its gradient T (q_T - p_T), formed in the forward pass (see _JSD)."""

    @staticmethod
    def forward(ctx, student_logits, teacher_logits, temperature: float):
        floor = torch.finfo(torch.float32).min  # clamp -inf log-probs so that 0 * log 0 counts as 0
        log_q = F.log_softmax(_scaled(student_logits, temperature), dim=-1).clamp_min_(floor)
        log_p = F.log_softmax(_scaled(teacher_logits, temperature), dim=-1).clamp_min_(floor)
        p = log_p.exp()
        diff = torch.sub(log_p, log_q)
        loss = torch.linalg.vecdot(p, diff) * temperature**2
        if ctx.needs_input_grad[0]:
            ctx.save_for_backward(torch.exp(log_q, out=diff).sub_(p).mul_(temperature))
            ctx.student_dtype = student_logits.dtype
        return loss

    @staticmethod
    def backward(ctx, grad_out):
        (grad,) = ctx.saved_tensors
        return (grad_out.unsqueeze(-1) * grad).to(ctx.student_dtype), None, None


def _scaled(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = logits.float()
    return logits if temperature == 1 else logits / temperature


def forward_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """KL(p_T || q_T) per token, times T^2 so gradients keep their scale across temperatures (Hinton).
    Mass-covering: the draft is punished wherever the target puts mass it misses. Gradients flow to the draft's
    logits only (a hand-written gradient, tested against autograd on the definition)."""
    return _ForwardKL.apply(student_logits, teacher_logits.detach(), float(temperature))


def reverse_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """KL(q_T || p_T) per token, times T^2. Mode-seeking: the draft concentrates on what the target is sure of."""
    log_q, log_p = _log_probs(student_logits, teacher_logits, temperature)
    return _kl(log_q, log_p) * temperature**2


class _JSD(torch.autograd.Function):
    """JSD_beta with its gradient written out: the forward pass computes the loss and d loss / d student logits
    together and keeps only that gradient, so the backward pass is one multiplication (about half the time and
    memory of letting autograd record every full-vocabulary step). The target's logits are constants."""

    @staticmethod
    def forward(ctx, student_logits, teacher_logits, temperature: float, beta: float):
        log_q = F.log_softmax(student_logits.float() / temperature, dim=-1)
        log_p = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
        p, q = log_p.exp(), log_q.exp()
        m = beta * p + (1 - beta) * q
        log_m = m.clamp_min(torch.finfo(m.dtype).tiny).log()  # 0 log 0 = 0, and finite everywhere
        # beta KL(p||m) + (1-beta) KL(q||m) = beta sum p log p + (1-beta) sum q log q - sum m log m
        loss = (beta * torch.where(p > 0, p * log_p, 0.0).sum(-1) + (1 - beta) * (q * log_q).sum(-1)
                - (m * log_m).sum(-1))
        # d loss / d q_v = (1-beta)(log q_v - log m_v); through the softmax at temperature T, times T^2:
        d = log_q - log_m
        grad = q * (d - (q * d).sum(-1, keepdim=True)) * ((1 - beta) * temperature)
        ctx.save_for_backward(grad)
        ctx.student_dtype = student_logits.dtype
        return loss.clamp_min(0) * temperature**2

    @staticmethod
    def backward(ctx, grad_out):
        (grad,) = ctx.saved_tensors
        return (grad_out.unsqueeze(-1) * grad).to(ctx.student_dtype), None, None, None


def jsd(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0,
        beta: float = 0.5) -> torch.Tensor:
    """Generalized Jensen-Shannon divergence, times T^2:
    beta * KL(p || m) + (1 - beta) * KL(q || m) with the mixture m = beta * p + (1 - beta) * q.
    beta = 0.5 is the symmetric JSD (bounded by ln 2); small beta weighs the draft's side.
    Gradients flow to the draft's logits only (tests check them against autograd on the definition)."""
    if not 0 < beta < 1:
        raise ValueError(f"jsd beta must be in (0, 1), got {beta}.")
    return _JSD.apply(student_logits, teacher_logits.detach(), float(temperature), float(beta))


def tvd(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Total variation distance 0.5 * sum |p - q| = 1 - sum min(p, q): exactly one minus the probability that
    a token drawn from the draft is accepted (at T = 1). Not rescaled: it is bounded by 1."""
    log_q, log_p = _log_probs(student_logits, teacher_logits, temperature)
    return 0.5 * (log_p.exp() - log_q.exp()).abs().sum(-1)


def skew_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0,
            skew: float = 0.1) -> torch.Tensor:
    """Skew forward KL, KL(p || skew * p + (1 - skew) * q), times T^2 (DistiLLM). skew = 0 is forward KL;
    a positive skew bounds the loss by -log(skew) and keeps gradients finite where q ~ 0."""
    if not 0 <= skew < 1:
        raise ValueError(f"skew_kl skew must be in [0, 1), got {skew}.")
    log_q, log_p = _log_probs(student_logits, teacher_logits, temperature)
    if skew == 0:
        return _kl(log_p, log_q) * temperature**2
    log_m = torch.logsumexp(torch.stack([log_p + math.log(skew), log_q + math.log(1 - skew)]), dim=0)
    return _kl(log_p, log_m) * temperature**2


LOSSES: dict[str, Callable[..., torch.Tensor]] = {"forward_kl": forward_kl, "reverse_kl": reverse_kl, "jsd": jsd,
                                                  "tvd": tvd, "skew_kl": skew_kl}
@dataclass(frozen=True)
class LossSettings:
    """Everything a distillation loss is configured by (conf/loss/*.yaml; for feature drafts also how their heads or
    depths weigh and how many depths training-time test unrolls: model.draft.loss_decay, unroll_steps)."""
    name: str = "forward_kl"
    temperature: float = 1.0
    chunk_size: int = 1024
    ce_weight: float = 0.0
    params: dict = field(default_factory=dict)
    decay: float = 0.8
    steps: int = 1

    @classmethod
    def from_config(cls, loss, draft=None) -> "LossSettings":
        """From cfg.loss (and cfg.model.draft for a feature draft's decay and depths)."""
        draft = draft if draft is not None else {}
        return cls(str(loss["name"]), float(loss.get("temperature", 1.0)), int(loss.get("chunk_size", 1024)),
                   float(loss.get("ce_weight", 0.0)), dict(loss.get("params") or {}),
                   float(draft.get("loss_decay", 0.8)), int(draft.get("unroll_steps", 1)))

    @property
    def mixed_ce_weight(self) -> float:
        """The weight of next-token cross-entropy in the loss: the baseline is cross-entropy alone."""
        return 1.0 if self.name == CROSS_ENTROPY else self.ce_weight


CROSS_ENTROPY = "cross_entropy"  # the no-distillation baseline: next-token cross-entropy on the data (ce_weight = 1)


def get_loss(name: str, **params) -> Callable[..., torch.Tensor] | None:
    """The divergence `name` with its extra parameters bound (jsd: beta; skew_kl: skew); None for the
    cross-entropy baseline, which uses no target logits."""
    if name == CROSS_ENTROPY:
        return None
    if name not in LOSSES:
        raise ValueError(f"Unknown loss '{name}'. Choose one of: {', '.join(sorted([*LOSSES, CROSS_ENTROPY]))}.")
    fn = LOSSES[name]
    return functools.partial(fn, **params) if params else fn


def expected_accept(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """Sum_v min(p, q): the probability that a token sampled from q is accepted (= 1 - TV distance)."""
    p = F.softmax(teacher_logits.float(), dim=-1)
    q = F.softmax(student_logits.float(), dim=-1)
    return torch.minimum(p, q).sum(-1)


def top1_agree(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """1.0 where the draft's argmax equals the target's argmax (greedy acceptance, teacher-forced)."""
    return (student_logits.argmax(-1) == teacher_logits.argmax(-1)).float()


def own_precision(tensor: torch.Tensor):
    """A context that turns autocast off: the target runs in its loaded dtype (model.target.dtype) whatever
    trainer.precision makes of the draft, so its logits are those a teacher-logit cache stores."""
    return torch.autocast(tensor.device.type, enabled=False)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp_min(1)


def _check_chunking(chunk_size: int, ce_weight: float, next_tokens) -> None:
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}.")
    if not 0 <= ce_weight <= 1:
        raise ValueError(f"ce_weight must be in [0, 1], got {ce_weight}.")
    if ce_weight > 0 and next_tokens is None:
        raise ValueError("ce_weight > 0 needs next_tokens (the data's next-token ids).")


def _mean_over_tokens(total: torch.Tensor, sums: dict, n: int, metrics: bool) -> dict[str, torch.Tensor]:
    denom = max(n, 1)
    out = {"loss": total / denom, "tokens": torch.tensor(n)}
    if metrics:
        out.update({k: torch.tensor(v / denom) for k, v in sums.items()})
    return out


def _mixed(distill: torch.Tensor | None, logits: torch.Tensor, next_ids: torch.Tensor | None,
           ce_weight: float) -> torch.Tensor:
    """(1 - ce_weight) * sum of the per-token divergence + ce_weight * summed cross-entropy on the data."""
    total = logits.new_zeros(())
    if ce_weight < 1:
        total = total + (1 - ce_weight) * distill.sum()
    if ce_weight > 0:
        total = total + ce_weight * F.cross_entropy(logits, next_ids, reduction="sum")
    return total


def loss_mask(labels: torch.Tensor) -> torch.Tensor:
    """Position t predicts token t+1: it counts when labels[t+1] is not -100."""
    mask = torch.zeros_like(labels, dtype=torch.bool)
    mask[:, :-1] = labels[:, 1:] != -100
    return mask


def chunked_distill(student_hidden: torch.Tensor, teacher_hidden: torch.Tensor | None, student_head: Callable,
                    teacher_head: Callable | None, mask: torch.Tensor, loss_fn: Callable = forward_kl,
                    temperature: float = 1.0, chunk_size: int = 1024, metrics: bool = False,
                    next_tokens: torch.Tensor | None = None, ce_weight: float = 0.0) -> dict[str, torch.Tensor]:
    """Mean loss over the tokens where `mask` is true, computed `chunk_size` tokens at a time:
    (1 - ce_weight) * distillation loss + ce_weight * cross-entropy on `next_tokens` (the data's next ids).

    student_hidden / teacher_hidden: (..., H) final hidden states; heads map them to logits (..., V).
    With ce_weight = 1 the target is not needed (teacher_hidden may be None) unless metrics are asked for.
    Returns {"loss", "tokens"} and, with metrics=True, "kl" (forward KL at T=1), "top1_agree" and
    "expected_accept" (means over the same tokens, no gradient).
    """
    _check_chunking(chunk_size, ce_weight, next_tokens)
    if temperature <= 0:
        raise ValueError(f"loss temperature must be > 0, got {temperature}.")
    need_teacher = ce_weight < 1 or metrics
    if need_teacher and teacher_hidden is None:
        raise ValueError("This loss needs the target's hidden states (teacher_hidden).")
    keep = mask.bool()
    sh = student_hidden[keep]
    th = teacher_hidden[keep] if need_teacher else None
    nxt = next_tokens[keep] if next_tokens is not None else None
    sums = {"kl": 0.0, "top1_agree": 0.0, "expected_accept": 0.0}

    def chunk(logits, part, record):
        t_logits = None
        if need_teacher:
            with torch.no_grad(), own_precision(th):
                t_logits = teacher_head(th[part]).float()
        if metrics and record:
            with torch.no_grad():
                s_logits = logits.detach()
                sums["kl"] += forward_kl(s_logits, t_logits).sum().item()
                sums["top1_agree"] += top1_agree(s_logits, t_logits).sum().item()
                sums["expected_accept"] += expected_accept(s_logits, t_logits).sum().item()
        distill = loss_fn(logits, t_logits, temperature) if ce_weight < 1 else None
        return _mixed(distill, logits, nxt[part] if nxt is not None else None, ce_weight)

    total = head_loss(sh, student_head, chunk, chunk_size)
    return _mean_over_tokens(total, sums, sh.shape[0], metrics)


def chunked_sparse_distill(student_hidden: torch.Tensor, student_head: Callable, mask: torch.Tensor,
                           teacher_ids: torch.Tensor, teacher_logp: torch.Tensor, teacher_tail: torch.Tensor,
                           chunk_size: int = 1024, metrics: bool = False, next_tokens: torch.Tensor | None = None,
                           ce_weight: float = 0.0) -> dict[str, torch.Tensor]:
    """`chunked_distill` against a teacher-logit cache (train/teacher_cache.py): sparse forward KL over the
    target's cached top-k + tail (T = 1), optionally mixed with cross-entropy. Metrics: "kl" (sparse),
    "top1_agree" (exact) and "expected_accept" (over the k + 1 outcomes: an upper bound)."""
    from train.sparse_kl import sparse_forward_kl, sparse_metrics

    _check_chunking(chunk_size, ce_weight, next_tokens)
    keep = mask.bool()
    sh, ids, logp, tail = student_hidden[keep], teacher_ids[keep], teacher_logp[keep], teacher_tail[keep]
    nxt = next_tokens[keep] if next_tokens is not None else None
    sums = {"kl": 0.0, "top1_agree": 0.0, "expected_accept": 0.0}

    def chunk(logits, part, record):
        teacher = ids[part], logp[part], tail[part]
        if metrics and record:
            with torch.no_grad():
                s_logits = logits.detach()
                sums["kl"] += sparse_forward_kl(s_logits, *teacher).sum().item()
                for key, value in sparse_metrics(s_logits, *teacher).items():
                    sums[key] += value.sum().item()
        distill = sparse_forward_kl(logits, *teacher) if ce_weight < 1 else None
        return _mixed(distill, logits, nxt[part] if nxt is not None else None, ce_weight)

    total = head_loss(sh, student_head, chunk, chunk_size)
    return _mean_over_tokens(total, sums, sh.shape[0], metrics)
