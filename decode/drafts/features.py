"""What feature drafts read of the target: its final hidden states, and the residual stream entering some of its
layers (`aux_layers`: an EAGLE-3 draft's inputs), from one pass of its decoder.

    out, aux = layer_inputs(target, ids, [2, 14, 25])   # out.last_hidden_state (B, T, H); aux (B, T, 3H)
"""

from __future__ import annotations

import contextlib

import torch


def final_hidden(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The model's last hidden states after its final norm, (B, T, H), without computing any logits."""
    return model.get_decoder()(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state


def default_aux_layers(num_layers: int) -> list[int]:
    """EAGLE-3's choice of target layers (2, N // 2, N - 3), kept inside a small target's range, without repeats."""
    picks = (min(2, num_layers - 1), num_layers // 2, max(num_layers - 3, 0))
    return sorted(dict.fromkeys(picks))


@contextlib.contextmanager
def _capture_inputs(model, layers: list[int]):
    """Records the hidden states entering each of `layers` (decoder layer indices) during the block."""
    decoder_layers = model.get_decoder().layers
    seen: dict[int, torch.Tensor] = {}
    hooks = []
    for i in layers:
        hooks.append(decoder_layers[i].register_forward_pre_hook(
            lambda _m, args, kwargs, i=i: seen.__setitem__(i, kwargs.get("hidden_states", args[0] if args else None)),
            with_kwargs=True))
    try:
        yield seen
    finally:
        for hook in hooks:
            hook.remove()


def layer_inputs(model, input_ids: torch.Tensor, layers: list[int] | None, **kwargs):
    """One pass of `model`'s decoder: (its output, whose `last_hidden_state` holds the final hidden states (B, T, H);
    what enters each of `layers`, concatenated (B, T, len(layers) * H), or None when `layers` is None). `kwargs` go
    to the decoder (cache, attention_mask, position_ids...)."""
    if layers is None:
        return model.get_decoder()(input_ids=input_ids, **kwargs), None
    n = len(model.get_decoder().layers)
    bad = [i for i in layers if not 0 <= i < n]
    if bad:
        raise ValueError(f"aux_layers {bad} are not layers of this target (it has {n}). Fix: model.draft.aux_layers "
                         f"with indices in [0, {n - 1}], or null for EAGLE-3's default.")
    with _capture_inputs(model, layers) as seen:
        out = model.get_decoder()(input_ids=input_ids, **kwargs)
    return out, torch.cat([seen[i] for i in layers], dim=-1)
