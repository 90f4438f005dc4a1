"""Token trees for any draft, by name (decode/proposers/registry.py): a standalone draft's TreeProposer
(decode/proposers/tree.py), or the tree a feature draft grows itself (Medusa's, the EAGLE family's).

    proposer = build_static(Request(draft=draft, settings=cfg))   # cfg.tree.branching, or request.branching
"""

from __future__ import annotations

from decode.drafts.kinds import kind_of_draft
from decode.proposers.eagle_tree import EagleTreeProposer
from decode.proposers.feature_decoding import MedusaTreeProposer
from decode.proposers.tree import TreeProposer


def _tree_class(draft):
    """Feature drafts grow their own trees (decode/proposers/feature_decoding.py, decode/proposers/eagle_tree.py)."""
    kind = kind_of_draft(draft)
    if kind is None:
        return TreeProposer
    return EagleTreeProposer if kind.autoregressive else MedusaTreeProposer


def build_static(request):
    """proposers=[tree] (decode/proposers/registry.py): the static tree request.branching (a chosen shape) or
    request.settings.tree.branching."""
    return _tree_class(request.draft)(request.draft, branching=list(request.branching or
                                                                     request.settings["tree"]["branching"]))


def build_dynamic(request):
    """proposers=[dynamic_tree]: a dynamic tree of request.settings.tree's depth, width and top_k."""
    tree = request.settings["tree"]
    return _tree_class(request.draft)(request.draft, depth=int(tree["depth"]), width=int(tree["width"]),
                                      top_k=int(tree["top_k"]))
