"""The registry of feature-draft kinds: one entry a kind, naming its module and what the rest of the tree asks of it
(how it drafts, what its export stores, how each engine serves it). Plain Python (no torch), so config checks that
run before any model loads (eval/checks.py) read kinds the same way decoding does.

A new kind is its module (a FeatureDraft subclass with `build`, `from_config`, `serving_config`; see
decode/drafts/feature_drafts.py) plus one entry in KINDS; training, decoding, export, the card and the engines find it
here. Standalone drafts (a whole causal LM) are `STANDALONE`.

    kind = draft_kind_named("medusa"); model_class(kind).build(target, cfg.model.draft)
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DraftKind:
    name: str
    model: str                   # "module:Class" of its torch module
    summary: str                 # what an export holds, for its model card
    autoregressive: bool         # drafts over its own outputs (a KV cache of its own); else all tokens from one feature
    stores_head: bool            # its export holds a copy of the target's head (else engines share the target's)
    vllm_method: str | None      # vLLM's speculative_config method for it; None: vLLM serves no form of it
    llamacpp_spec: str | None    # llama-server's --spec-type for it; None: llama.cpp has no form of it
    sglang: str | None = None    # SGLang's --speculative-algorithm for it; None: none
    head_ids: str = "draft_vocab"  # a stored head's rows: draft_vocab (the kept ids, with d2t / t2d) | all (every id)


KINDS = {kind.name: kind for kind in (
    DraftKind("medusa", "decode.drafts.feature_drafts:MedusaHeads",
              "Medusa heads on the target's last hidden state, in vLLM's Medusa layout",
              autoregressive=False, stores_head=True, vllm_method="medusa", llamacpp_spec=None,
              head_ids="all"),  # vLLM's Medusa loads its own lm_head (original_lm_head: one for all heads)
    DraftKind("eagle", "decode.drafts.feature_drafts:EagleDraft",
              "an EAGLE-style feature draft: one decoder layer over the target's last hidden states, in the "
              "`speculators` layout", autoregressive=True, stores_head=False, vllm_method=None,  # VLLM_REFUSES: why
              llamacpp_spec=None, sglang="EAGLE"),
    DraftKind("eagle3", "decode.drafts.eagle3:Eagle3Draft",
              "an EAGLE-3 draft: one decoder layer over the inputs of a few of the target's layers, in the "
              "`speculators` layout", autoregressive=True, stores_head=True, vllm_method="eagle3",
              llamacpp_spec="draft-eagle3", sglang="EAGLE3"),
)}
FEATURE_KINDS = tuple(KINDS)
STANDALONE = DraftKind("standalone", "", "a standalone causal LM", autoregressive=True, stores_head=True,
                       vllm_method="draft_model", llamacpp_spec="draft-simple", sglang="STANDALONE")


# Why vLLM (0.32) serves no form of a kind whose vllm_method is None, said wherever one is asked for.
VLLM_REFUSES = {"eagle": "vLLM reads speculators' eagle3 layout only (its speculators config accepts eagle3, peagle "
                         "and dflash types), and its own EagleLlamaForCausalLM layout has none of the HASS norms this "
                         "EAGLE-style draft is built with"}


def draft_kind_named(name: str) -> DraftKind:
    if name not in KINDS:
        raise ValueError(f"Not a feature-draft kind: {name!r} (one of {', '.join(KINDS)}).")
    return KINDS[name]


def kind_of_draft(draft) -> DraftKind | None:
    """A loaded draft's kind: its registry entry, or None for a standalone causal LM."""
    return KINDS.get(getattr(draft, "draft_kind", None))


def model_class(kind: DraftKind):
    """The torch module class of `kind` (imported on first use: this module stays torch-free)."""
    module, name = kind.model.split(":")
    return getattr(importlib.import_module(module), name)


def feature_kind_of(folder) -> str | None:
    """The kind's name when `folder` holds a feature draft, else None (no, or an unreadable, draftsmith.json)."""
    path = Path(str(folder)) / "draftsmith.json"
    if not path.is_file():
        return None
    try:
        kind = json.loads(path.read_text()).get("draft_kind")
    except json.JSONDecodeError:
        return None
    return kind if kind in KINDS else None


def serving_kind_of(folder) -> DraftKind:
    """How engines serve the draft in `folder`: its feature kind, or STANDALONE (a .gguf, a model folder)."""
    kind = None if str(folder).endswith(".gguf") else feature_kind_of(folder)
    return KINDS[kind] if kind else STANDALONE
