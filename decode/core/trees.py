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

Greedy: a tree is verified by following the target's argmax (`greedy_tree_accept`). Sampling (T > 0): multi-round
rejection over siblings (SpecInfer's rule, `sampled_tree_accept`): at a node, with r the target's law after its
path, each child in turn is accepted with probability min(1, r(x)/q(x)) (q: the law the child's token was drawn
from; a token chosen deterministically, as the tree proposers here choose the draft's top ones, is a point mass:
accepted with probability r(x)); on a rejection r becomes norm(max(0, r - q)) and the next sibling is tried; the
accepted child's own children are judged the same way against the target's law after it; when no child is accepted
the next token is drawn from what is left of r. Every emitted token follows the target's law exactly, whatever tree
the draft built, as long as the tree is fixed before the target's random draws (tests/test_tree_sampling.py: the
exact law of the rule, and Monte Carlo through every tree proposer).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from decode.core.sampling import sample


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
    children = children_of(parents)
    node, path = 0, []
    while True:
        nxt = next((c for c in children.get(node, []) if tokens[c] == target_next[node]), None)
        if nxt is None:
            return path, target_next[node]
        path.append(nxt)
        node = nxt


def children_of(parents: list[int]) -> dict[int, list[int]]:
    """Each node's children, in node order."""
    out: dict[int, list[int]] = {}
    for i in range(1, len(parents)):
        out.setdefault(parents[i], []).append(i)
    return out


def path_ranks(parents: list[int], path: list[int]) -> list[int]:
    """For each node of an accepted `path` (root excluded), its rank among its parent's children: 0 where the target
    kept the draft's first choice, 1 its second, ... (tree proposers add each node's children best first). A chain of
    first choices would have kept the leading zeros; the rest is what the tree's width bought."""
    children = children_of(parents)
    return [children[parents[node]].index(node) for node in path]


def residual(r: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, r - q)): what is left of the law r after a candidate drawn from q was rejected. When nothing is
    left (r <= q everywhere up to rounding, so the rejection had probability ~0) r itself."""
    left = (r - q).clamp_min(0)
    total = left.sum()
    return left / total if total > 0 else r


def judge_siblings(r: torch.Tensor, tokens: list[int], qs: list[torch.Tensor | None],
                   u: torch.Tensor) -> tuple[int | None, torch.Tensor]:
    """One node of multi-round rejection: candidates `tokens` (its children's tokens, in order), each drawn from
    qs[i] (None: chosen deterministically, a point mass), against the target's law r; u[i] ~ U[0, 1) per candidate.
    Returns (index of the accepted candidate or None, the residual law the next token is drawn from when none is).
    Pure: the law of the outcome is exactly r (tests/test_tree_sampling.py computes it)."""
    for i, (x, q) in enumerate(zip(tokens, qs)):
        qx = 1.0 if q is None else float(q[x])
        if qx > 0 and float(u[i]) * qx < float(r[x]):  # accept with probability min(1, r(x) / q(x))
            return i, r
        if q is None:
            q = torch.zeros_like(r)
            q[x] = 1.0
        r = residual(r, q)
    return None, r


def sampled_tree_accept(tokens: list[int], parents: list[int], target_probs: torch.Tensor,
                        generator: torch.Generator | None = None,
                        child_probs: dict[int, torch.Tensor] | None = None) -> tuple[list[int], int]:
    """Lossless sampled verification of a tree: from the root, multi-round rejection over each node's children
    (`judge_siblings`) against target_probs[node] (the target's law after the node's path, (n+1, V)); descend into the
    accepted child, stop where none is. `child_probs[i]`: the law node i's token was drawn from (absent: chosen
    deterministically). Returns the accepted nodes in path order and the next token (drawn from the last node's
    residual law: the correction, or the bonus token past a leaf)."""
    check_parents(parents)
    children, child_probs = children_of(parents), child_probs or {}
    node, path = 0, []
    while True:
        kids = children.get(node, [])
        u = torch.rand(len(kids), generator=generator, dtype=torch.float64, device=target_probs.device)
        pick, left = judge_siblings(target_probs[node], [tokens[c] for c in kids],
                                    [child_probs.get(c) for c in kids], u)
        if pick is None:
            return path, int(sample(left, generator))
        node = kids[pick]
        path.append(node)


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


def judge_tree(tree: TreeDraft, logits: torch.Tensor, params, generator: torch.Generator | None = None
               ) -> tuple[list[int], int]:
    """Verify a scored tree: greedily at temperature 0, else by multi-round rejection over the target's law under
    `params` (a SamplingParams: temperature, top-k, top-p). Returns the accepted tokens (in path order) and the
    target's next token; records the accepted path in `tree.path`."""
    if params.temperature == 0:
        path, nxt = greedy_tree_accept(tree.tokens, tree.parents, logits.argmax(-1).tolist())
    else:
        path, nxt = sampled_tree_accept(tree.tokens, tree.parents, params.probs(logits), generator)
    tree.path = path
    return [tree.tokens[i] for i in path], nxt
