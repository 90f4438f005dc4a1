"""Distillation losses of the feature drafts (decode/drafts/feature_drafts.py) against the frozen target's logits.

The target runs once per batch and gives its features F (B, T, H) (final hidden states, what its LM head reads),
or they come cached with the batch (teacher=cache: train/teacher_cache.py's feature cache); every loss below is the configured divergence (train/losses.py `chunked_distill`, the same family as standalone
drafts) between the draft's logits and the target's at the right offset:

- Medusa head k (k = 1..K) at position t reads F[t] and is scored against the target's logits at t+k, which
  predict token t+k+1 (`medusa_pairs`).
- The EAGLE-style draft's slot t reads F[t] and token t+1 and is scored against the target's logits at t+1 (they
  predict token t+2). Training-time test (EAGLE-3, `eagle_unroll`): depths 2..S feed the draft its own predicted
  features, as drafting does, under the attention pattern of decoding (`unroll_allowed`), each scored against the
  same target logits; depth s counts only slots with s-1 real features before them.

Depth / head k weighs decay^(k-1) (normalised); the metrics logged as val/top1_agree etc. are head / depth 1's, the
others' top-1 agreement is logged per k.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from decode.drafts.feature_drafts import additive, unroll_allowed
from decode.drafts.features import layer_inputs
from decode.drafts.kinds import kind_of_draft
from train.feature_storage import read
from train.losses import chunked_distill, loss_mask, own_precision
from train.teacher_cache import AUX_FEATURES, FEATURES
from train.train_vocab import remap


def medusa_pairs(heads, features: torch.Tensor, labels: torch.Tensor) -> list[tuple]:
    """Per head k: (its states at positions 0..T-1-k, the target's features at k..T-1, mask, next data tokens)."""
    mask, nxt = loss_mask(labels), torch.roll(labels, -1, dims=1)
    length = features.shape[1]
    out = []
    for k, block in enumerate(heads.blocks, start=1):
        if k >= length:
            break
        out.append((block(features[:, : length - k]), features[:, k:], mask[:, k:], nxt[:, k:]))
    return out


def eagle_unroll(draft, features: torch.Tensor, input_ids: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """Per depth s = 1..steps, the draft's predicted features (B, T-1, H) over slots 0..T-2 (slot i: feature i,
    token i+1), depth s reading depth s-1's prediction for its feature. The depths share one KV cache, as the stacked
    sequence of `unroll_allowed`: depth s's slots attend to the keys of depths 1..s (autograd flows through the
    cached keys and values), so each depth runs the layer over its own T-1 slots only. `features` are what the
    draft reads (`fuse`d first: an EAGLE-3 draft's several layers' inputs)."""
    batch, length, _ = features.shape
    n = length - 1
    ids = input_ids[:, 1:]
    positions = torch.arange(n, device=features.device)[None].expand(batch, -1)
    allowed = unroll_allowed(n, steps).to(features.device)
    cache = DynamicCache(config=draft.layer_config)
    current, outs = draft.fuse(features[:, :n]), []
    for s in range(1, steps + 1):
        mask = additive(allowed[(s - 1) * n: s * n, : s * n], features.dtype)
        out = draft(current, ids, positions, mask, cache=cache)
        outs.append(out)
        current = torch.cat([out.new_zeros(batch, 1, out.shape[-1]), out[:, :-1]], dim=1)  # slot i: slot i-1's guess
    return outs


def eagle_pairs(draft, features: torch.Tensor, labels: torch.Tensor, input_ids: torch.Tensor, steps: int,
                inputs: torch.Tensor | None = None) -> list:
    """Per depth: (normed predicted features, the target's features at slot+1, mask, next data tokens). `inputs`:
    what the draft reads when it is not the final features (an EAGLE-3 draft's layer inputs)."""
    mask, nxt = loss_mask(labels)[:, 1:], torch.roll(labels, -1, dims=1)[:, 1:]
    slot = torch.arange(mask.shape[1], device=mask.device)[None]
    unrolled = eagle_unroll(draft, features if inputs is None else inputs, input_ids, steps)
    return [(draft.head_input(out), features[:, 1:], mask & (slot >= s), nxt) for s, out in enumerate(unrolled)]


def feature_distill(draft, target, batch: dict, loss_fn, *, temperature: float, chunk_size: int, ce_weight: float,
                    metrics: bool, decay: float, steps: int, kept: tuple | None = None) -> dict:
    """The weighted loss over heads / depths; "loss", "tokens" and, with metrics, head / depth 1's "kl",
    "top1_agree", "expected_accept" and "top1_agree_k" per k. `kept` = (ids, the frozen head over them)
    (model.draft.train_vocab, train/train_vocab.py): training scores only those ids, for draft and target alike
    (they share the head), at positions whose next token is kept; validation (metrics) scores the full head."""
    aux_layers, dtype = getattr(draft, "aux_layers", None), draft.get_output_embeddings().weight.dtype
    if FEATURES in batch:  # teacher=cache: the target's features were cached once (train/teacher_cache.py)
        features, aux = read(batch, FEATURES).to(dtype), read(batch, AUX_FEATURES)
        if aux_layers is not None and aux is None:
            raise ValueError("This feature cache holds no layer inputs, which an EAGLE-3 draft reads. Fix: "
                             "teacher_cache=null (the default cache for this draft is built with them).")
        aux = aux.to(dtype) if aux_layers is not None else None
    else:
        with torch.no_grad(), own_precision(batch["input_ids"]):  # the target ignores bf16-mixed autocast
            out, aux = layer_inputs(target, batch["input_ids"], aux_layers, attention_mask=batch["attention_mask"],
                                    use_cache=False)
            features = out.last_hidden_state
    labels = batch["labels"]
    if kind_of_draft(draft).autoregressive:  # the EAGLE family: depths of its own outputs
        pairs = eagle_pairs(draft, features, labels, batch["input_ids"], steps, inputs=aux)
    else:  # heads that all read one feature
        pairs = medusa_pairs(draft, features, labels)
    head = full_head = draft.get_output_embeddings()  # the target's own head, which the draft shares
    if kept is not None and not metrics:
        ids, head = kept
        pairs = [(student, teacher, mask & ok, index) for student, teacher, mask, nxt in pairs
                 for index, ok in [remap(nxt, ids, full_head.out_features)]]
    weights = [decay ** k for k in range(len(pairs))]
    total, result = 0.0, {}
    for k, (student, teacher, mask, nxt) in enumerate(pairs, start=1):
        out = chunked_distill(student, teacher, head, head, mask, loss_fn, temperature, chunk_size, metrics=metrics,
                              next_tokens=nxt, ce_weight=ce_weight)
        total = total + out["loss"] * weights[k - 1] / sum(weights)
        if k == 1:
            result = dict(out)
        if metrics:
            result[f"top1_agree_{k}"] = out["top1_agree"]
    result["loss"] = total
    return result
