"""Token trees grown by a draft model and scored by the target in one pass (the tree maths: decode/core/trees.py).

`TreeProposer`: the draft model grows a tree, one draft pass per depth, static (k children per node at each depth,
as Medusa's and SpecInfer's trees) or dynamic (EAGLE-2 style: each depth keeps the `width` children with the
highest path probability under the draft, so a sure branch grows deep and an unsure one wide). `TreeVerifier`:
the target scores every node in one masked pass and its KV cache is compacted to the accepted path
(`compact_cache`), as if only that path had been fed. Both plug into the main loop of decode/core/speculative.py:
a proposer that returns a `TreeDraft` brings its own verifier. Greedy or sampled: the tree is the draft's top tokens
either way, and the loop judges it (decode/core/trees.py `judge_tree`).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from decode.core.trees import TreeDraft, full_mask, static_tree, tree_positions


def compact_cache(cache: DynamicCache, prefix: int, moved: list[int]) -> None:
    """Keep the first `prefix` cached positions where they are and the positions `moved` (sorted, each >= prefix)
    right after them, in order, in every layer of a dynamic cache; cut the rest. Only `moved` is copied (a tree step
    keeps the context and moves its accepted path down: it costs the path's length, not the context's)."""
    end = prefix + len(moved)
    for layer in cache.layers:
        if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
            continue
        if moved:
            index = torch.tensor(moved, device=layer.keys.device)
            layer.keys[..., prefix: end, :] = layer.keys.index_select(-2, index)
            layer.values[..., prefix: end, :] = layer.values.index_select(-2, index)
        layer.keys, layer.values = layer.keys[..., :end, :], layer.values[..., :end, :]


def _tree_pass(model, cache, tokens: list[int], parents: list[int], past: int, rows: slice) -> torch.Tensor:
    """Feed the tree nodes `rows` (their tokens) after `past` cached context tokens and the earlier nodes; returns
    their logits (fp32)."""
    dtype = next(model.parameters()).dtype
    mask = full_mask(parents, past, dtype, rows).to(model.device)
    positions = tree_positions(parents, past)[rows].to(model.device)[None]
    out = model(input_ids=torch.tensor([tokens[rows]], device=model.device), attention_mask=mask,
                position_ids=positions, cache=cache, use_cache=True)
    return out.logits[0].float()


def choose_children(scores: torch.Tensor, logp: torch.Tensor, per_node: int,
                    width: int | None = None) -> list[tuple[int, int, float]]:
    """The next level of a tree: (frontier row, token, path log-probability) for each new node. `scores` are the
    frontier nodes' path log-probabilities, `logp` (rows, V) the draft's next-token log-probabilities after each.
    Static (width None): each row's `per_node` most likely tokens. Dynamic: of those candidates, the `width` with the
    highest path log-probability overall. Ordered by row, then by probability. Pure."""
    top = logp.topk(min(per_node, logp.shape[-1]), dim=-1)
    path = scores[:, None] + top.values
    picks = [(r, j) for r in range(path.shape[0]) for j in range(path.shape[1])]
    if width is not None and width < len(picks):
        best = path.flatten().topk(width).indices.tolist()
        picks = sorted((i // path.shape[1], i % path.shape[1]) for i in best)
    return [(r, int(top.indices[r, j]), float(path[r, j])) for r, j in picks]


def tree_levels(branching: list[int] | None = None, depth: int | None = None, width: int | None = None,
                top_k: int = 4) -> list[tuple[int, int | None]]:
    """(children per node, nodes kept per level or None) for each depth: static from `branching`, else dynamic
    (`depth` levels of `width` nodes among each node's `top_k` children), checked."""
    if branching is not None:
        static_tree(branching)  # validates
        return [(int(k), None) for k in branching]
    if not depth or not width or depth < 1 or width < 1 or top_k < 1:
        raise ValueError(f"a dynamic tree needs depth >= 1, width >= 1 and top_k >= 1, got depth={depth}, "
                         f"width={width}, top_k={top_k}.")
    return [(int(top_k), int(width))] * int(depth)


def _chain_pass(model, cache, ids: list[int], keep: int) -> torch.Tensor:
    out = model(input_ids=torch.tensor([ids], device=model.device), cache=cache, use_cache=True, logits_to_keep=keep)
    return out.logits[0].float()


class TreeVerifier:
    """The target scores a whole tree in one pass over its KV cache (dynamic caches only), then keeps the accepted
    path. Chains (lists, e.g. an empty draft at the end of the token budget) are scored as ChainVerifier does."""

    def __init__(self, target):
        self.model = target
        self.cache, self.length, self._tree, self._tree_start = None, 0, None, 0

    @torch.inference_mode()
    def start(self, prompt: list[int]) -> None:
        self.cache, self.length, self._tree = DynamicCache(config=self.model.config), 0, None
        if len(prompt) > 1:  # the last prompt token stays pending: it is the root of the first tree
            self._chain(prompt[:-1], 1)

    def _chain(self, ids: list[int], keep: int) -> torch.Tensor:
        """Feed `ids` after the cache; the logits of the last `keep` of them."""
        self.length += len(ids)
        return _chain_pass(self.model, self.cache, ids, keep)

    def _tree_logits(self, tree: TreeDraft) -> torch.Tensor:
        """One pass over every node of `tree` after the cache; the logits after each node's path."""
        return _tree_pass(self.model, self.cache, tree.tokens, tree.parents, self.length, slice(0, len(tree.tokens)))

    @torch.inference_mode()
    def score(self, tokens: list[int], drafted) -> torch.Tensor:
        """Target logits after every node's path, shape (nodes + 1, V), fp32 (a chain: after each position)."""
        if not isinstance(drafted, TreeDraft):
            return self._chain(tokens[self.length:] + list(drafted), len(drafted) + 1)
        if len(drafted.tokens) != len(drafted.parents) or drafted.tokens[0] != tokens[-1]:
            raise ValueError("a tree needs one token per node, and its root must be the pending token.")
        if len(tokens) - 1 > self.length:  # context not cached yet goes in first, as a chain
            self._chain(tokens[self.length:-1], 1)
        logits = self._tree_logits(drafted)
        self._tree, self._tree_start = drafted, self.length
        self.length += len(drafted.tokens)
        return logits

    @torch.inference_mode()
    def keep_path(self, path: list[int]) -> None:
        """After a tree pass: keep the cached context, the root and the accepted nodes (in path order)."""
        start = self._tree_start
        compact_cache(self.cache, start + 1, [start + i for i in path])
        self.length, self._tree = start + 1 + len(path), None

    @torch.inference_mode()
    def rollback(self, keep: int) -> None:
        if self._tree is not None:
            if self._tree.path is None:
                raise RuntimeError("a scored tree is rolled back after judge_tree() has chosen its path.")
            self.keep_path(self._tree.path)
        if self.length > keep:
            self.cache.crop(keep - self.length)
            self.length = keep


class TreeProposer:
    """A draft model grows a token tree greedily from the pending token, one draft pass per depth (that depth's
    nodes, under a tree mask over the draft's own cache); after verification its cache keeps the accepted path,
    like the target's. Static: `branching` (children per node at each depth). Dynamic: `depth` levels of at most
    `width` nodes, the most probable paths among each frontier node's `top_k` children (`choose_children`).
    The loop's gamma caps the depth (it shrinks at the end of the token budget)."""

    make_verifier = TreeVerifier  # the loop verifies this proposer's trees with a TreeVerifier

    def __init__(self, draft, branching: list[int] | None = None, depth: int | None = None, width: int | None = None,
                 top_k: int = 4):
        self.levels = tree_levels(branching, depth, width, top_k)
        self.model = draft
        self.cache, self.length, self._last, self._start, self._fed = None, 0, None, 0, 0

    @property
    def depth(self) -> int:
        return len(self.levels)

    @torch.inference_mode()
    def start(self, prompt: list[int]) -> None:
        self.cache, self.length, self._last = DynamicCache(config=self.model.config), 0, None

    @torch.inference_mode()
    def propose(self, tokens, gamma, params, generator):
        levels = self.levels[:gamma]
        if not levels:
            return [], torch.empty(0)
        nodes, parents, scores, fed = [tokens[-1]], [-1], torch.zeros(1), 0
        for per_node, width in levels:  # the frontier is always the last nodes added: rows fed.. of the tree
            rows = slice(fed, len(nodes))
            if fed == 0:  # the root sees only context: one chain pass with what the draft has not cached yet (a
                logits = _chain_pass(self.model, self.cache, tokens[self.length:], 1)  # fully kept step's last token)
                self.length = len(tokens) - 1
            else:
                logits = _tree_pass(self.model, self.cache, nodes, parents, self.length, rows)
            picks = choose_children(scores, torch.log_softmax(logits, -1), per_node, width)
            fed = rows.stop
            parents += [fed - len(scores) + r for r, _, _ in picks]
            nodes += [t for _, t, _ in picks]
            scores = torch.tensor([s for _, _, s in picks])
        self._start, self._fed = self.length, fed
        self.length += fed
        self._last = TreeDraft(nodes, parents)
        return self._last, torch.empty(0)

    @torch.inference_mode()
    def rollback(self, keep: int) -> None:
        """Keep the cached context, the root and the accepted nodes the draft fed (the deepest level never is)."""
        if self._last is not None and self._last.path is not None:
            kept = [i for i in self._last.path if i < self._fed]
            compact_cache(self.cache, self._start + 1, [self._start + i for i in kept])
            self.length = self._start + 1 + len(kept)
        self._last = None
        if self.length > keep:
            self.cache.crop(keep - self.length)
            self.length = keep
