"""Token trees: the target scores many drafted continuations in one forward pass.

A tree is the pending token (the root, node 0: the last accepted token, not yet fed to the target) and drafted
nodes 1..n, each with one token and a parent (`parents[i]` is node i's parent index, always < i; the root has
parent -1). A node's continuation is the path from the root to it. One target pass over the root and every node,
with a mask that lets each node see the cached context, its ancestors and itself (and nothing else) and with each
node at position `past + depth`, gives every node exactly the logits a separate pass over its own path would
(`tree_mask`, `tree_positions`). The longest path whose tokens the target would have produced is kept
(`greedy_tree_accept`), and the KV cache is compacted to that path (`TreeVerifier.keep_path`), as if only it had
been fed.

Pure functions first (property-tested in tests/test_tree.py); the model call is TreeVerifier.

Status: greedy only. `StaticTreeDrafter` (a draft model expanding a static tree, one draft pass per depth) and
`generate_tree_greedy` decode with trees, output identical to the target's greedy output (tests/test_tree.py). Not
built yet: lossless sampling over trees, dynamic trees, and trees as a proposer of the main loop and in
eval/speculate.py (so no measured speedup yet).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache


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


def compact_cache(cache: DynamicCache, keep: torch.Tensor) -> None:
    """Keep only the cached positions `keep` (sorted indices), in order, in every layer of a dynamic cache."""
    for layer in cache.layers:
        if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
            continue
        index = keep.to(layer.keys.device)
        layer.keys = layer.keys.index_select(-2, index)
        layer.values = layer.values.index_select(-2, index)


def _tree_pass(model, cache, tokens: list[int], parents: list[int], past: int, rows: slice) -> torch.Tensor:
    """Feed the tree nodes `rows` (their tokens) after `past` cached context tokens and the earlier nodes; returns
    their logits (fp32)."""
    dtype = next(model.parameters()).dtype
    mask = full_mask(parents, past, dtype, rows).to(model.device)
    positions = tree_positions(parents, past)[rows].to(model.device)[None]
    out = model(input_ids=torch.tensor([tokens[rows]], device=model.device), attention_mask=mask,
                position_ids=positions, cache=cache, use_cache=True)
    return out.logits[0].float()


class TreeVerifier:
    """The target scores a whole tree in one pass over its KV cache (dynamic caches only), then keeps one path."""

    def __init__(self, target):
        self.model = target
        self.cache = None
        self.length = 0
        self._tree_start = None

    @torch.inference_mode()
    def start(self, prompt: list[int]) -> None:
        self.cache = DynamicCache(config=self.model.config)
        self.length = 0
        if len(prompt) > 1:  # the last prompt token stays pending: it is the root of the first tree
            self.model(input_ids=torch.tensor([prompt[:-1]], device=self.model.device), cache=self.cache,
                       use_cache=True, logits_to_keep=1)
            self.length = len(prompt) - 1

    @torch.inference_mode()
    def score(self, tokens: list[int], parents: list[int]) -> torch.Tensor:
        """Target logits after every node's path, shape (n+1, V), fp32; tokens[0] is the pending token."""
        if len(tokens) != len(parents):
            raise ValueError(f"a tree needs one token per node: {len(tokens)} tokens, {len(parents)} parents.")
        logits = _tree_pass(self.model, self.cache, tokens, parents, self.length, slice(0, len(tokens)))
        self._tree_start = self.length
        self.length += len(tokens)
        return logits

    @torch.inference_mode()
    def keep_path(self, path: list[int]) -> None:
        """After a tree pass: keep the cached context, the root and the accepted nodes (in path order)."""
        if self._tree_start is None:
            raise RuntimeError("keep_path follows a score() call.")
        start = self._tree_start
        keep = torch.tensor(list(range(start + 1)) + [start + i for i in path])
        compact_cache(self.cache, keep)
        self.length = len(keep)
        self._tree_start = None


class StaticTreeDrafter:
    """A draft model expands a static tree greedily: at depth d every frontier node gets the draft's branching[d]
    most likely next tokens as children. One draft pass per depth feeds that depth's nodes (tree mask over the
    draft's own cache); after verification the draft's cache keeps the accepted path, like the target's."""

    def __init__(self, draft, branching: list[int]):
        self.model = draft
        self.parents = static_tree(branching)
        self.branching = [int(k) for k in branching]
        self.cache, self.length, self._start, self._fed = None, 0, None, 0

    @torch.inference_mode()
    def start(self, prompt: list[int]) -> None:
        self.cache, self.length = DynamicCache(config=self.model.config), 0

    @torch.inference_mode()
    def propose(self, tokens: list[int]) -> tuple[list[int], list[int]]:
        """The tree's tokens (node 0 is tokens[-1], the pending token) and parents."""
        if len(tokens) - 1 > self.length:  # context the draft has not cached yet (the last step's bonus token...)
            self.model(input_ids=torch.tensor([tokens[self.length:-1]], device=self.model.device), cache=self.cache,
                       use_cache=True, logits_to_keep=1)
            self.length = len(tokens) - 1
        tree, fed, frontier = [tokens[-1]], 0, [0]
        self._start = self.length
        for k in self.branching:
            logits = _tree_pass(self.model, self.cache, tree + [0] * (len(self.parents) - len(tree)), self.parents,
                                self.length, slice(fed, fed + len(frontier)))
            fed += len(frontier)
            nxt = []
            for row in logits:
                nxt_tokens = row.topk(k).indices.tolist()
                tree += nxt_tokens
                nxt += list(range(len(tree) - k, len(tree)))
            frontier = nxt
        self._fed = fed
        return tree, list(self.parents)

    @torch.inference_mode()
    def keep_path(self, path: list[int]) -> None:
        """Keep the cached context, the root and the accepted nodes the draft fed (the deepest level never is)."""
        start = self._start
        kept = [i for i in path if i < self._fed]
        compact_cache(self.cache, torch.tensor(list(range(start + 1)) + [start + i for i in kept]))
        self.length = start + 1 + len(kept)


def generate_tree_greedy(target, drafter: StaticTreeDrafter, prompt: list[int], max_new_tokens: int,
                         eos_token_ids: set[int] | None = None) -> tuple[list[int], list[int]]:
    """Greedy speculative decoding with token trees: returns the new tokens (the target's own greedy output) and the
    number of tokens accepted per step (bonus token excluded)."""
    eos = eos_token_ids or set()
    verifier = TreeVerifier(target)
    verifier.start(prompt)
    drafter.start(prompt)
    tokens, accepted = list(prompt), []
    while len(tokens) - len(prompt) < max_new_tokens:
        tree, parents = drafter.propose(tokens)
        logits = verifier.score(tree, parents)
        path, nxt = greedy_tree_accept(tree, parents, logits.argmax(-1).tolist())
        verifier.keep_path(path)
        drafter.keep_path(path)
        new = [tree[i] for i in path] + [nxt]
        tokens += new
        accepted.append(len(path))
        if any(t in eos for t in new):
            break
    out = tokens[len(prompt):][:max_new_tokens]
    for i, t in enumerate(out):
        if t in eos:
            return out[: i + 1], accepted
    return out, accepted
