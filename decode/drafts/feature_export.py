"""Feature drafts on disk, in the layouts serving engines read (and back).

- eagle: the `speculators` layout vLLM loads for EAGLE drafts (`speculators_model_type: eagle`, HASS-style norms:
  `layernorms: true`, `transformer_layer_config` = the target's config cut to one layer, `speculators_config` naming
  the verifier); weights `embedding_layernorm`, `fusion_fc`, `transformer.*`, `pre_lm_head_layernorm`. The target's
  embeddings and LM head are not stored: the engine (and `load_feature_draft`) takes them from the verifier.
- eagle3: the `speculators` EAGLE-3 layout (`speculators_model_type: eagle3`, `eagle_aux_hidden_state_layer_ids`,
  `draft_vocab_size`); weights `fc`, `layers.0.*` (q/k/v 2H wide, `hidden_norm`), `norm`, and the head over the draft
  vocabulary: `lm_head` (the target's rows for the kept ids), `d2t` (draft id -> target id minus draft id) and `t2d`
  (which target ids the draft has), as speculators and vLLM read them; a head over every id has no d2t / t2d. The embeddings come from the verifier. A
  Qwen2 target's layer is written as a Llama layer with biases (`as_llama_layer`): the classes engines build from.
- medusa: vLLM's Medusa layout (`model_type: medusa`, `num_heads`, `num_hidden_layers`, weights
  `blocks.{i}.layers.{j}.weight/bias`), with Medusa's own keys (`medusa_num_heads`, `medusa_num_layers`,
  `base_model_name_or_path`). Heads share the target's LM head (`original_lm_head: true`): no `lm_heads` stored.

Every folder also carries `draftsmith.json` (`draft_kind`, `draft_config`: what rebuilds the module here).

    write_feature_weights(draft, folder, target_name, gamma=3); draft = load_feature_draft(folder, target)

An EAGLE-3 draft's export needs the target's LM head (`head`) and the kept ids (`kept`, None: every id).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from decode.drafts.eagle3 import Eagle3Draft
from decode.drafts.feature_drafts import EagleDraft, FeatureDraft, MedusaHeads
from decode.drafts.kinds import EAGLE_KINDS, FEATURE_KINDS

_MEDUSA_OURS = re.compile(r"^blocks\.(\d+)\.layers\.(\d+)\.linear\.")  # ours: ResBlock.linear; vLLM's: the Linear
DRAFT_HEAD_KEYS = ("lm_head.weight", "d2t", "t2d")  # eagle3: derived from the target's head and the kept ids


def draft_head_state(head_weight: torch.Tensor, kept: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """speculators' draft-vocabulary head: the target's LM head rows for `kept` (sorted target ids; None: all),
    d2t[i] = kept[i] - i and t2d = which target ids are kept (both left out when every id is kept). Pure."""
    vocab = head_weight.shape[0]
    kept = torch.arange(vocab) if kept is None else torch.as_tensor(kept, dtype=torch.long).sort().values
    if len(kept) == vocab:  # every id: no map (vLLM builds none for a full head and refuses to load one)
        return {"lm_head.weight": head_weight.detach().contiguous().clone()}
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[kept] = True
    return {"lm_head.weight": head_weight.detach()[kept].contiguous().clone(),
            "d2t": (kept - torch.arange(len(kept))).contiguous(), "t2d": t2d}


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


def serving_state(draft) -> dict[str, torch.Tensor]:
    """The draft's weights under the serving layout's names (contiguous copies)."""
    state = {k: v.detach().contiguous().clone() for k, v in draft.state_dict().items()}
    if draft.draft_kind == "medusa":
        state = {_MEDUSA_OURS.sub(r"blocks.\1.layers.\2.", k): v for k, v in state.items()}
    if draft.draft_kind == "eagle3" and draft.layer_config.model_type == "qwen2":  # written as a Llama layer
        state[_ZERO_O_BIAS] = torch.zeros(draft.hidden_size, dtype=state["fc.weight"].dtype)
    return state


def _speculators_config(algorithm: str, target_name: str, target_architectures: list[str], gamma: int) -> dict:
    return {"algorithm": algorithm, "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": gamma, "verifier_accept_k": 1,
                                  "accept_tolerance": 0.0}],
            "verifier": {"name_or_path": target_name, "architectures": list(target_architectures)}}


def serving_config(draft, target_name: str, target_architectures: list[str], gamma: int = 3,
                   draft_vocab_size: int | None = None) -> dict:
    """config.json of the serving layout for `draft`, measured against `target_name`."""
    if draft.draft_kind == "medusa":
        return {"model_type": "medusa", "architectures": ["MedusaModel"], "hidden_size": draft.hidden_size,
                "vocab_size": draft.vocab_size, "truncated_vocab_size": None, "num_heads": draft.num_heads,
                "num_hidden_layers": draft.num_layers, "original_lm_head": True, "max_paths": 64, "topk": 10,
                "medusa_num_heads": draft.num_heads, "medusa_num_layers": draft.num_layers,
                "base_model_name_or_path": target_name}
    layer = draft.layer_config.to_dict()
    layer.pop("_attn_implementation", None)
    if draft.draft_kind == "eagle3":
        layer = as_llama_layer(layer)
        return {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
                "transformer_layer_config": layer, "draft_vocab_size": int(draft_vocab_size or draft.vocab_size),
                "norm_before_residual": False, "norm_before_fc": False, "fc_norm": False, "norm_output": False,
                "target_hidden_size": None, "eagle_aux_hidden_state_layer_ids": list(draft.aux_layers),
                "speculators_config": _speculators_config("eagle3", target_name, target_architectures, gamma)}
    layer_cls = type(draft.transformer).__name__
    return {"architectures": ["EagleSpeculator"], "speculators_model_type": "eagle",
            "transformer_layer_architecture": layer_cls, "transformer_layer_config": layer,
            "layernorms": True, "fusion_bias": False,
            "speculators_config": {"algorithm": "eagle", "default_proposal_method": "greedy",
                                   "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": gamma,
                                                         "verifier_accept_k": 1, "accept_tolerance": 0.0}],
                                   "verifier": {"name_or_path": target_name,
                                                "architectures": list(target_architectures)}}}


def write_feature_weights(draft, folder, target_name: str, target_architectures=(), gamma: int = 3,
                          dtype: str | None = None, head: torch.Tensor | None = None,
                          kept: torch.Tensor | None = None) -> None:
    """config.json and model.safetensors of `draft` into an existing `folder` (an EAGLE-3 draft: with the head over
    the `kept` ids of `head`, the target's LM head weight, by default the one it is attached to)."""
    folder = Path(folder)
    state = serving_state(draft)
    vocab_size = None
    if draft.draft_kind == "eagle3":
        if head is None:
            head = draft.get_output_embeddings().weight if draft.get_output_embeddings() is not None else None
        if head is None:
            raise ValueError("An EAGLE-3 export stores the head over its draft vocabulary, taken from the target's LM "
                             "head: pass head= (the target's) or attach the draft to its target first.")
        state.update(draft_head_state(head, kept))
        vocab_size = state["lm_head.weight"].shape[0]
    if dtype:
        state = {k: v.to(getattr(torch, dtype)) if v.is_floating_point() else v for k, v in state.items()}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config = serving_config(draft, target_name, list(target_architectures), gamma, vocab_size)
    (folder / "config.json").write_text(json.dumps(config, indent=2))


def load_feature_draft(folder, target, dtype: torch.dtype | None = None):
    """The feature draft saved in `folder`, attached to `target` (its embeddings and LM head), in eval mode."""
    folder = Path(str(folder))
    info = json.loads((folder / "draftsmith.json").read_text())
    draft = feature_draft_from_config(info["draft_config"])
    state = load_file(str(folder / "model.safetensors"))
    if draft.draft_kind == "medusa":
        state = {re.sub(r"^blocks\.(\d+)\.layers\.(\d+)\.", r"blocks.\1.layers.\2.linear.", k): v for k, v in state.items()}
    state = {k: v for k, v in state.items() if k not in DRAFT_HEAD_KEYS}  # decoding shares the target's head
    if _ZERO_O_BIAS in state and _ZERO_O_BIAS not in draft.state_dict():  # a Qwen2 layer written as a Llama one
        if state[_ZERO_O_BIAS].any():
            raise ValueError(f"{folder}: its layer's o_proj has a nonzero bias, which this draft's layer lacks.")
        del state[_ZERO_O_BIAS]
    dtype = dtype or target.get_output_embeddings().weight.dtype
    draft.load_state_dict(state, strict=True)
    return draft.to(dtype=dtype, device=target.get_output_embeddings().weight.device).attach(target).eval()


def feature_draft_from_config(config: dict) -> FeatureDraft:
    """A fresh (unattached) feature draft of the shape `config_dict()` describes."""
    config = dict(config)
    if config.get("draft_kind") == "medusa":
        return MedusaHeads(config["hidden_size"], config["vocab_size"], config["num_heads"], config["num_layers"])
    if config.get("draft_kind") in EAGLE_KINDS:
        from transformers import AutoConfig

        layer = dict(config["layer_config"])
        layer_config = AutoConfig.for_model(layer.pop("model_type"), **layer)
        layer_config._attn_implementation = "sdpa"
        if config["draft_kind"] == "eagle3":
            return Eagle3Draft(layer_config, config["aux_layers"])
        return EagleDraft(layer_config)
    raise ValueError(f"Not a feature draft config (draft_kind must be one of {FEATURE_KINDS}): {config.get('draft_kind')}")
