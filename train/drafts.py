"""Build a draft model for a given target: truncated target (or truncated smaller family member), fresh small
model, pretrained model, or a feature draft that reads the target's hidden states (Medusa heads, EAGLE-style layer:
decode/drafts/feature_drafts.py).

Every draft built here shares the target's vocabulary, by construction (truncated, fresh) or by check
(pretrained or a truncation `source`, see decode.models.loading.check_same_vocab).
"""

from __future__ import annotations

import copy
import re

import torch
from transformers import AutoModelForCausalLM

from decode.drafts.kinds import KINDS, model_class
from decode.models.loading import DTYPES, load_causal_lm

_LAYER = re.compile(r"\.layers\.(\d+)\.")


def _slice_layer_config(config, layers: list[int]) -> None:
    n = config.num_hidden_layers
    bad = [i for i in layers if not 0 <= i < n]
    if not layers or bad or len(set(layers)) != len(layers):
        raise ValueError(f"model.draft.layers must be distinct indices in [0, {n - 1}] (the model cut, the "
                         f"target or model.draft.source, has {n} layers), got {list(layers)}.")
    config.num_hidden_layers = len(layers)
    if isinstance(getattr(config, "layer_types", None), list):  # per-layer attention kinds (Qwen2, Gemma...)
        config.layer_types = [config.layer_types[i] for i in layers]


def truncated_draft(target, layers: list[int], dtype: str = "float32"):
    """The target's embeddings, the chosen decoder layers (in the given order) and its final norm/head."""
    layers = [int(i) for i in layers]
    config = copy.deepcopy(target.config)
    _slice_layer_config(config, layers)
    draft = AutoModelForCausalLM.from_config(config, dtype=DTYPES[dtype])
    source = target.state_dict()
    picked = {}
    for key in draft.state_dict():
        src = _LAYER.sub(lambda m: f".layers.{layers[int(m.group(1))]}.", key, count=1)
        picked[key] = source[src].detach().clone().to(DTYPES[dtype])
    draft.load_state_dict(picked, strict=True)
    if getattr(target, "generation_config", None) is not None:
        draft.generation_config = copy.deepcopy(target.generation_config)
    return draft


def fresh_draft(target, overrides: dict, copy_embeddings: bool = True, dtype: str = "float32", seed: int = 0):
    """A new model of the target's architecture family and vocabulary, with a smaller shape."""
    config = copy.deepcopy(target.config)
    for key, value in (overrides or {}).items():
        if not hasattr(config, key):
            raise ValueError(f"model.draft.config.{key}: the target config ({type(config).__name__}) has no such field.")
        setattr(config, key, value)
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = config.layer_types[: config.num_hidden_layers]
        config.layer_types += [config.layer_types[-1]] * (config.num_hidden_layers - len(config.layer_types))
    torch.manual_seed(seed)
    draft = AutoModelForCausalLM.from_config(config, dtype=DTYPES[dtype])
    if copy_embeddings:
        src, dst = target.get_input_embeddings().weight, draft.get_input_embeddings().weight
        if src.shape != dst.shape:
            raise ValueError(f"model.draft.copy_embeddings=true needs the target's hidden size "
                             f"({src.shape[1]}), the draft has {dst.shape[1]}: set it false or match hidden_size.")
        with torch.no_grad():
            dst.copy_(src)
            if not config.tie_word_embeddings:
                draft.get_output_embeddings().weight.copy_(target.get_output_embeddings().weight)
    if getattr(target, "generation_config", None) is not None:
        draft.generation_config = copy.deepcopy(target.generation_config)
    return draft


def build_draft(target, kind: str, *, layers=None, config=None, copy_embeddings: bool = True,
                name_or_path: str | None = None, train_embeddings: bool = True, dtype: str = "float32",
                cache_dir=None, seed: int = 0, source: str | None = None, num_heads: int = 3, num_layers: int = 1,
                init_layer: int | None = -1, aux_layers: list[int] | None = None):
    """Dispatch on `kind` (truncated | fresh | pretrained | a feature-draft kind of decode/drafts/kinds.py);
    optionally freeze the (tied) embeddings.
    kind=truncated cuts `source` (a folder, Hub id or embedded: name of a smaller model with the target's
    vocabulary) when given, else the target itself. Feature drafts share the target's embeddings and head (frozen)
    and read the options they have (Medusa: `num_heads` heads of `num_layers` residual blocks; the EAGLE family:
    `init_layer`, `aux_layers`)."""
    if kind in KINDS:  # a feature draft: its module builds it (decode/drafts/kinds.py)
        torch.manual_seed(seed)
        draft = model_class(KINDS[kind]).build(target, num_heads=num_heads, num_layers=num_layers,
                                               init_layer=init_layer, aux_layers=aux_layers)
        return draft.to(DTYPES[dtype]).train()
    if kind == "truncated":
        donor = load_causal_lm(source, dtype="float32", cache_dir=cache_dir) if source else target
        draft = truncated_draft(donor, list(layers or []), dtype=dtype)
        del donor
    elif kind == "fresh":
        draft = fresh_draft(target, dict(config or {}), copy_embeddings=copy_embeddings, dtype=dtype, seed=seed)
    elif kind == "pretrained":
        if not name_or_path:
            raise ValueError("model.draft.kind=pretrained needs model.draft.name_or_path (a folder or Hub id).")
        draft = load_causal_lm(name_or_path, dtype=dtype, cache_dir=cache_dir)
    else:
        raise ValueError(f"model.draft.kind must be truncated, fresh, pretrained or one of {', '.join(KINDS)}, "
                         f"got '{kind}'.")
    draft.train()
    if not train_embeddings:
        draft.get_input_embeddings().requires_grad_(False)
        draft.get_output_embeddings().requires_grad_(False)
    return draft
