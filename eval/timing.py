"""Interleaved timing: target-only decoding and every speculative setting take turns, prompt by prompt.

A shared machine drifts (other jobs, thermal and frequency changes) over the minutes an evaluation takes, and now
and then stalls a pass for seconds. Timing the baseline once, before the speculative runs, lets drift pass for a
speedup. Here every arm first decodes a few tokens of the first prompt (warm-up: allocations, kernel choices), then
every prompt is decoded by every arm back to back, in an order that rotates with the prompt and the pass, so drift
lands on all arms alike and each prompt's times are paired. With `repeats` > 1 each prompt's time is its fastest
pass: other load only ever adds time, so the fastest pass is the one it disturbed least.

    from eval.timing import Arm, timed_interleaved
    runs = timed_interleaved(target, [Arm("target", NoProposer(), 0), Arm("g1", DraftModelProposer(d), 1)],
                             prompts, max_new_tokens=64, repeats=2)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from decode.core.speculative import Proposer, SamplingParams, generate


@dataclass
class Arm:
    key: object           # how the caller names this arm in the result
    proposer: Proposer | None
    gamma: int            # 0 for target-only decoding
    record_entropy: bool = False
    run: Callable | None = None  # another decoder instead of ours: run(prompt, max_new_tokens, params, eos, generator)
                                 # -> an object with tokens, steps, prefill_s, decode_s (eval/hf_arms.py)

    def decode(self, target, prompt, max_new_tokens, params, eos_token_ids, generator, record_entropy: bool):
        if self.run is not None:
            return self.run(prompt, max_new_tokens, params, eos_token_ids, generator)
        return generate(target, self.proposer, prompt, self.gamma, max_new_tokens, params, eos_token_ids, generator,
                        record_entropy)


def rotated(items: list, shift: int) -> list:
    shift %= max(len(items), 1)
    return items[shift:] + items[:shift]


def timed_interleaved(target, arms: list[Arm], prompts: list[list[int]], max_new_tokens: int,
                      params: SamplingParams | None = None, eos_token_ids: set[int] | None = None, seed: int = 0,
                      repeats: int = 1, on_prompt: Callable[[int, int], None] | None = None) -> dict:
    """{arm.key: generate_all-like dict}: tokens, steps and prompt_steps from the first pass; prompt_seconds, each
    prompt's fastest pass (prompt_prefill_seconds: that pass's prefill part); seconds and new_tokens over all
    prompts; tok_s = new_tokens / seconds. Prompt i is seeded with seed + i in every arm and pass (the same draws as
    generate_all, so every pass decodes the same tokens)."""
    if repeats < 1 or not arms or not prompts:
        raise ValueError("timed_interleaved needs arms, prompts and repeats >= 1.")
    if len({a.key for a in arms}) != len(arms):
        raise ValueError("timed_interleaved: arm keys must be distinct.")
    device = getattr(target, "device", torch.device("cpu"))
    for arm in arms:  # warm-up, untimed
        arm.decode(target, prompts[0], min(8, max_new_tokens), params, eos_token_ids,
                   torch.Generator(device=device).manual_seed(seed), False)
    times = {a.key: [[0.0] * len(prompts) for _ in range(repeats)] for a in arms}
    lengths = {a.key: [[0] * len(prompts) for _ in range(repeats)] for a in arms}
    prefills = {a.key: [[0.0] * len(prompts) for _ in range(repeats)] for a in arms}
    first = {a.key: {"tokens": [], "steps": [], "prompt_steps": [], "target_passes": [], "drafted": [], "accepted": [],
                       "rejected": []} for a in arms}
    for r in range(repeats):
        for i, prompt in enumerate(prompts):
            for arm in rotated(arms, r + i):  # no arm always runs first (or right after a particular other one)
                gen = arm.decode(target, prompt, max_new_tokens, params, eos_token_ids,
                                 torch.Generator(device=device).manual_seed(seed + i), arm.record_entropy and r == 0)
                times[arm.key][r][i] = gen.prefill_s + gen.decode_s
                prefills[arm.key][r][i] = gen.prefill_s
                lengths[arm.key][r][i] = len(gen.tokens)
                if r == 0:
                    first[arm.key]["tokens"].append(gen.tokens)
                    first[arm.key]["steps"] += gen.steps
                    first[arm.key]["prompt_steps"].append(len(gen.steps))
                    first[arm.key]["target_passes"].append(getattr(gen, "target_passes", None))
                    first[arm.key]["drafted"].append(getattr(gen, "drafted", None))  # engines that count them
                    first[arm.key]["accepted"].append(getattr(gen, "accepted", None))
                    first[arm.key]["rejected"].append(getattr(gen, "rejected", None))
            if on_prompt is not None:
                on_prompt(r, i)
    out = {}
    for arm in arms:
        t, n = times[arm.key], lengths[arm.key]
        fastest = [min(range(repeats), key=lambda r: t[r][i]) for i in range(len(prompts))]
        prompt_seconds = [t[r][i] for i, r in enumerate(fastest)]
        new_tokens = sum(map(len, first[arm.key]["tokens"]))
        out[arm.key] = {**first[arm.key], "prompt_seconds": prompt_seconds, "seconds": sum(prompt_seconds),
                        "prompt_prefill_seconds": [prefills[arm.key][r][i] for i, r in enumerate(fastest)],
                        "new_tokens": new_tokens, "tok_s": new_tokens / sum(prompt_seconds),
                        "tok_s_passes": [sum(n[r]) / sum(t[r]) for r in range(repeats)]}
    return out
