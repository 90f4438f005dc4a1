"""Pure sampling maths for speculative decoding: logits -> probabilities, and the accept/reject rule.

Greedy decoding is the temperature-0 case: probabilities are one-hot on the argmax, and the same
rejection rule then accepts a drafted token exactly when it is the target's argmax.
"""

from __future__ import annotations

import torch


def logits_to_probs(logits: torch.Tensor, temperature: float = 0.0, top_k: int | None = None,
                    top_p: float | None = None) -> torch.Tensor:
    """(..., V) logits -> (..., V) probabilities after temperature, top-k and top-p (nucleus) filtering.

    temperature 0 gives one-hot argmax distributions (greedy). Apply the same settings to target and draft.
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}.")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}.")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}.")
    logits = logits.float()
    if temperature < 1e-30:  # 0, or so small it underflows in fp32: the greedy limit
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    # shift so the max is 0 first: a tiny temperature then gives -inf (probability 0), never inf - inf = NaN
    logits = (logits - logits.amax(-1, keepdim=True)) / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        sorted_probs = sorted_logits.softmax(-1)
        # drop a token when the tokens ranked above it already hold top_p of the mass (the top token always stays)
        drop_sorted = sorted_probs.cumsum(-1) - sorted_probs >= top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits.softmax(-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token id per row of (..., V) probabilities (need not sum to 1), by inverting the cumulative distribution
    with one uniform draw per row: the first id whose cumulative mass exceeds u x total, so an id of probability 0 is
    never drawn. Cumulated in float64. One uniform instead of torch.multinomial's work over the whole row, which
    matters because it is paid per drafted and per emitted token when sampling (bench/decoding/sampling/)."""
    flat = probs.reshape(-1, probs.shape[-1])
    cdf = flat.double().cumsum(-1)
    u = torch.rand(flat.shape[0], 1, dtype=torch.float64, generator=generator, device=flat.device)
    return torch.searchsorted(cdf, u * cdf[:, -1:], right=True).reshape(probs.shape[:-1])


def accept_reject(draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor,
                  generator: torch.Generator | None = None) -> tuple[int, int]:
    """Leviathan et al.'s rule for one chain of gamma drafted tokens, vectorized over positions.

    draft_tokens: (gamma,) ids sampled from draft_probs; draft_probs: (gamma, V) the draft's q at each
    position; target_probs: (gamma + 1, V) the target's p at each position plus one past the last draft.
    Token i is accepted with probability min(1, p_i/q_i); verification stops at the first rejection.
    Returns (n_accepted, next_token): on a rejection at position n the next token is drawn from
    norm(max(0, p_n - q_n)); when all gamma are accepted it is the bonus token drawn from p_gamma.
    The emitted tokens follow the target's distribution exactly.
    """
    gamma = draft_tokens.shape[0]
    positions = torch.arange(gamma, device=target_probs.device)
    p_tok = target_probs[positions, draft_tokens]
    q_tok = draft_probs[positions, draft_tokens]
    u = torch.rand(gamma, generator=generator, dtype=p_tok.dtype, device=p_tok.device)
    rejected = (u * q_tok >= p_tok).nonzero()  # accept iff u < p/q, u ~ U[0, 1)
    if rejected.numel() == 0:
        return gamma, int(sample(target_probs[gamma], generator))
    n = int(rejected[0])
    residual = (target_probs[n] - draft_probs[n]).clamp_min(0)
    if residual.sum() <= 0:  # p == q up to rounding: rejection had probability ~0; p is the right law
        residual = target_probs[n]
    return n, int(sample(residual / residual.sum(), generator))


def greedy_accept(drafted: list[int], target_argmax: list[int]) -> tuple[int, int]:
    """The temperature-0 case of `accept_reject` without building one-hot distributions: keep drafted
    tokens while they equal the target's argmax; the next token is the target's argmax after them
    (the correction on a mismatch, or the bonus token when all are kept). target_argmax has len(drafted)+1."""
    n = 0
    while n < len(drafted) and drafted[n] == target_argmax[n]:
        n += 1
    return n, target_argmax[n]


def acceptance_probability(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """(..., V) p and q -> (...) probability that `accept_reject` accepts a token drafted from q:
    sum_v min(p_v, q_v) = 1 - TV(p, q) (Leviathan et al.'s beta; alpha is its mean over the target's prefixes).
    With one-hot (temperature 0) inputs it is 1 where the argmaxes agree, else 0."""
    return torch.minimum(target_probs.float(), draft_probs.float()).sum(-1)
