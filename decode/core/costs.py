"""Measure, on the machine at hand, what one draft step and one k-token target pass cost (the cost model)."""

from __future__ import annotations

import torch
from transformers import DynamicCache

from decode.core.speculative import CachedLM
from decode.drafts.feature_drafts import crop_cache, is_feature_draft
from decode.drafts.kinds import kind_of_draft
from decode.kernels.timing import median_seconds, median_seconds_each


def decoding_context(prompt: list[int], max_new_tokens: int) -> list[int]:
    """The prompt padded to its length halfway through decoding, to time passes at: a k-token pass costs more as the
    KV cache grows, the more so the larger k (docs/results.md). Attention cost depends on the length, not on the
    tokens."""
    return prompt + prompt[-1:] * (max_new_tokens // 2)


def cached_pass(model, context: list[int], role: str = "verify", keep: int | None = None):
    """A callable running one k-token pass of `model` after `context` is cached (`pass_(k)`), rolled back after every
    call, so every call sees the same context length. `keep`: logits rows kept (1 for a draft step)."""
    lm = CachedLM(model, role=role)
    lm.reset()
    lm.extend(context, keep=1)
    base = lm.length

    def pass_(k: int = 1) -> None:
        lm.extend(context[-1:] * k, keep=keep)
        lm.rollback(base)
    return pass_


def measure_costs(target, draft, context: list[int], max_k: int, repeats: int = 5,
                  target_pass_s: list[float] | None = None) -> dict:
    """Median seconds of: one 1-token draft step, and a k-token target pass for k = 1..max_k, each after
    `context` is cached (rolled back after every call, so all timings see the same context length). The k-token
    passes take turns (median_seconds_each). `target_pass_s` reuses passes timed before (for another draft of the
    same target and context), so several drafts are judged against the same target timings.

    As in decoding, each timed draft step follows a target pass: the target's pass pushes the draft's weights out
    of the CPU's caches, so a draft step timed alone is too cheap. Target passes are timed back to back, as in
    target-only decoding; a preceding draft step did not change them."""
    out = {"context_tokens": len(context), "repeats": repeats}
    target_pass = cached_pass(target, context)
    passes = list(target_pass_s) if target_pass_s else median_seconds_each(
        [lambda k=k: target_pass(k) for k in range(1, max_k + 1)], repeats)
    out["target_pass_s"] = passes
    if draft is not None and is_feature_draft(draft):  # one Medusa head / one EAGLE slot, no model pass
        out["draft_step_s"] = median_seconds(step_timer(draft, len(context)), repeats,
                                             between=lambda: target_pass(min(2, max_k)))
        out["cost_ratio_c"] = out["draft_step_s"] / passes[0]
    elif draft is not None:
        out["draft_step_s"] = median_seconds(cached_pass(draft, context, "draft", keep=1), repeats,
                                             between=lambda: target_pass(min(2, max_k)))
        out["cost_ratio_c"] = out["draft_step_s"] / passes[0]
    return out


def step_timer(draft, context_len: int):
    """A callable running one draft step of a feature draft after `context_len` cached slots (the cost model's
    draft step): one Medusa head, or one EAGLE slot (its KV cache cropped back after each call; an EAGLE-3
    draft's `fc`, which only the true features pass, is not counted)."""
    device = draft.device
    dtype = next(draft.parameters()).dtype
    feature = torch.zeros(1, 1, draft.hidden_size, device=device, dtype=dtype)
    head = draft.get_output_embeddings()
    if not kind_of_draft(draft).autoregressive:  # heads reading one feature
        def medusa_step():
            with torch.inference_mode():
                head(draft.head_states(feature[0], 1)[0])
        return medusa_step
    cache = DynamicCache(config=draft.layer_config)
    with torch.inference_mode():
        n = max(1, context_len)
        draft(feature.expand(1, n, -1), torch.zeros(1, n, dtype=torch.long, device=device),
              torch.arange(n, device=device)[None], cache=cache)

    def eagle_step():
        with torch.inference_mode():
            out = draft(feature, torch.zeros(1, 1, dtype=torch.long, device=device),
                        torch.tensor([[n]], device=device), cache=cache)
            draft.logits(out[0, -1])
            crop_cache(cache, n)
    return eagle_step


def measure_batch_costs(target, draft, context: list[int], batch: int, max_k: int, repeats: int = 5) -> dict:
    """`measure_costs` at a batch of `batch` sequences (decode/core/batched.py): a k-token pass of the target for every
    sequence at once, k = 1..max_k, and one draft step for every sequence at once. Speculation's expected speedup at
    that batch is metrics.hardware_speedup over these: each sequence accepts on its own, so tokens per step are batch
    1's, while a wider pass costs more the more compute-bound it is."""
    from decode.core.batched import batch_pass

    target_pass = batch_pass(target, context, batch)
    passes = median_seconds_each([lambda k=k: target_pass(k) for k in range(1, max_k + 1)], repeats)
    out = {"batch": batch, "context_tokens": len(context), "repeats": repeats, "target_pass_s": passes}
    if draft is not None:
        out["draft_step_s"] = median_seconds(batch_pass(draft, context, batch, keep=1), repeats,
                                             between=lambda: target_pass(min(2, max_k)))
        out["cost_ratio_c"] = out["draft_step_s"] / passes[0]
    return out
