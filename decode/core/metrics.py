"""Speculative-decoding metrics from step logs, and the cost model. Pure functions.

Definitions (docs/metrics.md):
- alpha: accepted / (accepted + rejected); a rejected token is the one where verification stopped,
  drafted tokens after it count as neither (Leviathan et al.'s alpha).
- accepted_per_proposed: accepted / all drafted tokens.
- tau: tokens emitted per target verification call, the bonus/correction token INCLUDED (Spec-Bench).
- per-position acceptance: P(position i accepted | positions < i accepted), i = 1..gamma.
"""

from __future__ import annotations

from typing import Iterable, Sequence

ENTROPY_EDGES = (0.0, 0.5, 1.5, 3.0, float("inf"))  # target entropy buckets (nats): sure ... unsure


def _pairs(steps: Iterable) -> list[tuple[int, int]]:
    """(drafted, accepted) for each step; accepts StepLog objects or (drafted, accepted) tuples."""
    return [(s.drafted, s.accepted) if hasattr(s, "drafted") else (int(s[0]), int(s[1])) for s in steps]


def acceptance(steps: Iterable) -> dict:
    pairs = _pairs(steps)
    drafted = sum(d for d, _ in pairs)
    accepted = sum(a for _, a in pairs)
    rejected = sum(1 for d, a in pairs if a < d)
    n_steps = len(pairs)
    return {
        "alpha": accepted / (accepted + rejected) if accepted + rejected else float("nan"),
        "accepted_per_proposed": accepted / drafted if drafted else float("nan"),
        "tau": (accepted + n_steps) / n_steps if n_steps else float("nan"),
        "drafted": drafted, "accepted": accepted, "rejected": rejected, "verify_calls": n_steps,
    }


def per_position_accept(steps: Iterable, gamma: int) -> list[float]:
    """[P(pos 1 accepted), P(pos 2 accepted | pos 1 accepted), ...]; NaN where no step reached a position."""
    pairs = _pairs(steps)
    out = []
    for i in range(1, gamma + 1):
        reached = [(d, a) for d, a in pairs if d >= i and a >= i - 1]
        out.append(sum(1 for _, a in reached if a >= i) / len(reached) if reached else float("nan"))
    return out


def expected_tokens_per_step(alpha: float, gamma: int) -> float:
    """E[tokens emitted per verification] for i.i.d. acceptance alpha, bonus token included."""
    if alpha >= 1:
        return gamma + 1.0
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def theoretical_speedup(alpha: float, gamma: int, c: float) -> float:
    """Leviathan et al.: (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1)), c = draft step / target step."""
    return expected_tokens_per_step(alpha, gamma) / (gamma * c + 1)


def hardware_speedup(alpha: float, gamma: int, draft_step_s: float, target_pass_s: Sequence[float]) -> float:
    """Expected speedup with measured costs: target_pass_s[k-1] is the time of a k-token target pass.

    One step costs gamma draft steps plus one (gamma+1)-token target pass; target-only decoding costs
    one 1-token pass per token.
    """
    step_s = gamma * draft_step_s + target_pass_s[gamma]
    return expected_tokens_per_step(alpha, gamma) * target_pass_s[0] / step_s


def replayed_speedup(steps: Iterable, draft_step_s: float | dict, target_pass_s: Sequence[float]) -> float:
    """Expected speedup of these very steps under the cost model: the tokens they emitted (accepted + 1 each) times
    one target step, over what they cost (a step that drafted d tokens: d draft steps and a (d+1)-token target pass).
    Assumes nothing about how acceptance is distributed, so it also judges drafts of varying length
    (`confidence_threshold`). With target_pass_s all 1 and draft_step_s = c it is Leviathan's form for those steps.
    Steps drafted by prompt lookup (`source == "lookup"`) cost no draft step; a token tree's step costs one draft
    pass per depth (`draft_passes`) and a target pass over all its nodes (`verified`). Steps drafted by several
    proposers (decode/proposers/router.py): `draft_step_s` maps each step's source to its draft pass time."""
    steps = list(steps)
    pairs = _pairs(steps)
    emitted = sum(a + 1 for _, a in pairs)
    cost = 0.0
    for s, (d, _) in zip(steps, pairs):
        passes = 0 if getattr(s, "source", "") == "lookup" else _or(getattr(s, "draft_passes", None), d)
        each = draft_step_s.get(getattr(s, "source", ""), 0.0) if isinstance(draft_step_s, dict) else draft_step_s
        cost += passes * each + pass_seconds(target_pass_s, _or(getattr(s, "verified", None), d) + 1)
    return emitted * target_pass_s[0] / cost if cost else float("nan")


def _or(value, default):
    return default if value is None else value


def pass_seconds(target_pass_s: Sequence[float], k: int) -> float:
    """A k-token target pass: measured (target_pass_s[k-1]) or, past the longest measured, extended linearly from the
    last two (a pass over more tokens than the cost model timed: a large tree)."""
    if k <= len(target_pass_s):
        return target_pass_s[k - 1]
    last, step = target_pass_s[-1], (target_pass_s[-1] - target_pass_s[-2]) if len(target_pass_s) > 1 else 0.0
    return last + max(step, 0.0) * (k - len(target_pass_s))


def best_gamma(alpha: float, draft_step_s: float, target_pass_s: Sequence[float],
               tolerance: float = 0.0) -> tuple[int, float]:
    """(gamma, expected speedup): the gamma in 1..len(target_pass_s)-1 that maximises the hardware-aware speedup, or
    with `tolerance` (a fraction) the smallest gamma expected within it of the best."""
    options = [(g, hardware_speedup(alpha, g, draft_step_s, target_pass_s)) for g in range(1, len(target_pass_s))]
    top = max(s for _, s in options)
    return next(o for o in options if o[1] >= top * (1 - tolerance))


def tree_acceptance(steps: Iterable) -> dict | None:
    """Where a tree's accepted tokens came from, over the steps that drafted a tree (StepLog.ranks set; None when no
    step did): `reached_depth[d-1]`, the share of tree steps that accepted at least d tokens; `rank_share[r]`, the
    share of accepted nodes that were the draft's (r+1)-th choice among their siblings; `beyond_first_choice`, the
    share of accepted tokens a chain of the draft's first choices would not have kept (those from the first
    non-first-choice node on, greedy's reading: a chain stops where its token was rejected); `mean_nodes`, nodes
    scored per step. What the tree's width buys over a chain of the same depth."""
    trees = [s for s in steps if getattr(s, "ranks", None) is not None]
    if not trees:
        return None
    depth = max(s.drafted for s in trees)
    ranks = [r for s in trees for r in s.ranks]
    top = max(ranks, default=0)
    beyond = sum(len(s.ranks) - next((i for i, r in enumerate(s.ranks) if r), len(s.ranks)) for s in trees)
    return {"steps": len(trees), "mean_nodes": sum(_or(s.verified, s.drafted) for s in trees) / len(trees),
            "reached_depth": [sum(s.accepted >= d for s in trees) / len(trees) for d in range(1, depth + 1)],
            "rank_share": [ranks.count(r) / len(ranks) for r in range(top + 1)] if ranks else [],
            "beyond_first_choice": beyond / len(ranks) if ranks else float("nan")}


def by_entropy(entropies: Sequence[float], accepts: Sequence[float],
               edges: Sequence[float] = ENTROPY_EDGES) -> list[dict]:
    """Mean acceptance (0/1 events or probabilities) per target-entropy bucket [lo, hi); empty buckets left out."""
    out = []
    for lo, hi in zip(edges, edges[1:]):
        inside = [a for e, a in zip(entropies, accepts) if lo <= e < hi]
        if inside:
            out.append({"bucket": f"[{lo}, {hi})", "n": len(inside), "accept_rate": sum(inside) / len(inside)})
    return out
