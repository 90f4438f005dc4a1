"""An EAGLE-3 draft: one decoder layer over a fusion of the target's hidden states at several depths (low, middle,
high), in the layout vLLM's `speculators` trains and serves (`speculators_model_type: eagle3`).

Where the EAGLE-style draft (decode/drafts/feature_drafts.py `EagleDraft`) reads the target's *last* hidden state, this
one reads the residual stream entering a few of the target's layers (`aux_layers`, EAGLE-3's default: layers 2,
N/2 and N-3 of N), concatenated per position (`layer_inputs`): `fc` maps them to one vector per slot. The decoder
layer reads the next token's embedding and that vector side by side (q, k and v project their concatenation, 2H
wide; `input_layernorm` normalises the embedding, `hidden_norm` the vector, which is also the residual), and its
output, through `norm` and the target's LM head, guesses the token after. Drafting feeds that output back as the
next slot's vector (in place of `fc`'s), as EAGLE-3's training-time test trains it to.

Weights carry speculators' names (`fc`, `layers.0.*`, `norm`); the export adds the head over the draft vocabulary
and its id maps (decode/drafts/feature_export.py).

    draft = Eagle3Draft.from_target(target)                   # aux_layers=None: EAGLE-3's (2, N // 2, N - 3)
    hidden = draft.fuse(layer_inputs(target, ids, draft.aux_layers)[1])
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from decode.drafts.feature_drafts import FeatureDraft, _Shared, causal_mask, layer_parts, one_layer_config


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


class Eagle3Draft(FeatureDraft):
    draft_kind = "eagle3"

    def __init__(self, layer_config, aux_layers: list[int]):
        super().__init__()
        if not aux_layers:
            raise ValueError("An EAGLE-3 draft reads at least one target layer: model.draft.aux_layers is empty.")
        self.layer_config, self.num_layers, self.aux_layers = layer_config, 1, [int(i) for i in aux_layers]
        self.hidden_size, self.vocab_size = layer_config.hidden_size, layer_config.vocab_size
        hidden = self.hidden_size
        layer_cls, norm_cls, rotary_cls = layer_parts(layer_config)
        eps = getattr(layer_config, "rms_norm_eps", 1e-6)
        self.fc = nn.Linear(len(self.aux_layers) * hidden, hidden, bias=False)
        layer = layer_cls(layer_config, layer_idx=0)
        layer.hidden_norm = norm_cls(hidden, eps=eps)
        attn = layer.self_attn
        for name in ("q_proj", "k_proj", "v_proj"):  # they read [embedding | hidden]: twice as wide
            old = getattr(attn, name)
            setattr(attn, name, nn.Linear(2 * hidden, old.out_features, bias=old.bias is not None))
        self.layers = nn.ModuleList([layer])
        self.norm = norm_cls(hidden, eps=eps)
        self.rotary_emb = rotary_cls(config=layer_config)
        self._shared = _Shared(None, None)

    @classmethod
    def from_target(cls, target, aux_layers: list[int] | None = None, init_layer: int | None = -1) -> "Eagle3Draft":
        """A draft for `target` reading `aux_layers` (None: EAGLE-3's default). With `init_layer` (any value but
        None) it starts as the target's layer aux_layers[-1] applied to the stream entering it: `fc` passes that
        layer's input, q/k/v ignore the embedding, the norms and MLP are that layer's copies, `norm` the target's
        final norm. None: a fresh layer (transformers' init)."""
        n = target.config.num_hidden_layers
        aux = list(aux_layers) if aux_layers is not None else default_aux_layers(n)
        if any(not 0 <= i < n for i in aux):
            raise ValueError(f"model.draft.aux_layers must be layers of the target, in [0, {n - 1}], got {aux}.")
        config = one_layer_config(target.config)
        draft = cls(config, aux).to(target.get_output_embeddings().weight.dtype)
        decoder = target.get_decoder()
        with torch.no_grad():
            draft.norm.load_state_dict(decoder.norm.state_dict())
            if init_layer is not None:
                source = decoder.layers[aux[-1]]
                layer = draft.layers[0]
                h = draft.hidden_size
                for name, value in source.state_dict().items():
                    if name.split(".")[-2] in ("q_proj", "k_proj", "v_proj") and name.endswith("weight"):
                        wide = layer.get_parameter(name)
                        wide.zero_()
                        wide[:, h:].copy_(value)
                    else:
                        layer.get_parameter(name).copy_(value)
                layer.hidden_norm.load_state_dict(source.input_layernorm.state_dict())
                draft.fc.weight.zero_()
                draft.fc.weight[:, -h:].copy_(torch.eye(h))
        return draft.attach(target)

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """The target's layer inputs (..., len(aux_layers) * H) -> the vector a slot reads (..., H)."""
        return self.fc(features.to(self.norm.weight.dtype))

    def forward(self, hidden: torch.Tensor, next_ids: torch.Tensor, positions: torch.Tensor,
                mask: torch.Tensor | None = None, cache=None) -> torch.Tensor:
        """Slots (B, S): `hidden` (B, S, H) (`fuse`d target features, or the draft's own earlier outputs) and the
        ids of the tokens after them at `positions` -> the layer's outputs (B, S, H), before `norm` (what the next
        slot reads back). `mask`, `cache`: as EagleDraft.forward's."""
        layer = self.layers[0]
        hidden = hidden.to(self.norm.weight.dtype)  # (fc may be an int8 layer: decode/drafts/quantize.py)
        embeds = layer.input_layernorm(self.get_input_embeddings()(next_ids))
        x = torch.cat([embeds, layer.hidden_norm(hidden)], dim=-1)
        if mask is None:
            past = cache.get_seq_length() if cache is not None else 0
            mask = causal_mask(x.shape[1], past, x.dtype, x.device)
        attended, _ = layer.self_attn(hidden_states=x, position_embeddings=self.rotary_emb(hidden, positions),
                                      attention_mask=mask, cache=cache, use_cache=cache is not None)
        x = hidden + attended
        return x + layer.mlp(layer.post_attention_layernorm(x))

    def head_input(self, predicted: torch.Tensor) -> torch.Tensor:
        """What the LM head reads from the layer's output."""
        return self.norm(predicted)

    def logits(self, predicted: torch.Tensor) -> torch.Tensor:
        return self.get_output_embeddings()(self.head_input(predicted))

    def config_dict(self) -> dict:
        return {"draft_kind": self.draft_kind, "hidden_size": self.hidden_size, "vocab_size": self.vocab_size,
                "layer_config": self.layer_config.to_dict(), "aux_layers": list(self.aux_layers)}
