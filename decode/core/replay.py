"""Greedy speculative decoding replayed on the target's own path: exact acceptance without decoding again.

At temperature 0 the decoder accepts a drafted token iff it is the target's next greedy token, and after any rejection
decoding continues on the target's greedy path. So one teacher-forced draft pass over prompt + the target's greedy
continuation tells, at every position, the draft's token, whether the target agrees and how sure the draft was; every
(gamma, confidence_threshold) rule can then be replayed on those positions, and priced with the cost model
(decode/core/costs.py), with no assumption that acceptance is i.i.d. `eval/speculate.py gamma=auto` chooses this way at
temperature 0.

Static token trees replay exactly too: a tree proposer gives every node the draft's top-k tokens after the node's
path, and at temperature 0 the accepted path is the target's own, so the draft's distribution after each accepted
node is the teacher-forced one. A step from position i keeps level d's node iff the target's token at i+d-1 is among
the draft's top branching[d-1] there, for every level up to d (`draft_ranks`, `replay_tree`). `best_tree` prices every
shape with the measured pass costs; `eval/speculate.py tree.branching=auto` decodes with its choice.

What the replay gets exactly (up to float rounding between a full pass and cached steps): every step's accepted
count, and its drafted count without a threshold. With a threshold, the tokens a real draft proposes after a rejected
one follow its own wrong token, so where the replay keeps drafting past a rejection it judges the stop on the target's
path instead: the drafted count of such steps (their cost) is an estimate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from decode.core.metrics import pass_seconds, replayed_speedup
from decode.core.trees import static_tree

Position = tuple[float, bool]  # (the draft's probability of its greedy token, whether the target's token is the same)


@torch.inference_mode()
def draft_positions(draft, prompts: list[list[int]], continuations: list[list[int]]) -> list[list[Position]]:
    """Per prompt, one teacher-forced draft pass over prompt + the target's greedy continuation."""
    out = []
    for prompt, path in zip(prompts, continuations):
        if not path:
            out.append([])
            continue
        ids = torch.tensor([prompt + path], device=draft.device)
        logits = draft(input_ids=ids).logits[0, len(prompt) - 1: -1].float()
        conf, top = torch.softmax(logits, -1).max(-1)
        same = (top == torch.tensor(path, device=top.device)).tolist()
        out.append(list(zip(conf.tolist(), same)))
    return out


def replay_steps(positions: Sequence[Sequence[Position]], gamma: int, threshold: float = 0.0) -> list[tuple[int, int]]:
    """(drafted, accepted) of every step greedy decoding takes over these positions with `DraftModelProposer(draft,
    threshold)` at `gamma` and max_new_tokens = the path's length (the decoder never drafts past the last token)."""
    steps = []
    for path in positions:
        i = 0
        while i < len(path):
            drafted = 0
            while drafted < min(gamma, len(path) - i - 1):
                drafted += 1
                if threshold and path[i + drafted - 1][0] < threshold:
                    break
            accepted = 0
            while accepted < drafted and path[i + accepted][1]:
                accepted += 1
            steps.append((drafted, accepted))
            i += accepted + 1
    return steps


def best_rule(positions, draft_step_s: float, target_pass_s: Sequence[float], max_gamma: int,
              thresholds: Sequence[float] = (0.0,), tolerance: float = 0.0) -> dict:
    """The (gamma, threshold) to decode with, replayed on `positions`, gamma in 1..max_gamma (a threshold cannot
    shorten a one-token draft, so gamma=1 is tried once): the simplest rule (smallest gamma, then smallest threshold)
    whose expected speedup is within `tolerance` (a fraction) of the best one's."""
    rules = [(g, th) for g in range(1, max_gamma + 1) for th in ([0.0] if g == 1 else thresholds)]
    scored = [{"gamma": g, "confidence_threshold": float(th),
               "expected_speedup": replayed_speedup(replay_steps(positions, g, th), draft_step_s, target_pass_s)}
              for g, th in rules]
    top = max(r["expected_speedup"] for r in scored)
    near = [r for r in scored if r["expected_speedup"] >= top * (1 - tolerance)]
    return {**min(near, key=lambda r: (r["gamma"], r["confidence_threshold"])), "best_expected_speedup": top}


@torch.inference_mode()
def draft_ranks(draft, prompts: list[list[int]], continuations: list[list[int]], cap: int = 8) -> list[list[int]]:
    """Per prompt, per position of the target's greedy continuation: the rank of the target's token among the
    draft's (teacher-forced) next-token scores, 0 = the draft's first choice, ranks beyond `cap` clipped to it."""
    out = []
    for prompt, path in zip(prompts, continuations):
        if not path:
            out.append([])
            continue
        logits = draft(input_ids=torch.tensor([prompt + path], device=draft.device)).logits[0, len(prompt) - 1: -1]
        chosen = logits.gather(-1, torch.tensor(path, device=logits.device)[:, None])
        out.append((logits > chosen).sum(-1).clamp_max(cap).tolist())
    return out


@dataclass
class ReplayedTreeStep:
    """What a replayed tree step costs and keeps (read by metrics' replayed_speedup and by `tree_step_seconds`)."""
    drafted: int  # the tree's depth
    accepted: int
    verified: int  # nodes the target scores beyond the pending one
    draft_passes: int
    level_rows: tuple[int, ...]  # nodes the draft feeds at each level (the root first)


def replay_tree(ranks: Sequence[Sequence[int]], branching: Sequence[int]) -> list[ReplayedTreeStep]:
    """Every step greedy decoding takes over these positions with a static tree of `branching` (decode/proposers/
    tree.py TreeProposer), max_new_tokens = the path's length: near the end the depth shrinks as the loop's gamma."""
    shapes = {}  # depth -> (nodes, rows fed per level)
    for d in range(1, len(branching) + 1):
        widths = [1]
        for k in branching[:d]:
            widths.append(widths[-1] * int(k))
        shapes[d] = (len(static_tree(list(branching[:d]))) - 1, tuple(widths[:d]))
    steps = []
    for path in ranks:
        i = 0
        while i < len(path):
            depth = min(len(branching), len(path) - i - 1)
            if depth < 1:  # the last token: a target-only step
                steps.append(ReplayedTreeStep(0, 0, 0, 0, ()))
                i += 1
                continue
            kept = 0
            while kept < depth and path[i + kept] < branching[kept]:
                kept += 1
            steps.append(ReplayedTreeStep(depth, kept, shapes[depth][0], depth, shapes[depth][1]))
            i += kept + 1
    return steps


def tree_step_seconds(step: ReplayedTreeStep, draft_step_s: float, target_pass_s: Sequence[float]) -> float:
    """A tree step's price: each draft level costs draft_step_s scaled as the target's pass grows with the rows it
    feeds (the two grow alike on CPUs: scripts/bench_tree_costs.py), plus one target pass over root and nodes."""
    one = target_pass_s[0]
    levels = sum(draft_step_s * pass_seconds(target_pass_s, rows) / one for rows in step.level_rows)
    return levels + pass_seconds(target_pass_s, step.verified + 1)


def tree_shapes(max_depth: int, max_nodes: int, max_children: int = 4) -> list[tuple[int, ...]]:
    """Every static tree to consider: depth 1..max_depth, children per node non-increasing with depth (a tree is widest
    where the draft is least sure of nothing yet), 1..max_children each, at most max_nodes drafted nodes. Chains
    ((1,)*g) included: a shape chosen by price may be one."""
    out = []

    def grow(prefix: tuple[int, ...], nodes: int, width: int):
        if prefix:
            out.append(prefix)
        if len(prefix) == max_depth:
            return
        for k in range(1, (prefix[-1] if prefix else max_children) + 1):
            if nodes + width * k <= max_nodes:
                grow(prefix + (k,), nodes + width * k, width * k)

    grow((), 0, 1)
    return out


def best_tree(ranks: Sequence[Sequence[int]], draft_step_s: float, target_pass_s: Sequence[float], max_depth: int,
              max_nodes: int, tolerance: float = 0.0) -> dict:
    """The static tree to decode with: every `tree_shapes` shape replayed on `ranks` and priced (`tree_step_seconds`);
    of those whose expected speedup is within `tolerance` (a fraction) of the best, the one with fewest nodes, then
    the shallowest. Returns its branching, expected speedup, the best expected speedup, the best chain's and the best
    shape with a node of two children or more (what width would buy), and how often the target's token is among
    the draft's top 1..4 (what any width can catch)."""
    scored = []
    for shape in tree_shapes(max_depth, max_nodes):
        steps = replay_tree(ranks, shape)
        cost = sum(tree_step_seconds(s, draft_step_s, target_pass_s) if s.drafted else target_pass_s[0]
                   for s in steps)
        emitted = sum(s.accepted + 1 for s in steps)
        scored.append((shape, emitted * target_pass_s[0] / cost if cost else float("nan")))
    top = max(x for _, x in scored)
    near = [(shape, x) for shape, x in scored if x >= top * (1 - tolerance)]
    shape, expected = min(near, key=lambda o: (len(static_tree(list(o[0]))), len(o[0])))
    chains = [x for shape_, x in scored if max(shape_) == 1]
    trees = [(x, shape_) for shape_, x in scored if max(shape_) > 1]
    widest = max(trees) if trees else (float("nan"), ())
    ranks_flat = [r for path in ranks for r in path]
    return {"branching": list(shape), "expected_speedup": expected, "best_expected_speedup": top,
            "best_chain_expected_speedup": max(chains), "best_branching_tree": list(widest[1]),
            "best_branching_tree_expected_speedup": widest[0],
            # share of positions where the target's token is among the draft's top k, k = 1..4
            "top_k_hits": [sum(r < k for r in ranks_flat) / len(ranks_flat) if ranks_flat else float("nan")
                           for k in range(1, 5)]}
