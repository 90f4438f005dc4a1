"""Token trees: the target scores many drafted continuations in one forward pass.

A tree is the pending token (the root, node 0: the last accepted token, not yet fed to the target) and drafted
nodes 1..n, each with one token and a parent (`parents[i]` is node i's parent index, always < i; the root has
parent -1). A node's continuation is the path from the root to it. One target pass over the root and every node,
with a mask that lets each node see the cached context, its ancestors and itself (and nothing else) and with each
node at position `past + depth`, gives every node exactly the logits a separate pass over its own path would
(`tree_mask`, `tree_positions`). The longest path whose tokens the target would have produced is kept
(`greedy_tree_accept`), and the KV cache is compacted to that path (`TreeVerifier.keep_path`), as if only it had
been fed.

This module holds the pure part (property-tested in tests/test_tree.py): shapes, masks, positions, the acceptance
rule and `TreeDraft`, the value a tree proposer hands the main loop (decode/core/speculative.py). The model calls,
`TreeProposer` (the draft grows a tree) and `TreeVerifier` (the target scores it), are in decode/proposers/tree.py.

Tree shapes: static (k children per node at each depth, as Medusa's and SpecInfer's trees) or dynamic (EAGLE-2
style: each depth keeps the `width` children with the highest path probability under the draft, wherever they
are, so a sure branch grows deep and an unsure one wide).

Greedy only: a tree is verified by following the target's argmax (`greedy_tree_accept`). Lossless sampling over
several candidates (SpecInfer's multi-round rejection) is not built; asked to sample, the tree proposer refuses.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def check_parents(parents: list[int]) -> None:
    """A valid tree: node 0 is the root (parent -1), every other node's parent comes before it."""
    if not parents or parents[0] != -1 or any(not 0 <= p < i for i, p in enumerate(parents) if i):
        raise ValueError(f"tree parents must start with -1 (the root) and name an earlier node, got {parents}.")


def depths(parents: list[int]) -> list[int]:
    """Depth of every node (the root is 0)."""
    check_parents(parents)
    out = [0] * len(parents)
    for i in range(1, len(parents)):
        out[i] = out[parents[i]] + 1
    return out


def path_to(parents: list[int], node: int) -> list[int]:
    """The nodes from the root to `node`, both included."""
    path = [node]
    while parents[path[-1]] != -1:
        path.append(parents[path[-1]])
    return path[::-1]


def tree_mask(parents: list[int]) -> torch.Tensor:
    """(n+1, n+1) bool: mask[i, j] is True when node j is node i or one of its ancestors."""
    check_parents(parents)
    n = len(parents)
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        mask[i, path_to(parents, i)] = True
    return mask


def tree_positions(parents: list[int], past: int) -> torch.Tensor:
    """Each node's absolute position: `past` (cached tokens) + its depth."""
    return torch.tensor(depths(parents)) + past


def full_mask(parents: list[int], past: int, dtype=torch.float32, rows: slice | None = None) -> torch.Tensor:
    """The (1, 1, q, past+n+1) additive mask of a tree pass over a cache of `past` tokens: 0 where a node may
    attend (every cached token, its ancestors and itself), the dtype's minimum elsewhere (the 4D form transformers
    passes through to attention as is). `rows` feeds only some nodes (a level of a tree whose earlier nodes were
    fed, and cached, in order); the columns stop at the last node fed."""
    rows = rows or slice(0, len(parents))
    tree = tree_mask(parents)[rows, : rows.stop]
    allowed = torch.cat([torch.ones(tree.shape[0], past, dtype=torch.bool), tree], dim=1)
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def greedy_tree_accept(tokens: list[int], parents: list[int], target_next: list[int]) -> tuple[list[int], int]:
    """Greedy verification of a tree. tokens[i] is node i's token (tokens[0], the root's, is the pending token);
    target_next[i] is the target's argmax after node i's path. From the root, follow the child whose token is the
    target's choice while one exists. Returns the accepted nodes (root excluded) in path order and the target's next
    token after them (the bonus or correction token)."""
    check_parents(parents)
    children: dict[int, list[int]] = {}
    for i in range(1, len(parents)):
        children.setdefault(parents[i], []).append(i)
    node, path = 0, []
    while True:
        nxt = next((c for c in children.get(node, []) if tokens[c] == target_next[node]), None)
        if nxt is None:
            return path, target_next[node]
        path.append(nxt)
        node = nxt


def static_tree(branching: list[int]) -> list[int]:
    """Parents of a static tree: every node at depth d has branching[d] children (k per depth, as Medusa's and
    SpecInfer's static trees). branching=[1]*g is a chain of g drafted tokens."""
    if not branching or any(int(k) < 1 for k in branching):
        raise ValueError(f"tree branching must be a non-empty list of integers >= 1, got {branching}.")
    parents, frontier = [-1], [0]
    for k in branching:
        nxt = []
        for node in frontier:
            for _ in range(int(k)):
                parents.append(node)
                nxt.append(len(parents) - 1)
        frontier = nxt
    return parents


GREEDY_ONLY = ("token trees verify greedily only (lossless sampling over trees is not built): use temperature=0, or "
               "a chain proposer (draft, heuristic, lookup, lookup+draft, router) to sample.")


@dataclass
class TreeDraft:
    """What a tree proposer returns: node tokens (tokens[0] is the pending token, the root) and parents. The loop's
    verification writes the accepted nodes into `path`; the verifier and the proposer compact their caches to it."""
    tokens: list[int]
    parents: list[int]
    path: list[int] | None = None

    @property
    def depth(self) -> int:
        """The longest branch: the most drafted tokens one step can accept."""
        return max(depths(self.parents))

    @property
    def size(self) -> int:
        """Drafted nodes (root excluded): the tokens the target's pass verifies beyond the pending one."""
        return len(self.parents) - 1


def judge_tree(tree: TreeDraft, logits: torch.Tensor, temperature: float) -> tuple[list[int], int]:
    """Greedy verification of a scored tree: the accepted tokens (in path order) and the target's next token. Records
    the accepted path in `tree.path`."""
    if temperature > 0:
        raise ValueError(GREEDY_ONLY)
    path, nxt = greedy_tree_accept(tree.tokens, tree.parents, logits.argmax(-1).tolist())
    tree.path = path
    return [tree.tokens[i] for i in path], nxt
