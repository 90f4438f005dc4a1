"""The EAGLE-style draft as a token tree (EAGLE-2's shape): the draft grows a tree over its own KV cache, one layer
pass per depth, and the target verifies every node in one pass (decode/proposers/tree.py, `FeatureTreeVerifier`).

A tree node is a drafted token. Its *slot* (what the draft layer reads to guess the node's children) is the
predicted feature of its parent (the root's is the last true slot's prediction, as in the chain) and the node's own
token, at position `m + depth - 1`, attending to every true slot and to its ancestors' slots only: exactly the
slots a chain along the node's path would have fed (`slot_mask`). Static trees keep `branching[d]` children of every
node at depth d; dynamic trees keep, per depth, the `width` paths with the highest product of draft probabilities
among each frontier node's `top_k` children (decode/proposers/tree.py's `choose_children`). The deepest level is never fed.
After the step the guessed slots leave the draft's cache; the verifier keeps the features of the accepted path, which
the next step's catch-up reads. Greedy or sampled, like every token tree here (decode/core/trees.py `judge_tree`).

    proposer = EagleTreeProposer(eagle_draft, depth=4, width=3, top_k=3)
    generate(target, proposer, prompt, gamma=4, max_new_tokens=64)   # gamma caps the depth
"""

from __future__ import annotations

import torch

from decode.drafts.feature_drafts import crop_cache
from decode.proposers.feature_decoding import EagleProposer, FeatureTreeShape
from decode.drafts.feature_drafts import additive
from decode.core.trees import TreeDraft, depths, tree_mask
from decode.proposers.tree import choose_children


def slot_mask(parents: list[int], past: int, rows: slice) -> torch.Tensor:
    """(q, past + rows.stop - 1) bool: which cached slots the tree nodes `rows` may attend when fed after `past` true
    slots and the nodes 1..rows.start-1 (in node order): every true slot, and among the tree's slots (node j >= 1 at
    column past + j - 1) their ancestors and themselves. The root has no slot of its own (its slot is the last true
    one). Pure."""
    tree = tree_mask(parents)[rows, 1: rows.stop]
    return torch.cat([torch.ones(tree.shape[0], past, dtype=torch.bool), tree], dim=1)


class EagleTreeProposer(FeatureTreeShape, EagleProposer):
    """EagleProposer drafting a token tree instead of a chain; `make_verifier` gives the tree verifier."""

    def __init__(self, draft, branching: list[int] | None = None, depth: int | None = None, width: int | None = None,
                 top_k: int = 4):
        super().__init__(draft)
        self._set_levels(branching, depth, width, top_k)

    @torch.inference_mode()
    def propose(self, tokens, gamma, params, generator):
        levels = self.levels[:gamma]
        predicted = self._catch_up(tokens) if levels else None
        if predicted is None:
            return [], torch.empty(0)
        m, device, draft = self.length, self.draft.device, self.draft
        nodes, parents, scores = [tokens[-1]], [-1], torch.zeros(1)
        after = [predicted[0, -1]]  # per node: the draft's predicted feature after it (what its children read)
        frontier = slice(0, 1)
        for level, (per_node, width) in enumerate(levels):
            if level:  # feed the frontier's slots: parent's predicted feature, own token, position m + depth - 1
                rows = frontier
                feats = torch.stack([after[parents[i]] for i in range(rows.start, rows.stop)])[None]
                ids = torch.tensor([nodes[rows]], device=device)
                positions = torch.tensor([[m + d - 1 for d in depths(parents)[rows]]], device=device)
                mask = additive(slot_mask(parents, m, rows).to(device), feats.dtype)
                out = draft(feats, ids, positions, mask, cache=self.cache)
                after += list(out[0])
            states = torch.stack(after[frontier.start: frontier.stop])
            logp = torch.log_softmax(draft.logits(states).float(), -1)
            picks = choose_children(scores, logp, per_node, width)
            parents += [frontier.start + r for r, _, _ in picks]
            nodes += [t for _, t, _ in picks]
            scores = torch.tensor([s for _, _, s in picks])
            frontier = slice(frontier.stop, len(nodes))
        crop_cache(self.cache, m)  # the guessed slots go; the true ones stay
        return TreeDraft(nodes, parents), torch.empty(0)
