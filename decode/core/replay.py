"""Greedy speculative decoding replayed on the target's own path: exact acceptance without decoding again.

At temperature 0 the decoder accepts a drafted token iff it is the target's next greedy token, and after any rejection
decoding continues on the target's greedy path. So one teacher-forced draft pass over prompt + the target's greedy
continuation tells, at every position, the draft's token, whether the target agrees and how sure the draft was; every
(gamma, confidence_threshold) rule can then be replayed on those positions, and priced with the cost model
(decode/core/costs.py), with no assumption that acceptance is i.i.d. `eval/speculate.py gamma=auto` chooses this way at
temperature 0.

What the replay gets exactly (up to float rounding between a full pass and cached steps): every step's accepted
count, and its drafted count without a threshold. With a threshold, the tokens a real draft proposes after a rejected
one follow its own wrong token, so where the replay keeps drafting past a rejection it judges the stop on the target's
path instead: the drafted count of such steps (their cost) is an estimate.
"""

from __future__ import annotations

from typing import Sequence

import torch

from decode.core.metrics import replayed_speedup

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
