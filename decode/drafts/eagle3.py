"""An EAGLE-3 draft: one decoder layer over a fusion of the target's hidden states at several depths (low, middle,
high), in the layout vLLM's `speculators` trains and serves (`speculators_model_type: eagle3`).

Where the EAGLE-style draft (decode/drafts/feature_drafts.py `EagleDraft`) reads the target's *last* hidden state, this
one reads the residual stream entering a few of the target's layers (`aux_layers`, EAGLE-3's default: layers 2,
N/2 and N-3 of N), concatenated per position (`layer_inputs`): `fc` maps them to one vector per slot. The decoder
layer reads the next token's embedding and that vector side by side (q, k and v project their concatenation, 2H
wide; `input_layernorm` normalises the embedding, `hidden_norm` the vector, which is also the residual), and its
output, through `norm` and the target's LM head, guesses the token after. Drafting feeds that output back as the
next slot's vector (in place of `fc`'s), as EAGLE-3's training-time test trains it to.

Its export is speculators' EAGLE-3 layout (`speculators_model_type: eagle3`, `eagle_aux_hidden_state_layer_ids`,
`draft_vocab_size`): weights `fc`, `layers.0.*` (q/k/v 2H wide, `hidden_norm`), `norm`, and the head over the draft
vocabulary: `lm_head` (the target's rows for the kept ids), `d2t` (draft id -> target id minus draft id) and `t2d`
(which target ids the draft has), as speculators and vLLM read them (decode/drafts/feature_export.py
`draft_head_state`); a head over every id has no d2t / t2d. The embeddings come from the verifier. A Qwen2 target's
layer is written as a Llama layer with biases (`as_llama_layer`): the classes engines build from.

    draft = Eagle3Draft.from_target(target)                   # aux_layers=None: EAGLE-3's (2, N // 2, N - 3)
    hidden = draft.fuse(layer_inputs(target, ids, draft.aux_layers)[1])
"""

from __future__ import annotations

import torch
from torch import nn

from decode.drafts.feature_drafts import (FeatureDraft, _Shared, causal_mask, layer_config_dict, layer_parts,
                                          one_layer_config, rebuilt_layer_config, speculators_config)
from decode.drafts.features import default_aux_layers, layer_inputs  # noqa: F401  (layer_inputs: what it reads)

# The keys of a Qwen2 layer's config that also describe it as a Llama layer (the rest: sliding-window settings, off in
# every Qwen2.5 release, and bookkeeping).
_LLAMA_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
               "head_dim", "hidden_act", "max_position_embeddings", "rms_norm_eps", "rope_parameters",
               "tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id")
_ZERO_O_BIAS = "layers.0.self_attn.o_proj.bias"


def as_llama_layer(layer: dict) -> dict:
    """speculators builds an EAGLE-3 layer from Llama's or Qwen3's classes and vLLM from Llama's; a Qwen2 layer is a
    Llama layer with q/k/v biases, so its config is written as a Llama one with `attention_bias: true` (which also
    gives o_proj a bias: `serving_state` stores it as zeros, the same function). Other configs come back as they are."""
    if layer.get("model_type") != "qwen2":
        return layer
    if layer.get("use_sliding_window"):
        raise ValueError("This Qwen2 target uses sliding-window attention, which a Llama EAGLE-3 layer does not "
                         "have: the export cannot describe its draft layer. Fix: a target with full attention.")
    from transformers import LlamaConfig

    config = LlamaConfig(**{k: layer[k] for k in _LLAMA_KEYS if k in layer}, num_hidden_layers=1,
                         attention_bias=True, mlp_bias=False, architectures=["LlamaForCausalLM"]).to_dict()
    config.pop("_attn_implementation", None)
    return config


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
    def build(cls, target, aux_layers=None, init_layer: int | None = -1, **_) -> "Eagle3Draft":
        return cls.from_target(target, list(aux_layers) if aux_layers is not None else None, init_layer)

    @classmethod
    def from_config(cls, config: dict) -> "Eagle3Draft":
        return cls(rebuilt_layer_config(config), config["aux_layers"])

    def serving_config(self, target_name, target_architectures, gamma=3, draft_vocab_size=None) -> dict:
        return {"architectures": ["Eagle3Speculator"], "speculators_model_type": self.draft_kind,
                "transformer_layer_config": as_llama_layer(layer_config_dict(self)),
                "draft_vocab_size": int(draft_vocab_size or self.vocab_size),
                "norm_before_residual": False, "norm_before_fc": False, "fc_norm": False, "norm_output": False,
                "target_hidden_size": None, "eagle_aux_hidden_state_layer_ids": list(self.aux_layers),
                "speculators_config": speculators_config(self.draft_kind, target_name, target_architectures, gamma)}

    def serving_state(self) -> dict:
        state = super().serving_state()
        if self.layer_config.model_type == "qwen2":  # written as a Llama layer: o_proj's bias is zero
            state[_ZERO_O_BIAS] = torch.zeros(self.hidden_size, dtype=state["fc.weight"].dtype)
        return state

    def state_from_serving(self, state, folder) -> dict:
        if _ZERO_O_BIAS in state and _ZERO_O_BIAS not in self.state_dict():  # a Qwen2 layer written as a Llama one
            if state[_ZERO_O_BIAS].any():
                raise ValueError(f"{folder}: its layer's o_proj has a nonzero bias, which this draft's layer lacks.")
            state = {k: v for k, v in state.items() if k != _ZERO_O_BIAS}
        return state

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
