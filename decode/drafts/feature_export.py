"""Feature drafts on disk, in the layouts serving engines read (and back). Each kind's layout is its module's
(`serving_config`, `serving_state`, `state_from_serving`: decode/drafts/feature_drafts.py, decode/drafts/kinds.py's
registry finds the class); what this module adds is the same for every kind:

- `draftsmith.json` (`draft_kind`, `draft_config`: what rebuilds the module here) beside config.json and
  model.safetensors;
- for kinds whose export stores a head (`stores_head`): the head over the draft vocabulary, `lm_head` (the target's
  rows for the kept ids), `d2t` (draft id -> target id minus draft id) and `t2d` (which target ids the draft has),
  as speculators and vLLM read them (`draft_head_state`); a head over every id (Medusa's: `head_ids: all`, vLLM's
  Medusa layout has no map) has no d2t / t2d.

    write_feature_weights(draft, folder, target_name, gamma=3); draft = load_feature_draft(folder, target)

A kind that stores its head needs the target's LM head (`head`) and the kept ids (`kept`, None: every id).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from decode.drafts.feature_drafts import FeatureDraft
from decode.drafts.kinds import FEATURE_KINDS, KINDS, kind_of_draft, model_class

DRAFT_HEAD_KEYS = ("lm_head.weight", "d2t", "t2d")  # a stored head: derived from the target's head and kept ids


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


def write_feature_weights(draft, folder, target_name: str, target_architectures=(), gamma: int = 3,
                          dtype: str | None = None, head: torch.Tensor | None = None,
                          kept: torch.Tensor | None = None) -> None:
    """config.json and model.safetensors of `draft` into an existing `folder` (a kind that stores its head: with the
    head over the `kept` ids of `head`, the target's LM head weight, by default the one it is attached to)."""
    folder = Path(folder)
    state = draft.serving_state()
    vocab_size = None
    if kind_of_draft(draft).stores_head:
        if head is None:
            head = draft.get_output_embeddings().weight if draft.get_output_embeddings() is not None else None
        if head is None:
            raise ValueError(f"A {draft.draft_kind} export stores the head over its draft vocabulary, taken from the "
                             "target's LM head: pass head= (the target's) or attach the draft to its target first.")
        state.update(draft_head_state(head, kept))
        vocab_size = state["lm_head.weight"].shape[0]
    if dtype:
        state = {k: v.to(getattr(torch, dtype)) if v.is_floating_point() else v for k, v in state.items()}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config = draft.serving_config(target_name, list(target_architectures), gamma, vocab_size)
    (folder / "config.json").write_text(json.dumps(config, indent=2))


def load_feature_draft(folder, target, dtype: torch.dtype | None = None):
    """The feature draft saved in `folder`, attached to `target` (its embeddings and LM head), in eval mode."""
    folder = Path(str(folder))
    info = json.loads((folder / "draftsmith.json").read_text())
    draft = feature_draft_from_config(info["draft_config"])
    state = load_file(str(folder / "model.safetensors"))
    state = {k: v for k, v in state.items() if k not in DRAFT_HEAD_KEYS}  # decoding shares the target's head
    state = draft.state_from_serving(state, folder)
    dtype = dtype or target.get_output_embeddings().weight.dtype
    draft.load_state_dict(state, strict=True)
    return draft.to(dtype=dtype, device=target.get_output_embeddings().weight.device).attach(target).eval()


def feature_draft_from_config(config: dict) -> FeatureDraft:
    """A fresh (unattached) feature draft of the shape `config_dict()` describes."""
    if config.get("draft_kind") not in KINDS:
        raise ValueError(f"Not a feature draft config (draft_kind must be one of {FEATURE_KINDS}): "
                         f"{config.get('draft_kind')}")
    return model_class(KINDS[config["draft_kind"]]).from_config(dict(config))
