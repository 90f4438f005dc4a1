"""The registry of proposers by name: one entry a proposer, naming the function that builds it and what the
evaluation needs to know to run it (which draft it drafts with, how its gamma is set, which settings it reads).
Torch-free at import (config checks read it before any model loads); builders are imported on first use.

A new proposer is its module (a Proposer of decode/core/speculative.py plus a `build(request)` function) and one
entry in PROPOSERS; `proposers=[<name>]` in eval/speculate.py then runs, checks and records it.

    proposer = build_proposer("lookup", Request(target=target, settings=cfg))
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ProposerKind:
    name: str
    build: str                   # "module:function": function(Request) -> a Proposer
    summary: str                 # what it drafts, for model cards and tables
    drafts_with: str = "draft"   # draft (one draft model) | none (no draft model) | every (all the drafts at once)
    gamma: str = "asked"         # asked (each gamma asked, auto too) | fixed (each fixed one) | depth (its tree's) |
                                 # ceiling (max_auto_gamma, a stop rule inside) | own (it chooses per step)
    min_gamma: int = 1           # fixed gammas below this are skipped (a schedule under a ceiling of 1 is a chain)
    tree: bool = False           # drafts a token tree (tree settings; no compiled decoding)
    feature_drafts: bool = False  # also runs with a feature draft (decode/drafts/kinds.py), as that kind's own
    section: str | None = None   # the config section it reads (tree | lookup | router), recorded with a policy
    tuned: bool = False          # fitted on the tune prompts before it runs (Request.stop_rule)


@dataclass
class Request:
    """What a builder may read: the draft model (or None), its confidence threshold, the target, the settings (a
    mapping with the `tree`, `lookup` and `router` sections of conf/speculate.yaml), every draft by name with its
    measured costs (the router), a chosen tree shape and a fitted stop rule."""
    draft: Any = None
    threshold: float = 0.0
    target: Any = None
    settings: Any = None
    drafts: dict | None = None
    costs: dict | None = None
    branching: list | None = None
    stop_rule: Any = None


PROPOSERS = {kind.name: kind for kind in (
    ProposerKind("draft", "decode.proposers.feature_decoding:build", "a chain of the draft's tokens",
                 feature_drafts=True),
    ProposerKind("heuristic", "decode.proposers.schedule:build", "the draft with transformers' heuristic γ schedule",
                 gamma="fixed", min_gamma=2),
    ProposerKind("predicted", "decode.proposers.predict_gamma:build",
                 "the draft, γ predicted per step from its calibrated confidence", gamma="ceiling", tuned=True),
    ProposerKind("lookup", "decode.proposers.ngram:build_lookup", "prompt lookup alone", drafts_with="none",
                 gamma="fixed", section="lookup"),
    ProposerKind("lookup+draft", "decode.proposers.ngram:build_lookup_then_draft",
                 "prompt lookup, the draft where nothing matches", gamma="fixed", section="lookup"),
    ProposerKind("tree", "decode.proposers.any_tree:build_static", "a static token tree", gamma="depth", tree=True,
                 feature_drafts=True, section="tree"),
    ProposerKind("dynamic_tree", "decode.proposers.any_tree:build_dynamic", "a dynamic token tree", gamma="depth",
                 tree=True, feature_drafts=True, section="tree"),
    ProposerKind("router", "decode.proposers.router:build", "a router over prompt lookup and the drafts",
                 drafts_with="every", gamma="own", section="router"),
)}
TREES = tuple(name for name, kind in PROPOSERS.items() if kind.tree)


def proposer_named(name: str) -> ProposerKind:
    if name not in PROPOSERS:
        raise ValueError(f"Not a proposer: {name!r} (one of {', '.join(PROPOSERS)}).")
    return PROPOSERS[name]


def build_proposer(name: str, request: Request):
    """The proposer `name` for `request`, built by its registered function."""
    module, function = proposer_named(name).build.split(":")
    return getattr(importlib.import_module(module), function)(request)
