"""Several proposers, one chosen each step by the cost model, or none at all (auto-off).

Each option is a proposer (prompt lookup, a cheap draft, a larger one, a token tree...) with the time of one of its
draft passes. Before every step the router estimates, for each option and each draft length it may use, the tokens
per second that step would yield: E[tokens | alpha, gamma] * (one target step) / (gamma draft passes + a
(gamma+1)-token target pass), alpha being that option's recent acceptance. It runs the best option at its best
gamma (so gamma is predicted per step from recent acceptance), or drafts nothing when no option is expected to beat
a plain target step: a draft that does not pay costs little more than its occasional probes. An option that finds
nothing to propose (lookup without a match) hands the step to the next best.

- Recent acceptance: accepted and judged tokens per option, discounted by `memory` at each step that option drafts,
  plus a prior of `prior_weight` judged tokens at `prior_alpha` (optimistic, so each option gets tried).
- Draft pass times: the given ones, then updated from the router's own timing of each proposal, so a draft that
  turns out slower than measured (a loaded machine, a larger context) loses its steps.
- Probes: an option not run for `probe_every` steps drafts one token, so acceptance that changes with the context
  (code copied from the prompt, boilerplate) is noticed again. A probe after which the option still does not pay
  doubles that option's wait before the next one (up to `max_probe_every`); drafting because it pays resets it.
- Lazy start: an option's `start` (a draft model's prefill of the prompt) runs the first time the option drafts in
  that prompt, so a switched-off draft costs nothing per prompt; its cache catches up on the tokens it missed then.
- Target passes, timed live: the wall time from one proposal to the next, less the proposal itself, is what the
  step's target pass really cost (with the loop's own work: accept, rollback). Its ratio to the cost model's price
  for that pass, the median over the last `timing_window` steps (a stalled step does not move a median), is tracked
  for plain one-token passes and for multi-token verify passes, and scales the prices (`timing_window=0`: the cost
  model's prices as they are): when verifying costs more in real decoding than the cost model timed (a longer
  context, a busy machine), drafts that no longer pay are switched off by what their steps really cost.

Lossless: the choice uses only earlier steps, before the target sees this step's drafts; each option's proposal
carries its own distribution q (greedy output stays the target's; sampling stays exactly the target's law, as for
each option alone). Tree options only verify greedily (decode/proposers/tree.py). `with_auto_off` gives a single proposer
(any policy) the same auto-off.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from dataclasses import dataclass

import torch

from decode.core.metrics import expected_tokens_per_step, pass_seconds
from decode.core.trees import TreeDraft
from decode.proposers.draft_model import DraftModelProposer
from decode.proposers.ngram import build_lookup
from decode.proposers.tree import TreeVerifier


@dataclass
class Option:
    name: str  # recorded as the step's source ("lookup" marks drafting that costs no model pass)
    proposer: object
    step_s: float  # one draft pass, seconds (0 for prompt lookup)
    gammas: list[int]  # draft lengths the router may give it (a tree: its depth)
    verified: int | None = None  # a tree: tokens its target pass scores beyond the pending one (None: gamma)


def step_rate(alpha: float, gamma: int, step_s: float, target_pass_s: list[float], verified: int | None = None) -> float:
    """Expected tokens per second of one step relative to target-only decoding (1.0 = a plain target step). Pure."""
    cost = gamma * step_s + pass_seconds(target_pass_s, (gamma if verified is None else verified) + 1)
    return expected_tokens_per_step(alpha, gamma) * target_pass_s[0] / cost


class RouterProposer:
    """Chooses one of `options` (or no draft) each step; see the module docstring. `target_pass_s[k-1]` is the time
    of a k-token target pass (decode/core/costs.py)."""

    def __init__(self, options: list[Option], target_pass_s: list[float], memory: float = 0.9,
                 prior_alpha: float = 0.6, prior_weight: float = 2.0, probe_every: int = 16, min_gain: float = 1.0,
                 max_probe_every: int | None = None, timing_window: int = 9):
        if not options:
            raise ValueError("the router needs at least one option (a draft model or prompt lookup).")
        if not 0 < memory <= 1 or not 0 < prior_alpha < 1 or prior_weight <= 0 or probe_every < 0:
            raise ValueError(f"router needs 0 < memory <= 1, 0 < prior_alpha < 1, prior_weight > 0 and probe_every "
                             f">= 0 (0 = never probe); got memory={memory}, prior_alpha={prior_alpha}, "
                             f"prior_weight={prior_weight}, probe_every={probe_every}.")
        max_probe_every = 8 * probe_every if max_probe_every is None else max_probe_every
        if max_probe_every < probe_every:
            raise ValueError(f"router needs max_probe_every >= probe_every, got {max_probe_every} < {probe_every}.")
        if timing_window < 0:
            raise ValueError(f"router needs timing_window >= 0 (steps whose timing is kept; 0 = price target passes "
                             f"by the cost model alone), got {timing_window}.")
        if any(not o.gammas or min(o.gammas) < 1 for o in options):
            raise ValueError("every router option needs draft lengths >= 1.")
        self.options, self.passes = options, list(target_pass_s)
        self.memory, self.prior, self.probe_every, self.min_gain = memory, (prior_alpha, prior_weight), probe_every, \
            min_gain
        self.step_s = {o.name: float(o.step_s) for o in options}
        if any(isinstance(getattr(o.proposer, "make_verifier", None), type) for o in options):
            self.make_verifier = TreeVerifier  # it scores chains as well as trees
        feature = [o.proposer for o in options if callable(getattr(o.proposer, "make_verifier", None))
                   and not isinstance(o.proposer.make_verifier, type)]
        if feature:  # a feature draft (decode/proposers/feature_decoding.py) reads its own verifier's hidden states
            if len(feature) > 1 or len(feature) < len([o for o in options if hasattr(o.proposer, "make_verifier")]):
                raise ValueError("A feature draft (Medusa, EAGLE-style) can be routed only with proposers that use a "
                                 "plain chain verifier (prompt lookup, standalone drafts), and one at a time.")
            self.make_verifier = feature[0].make_verifier
        self.last_source = ""
        self.counts = {o.name: [0.0, 0.0] for o in options}  # discounted accepted, judged
        self.idle = {o.name: 0 for o in options}
        self.wait = {o.name: probe_every for o in options}  # steps before the next probe (doubles while it does not pay)
        self.max_wait = max_probe_every
        self.started: set[str] = set()  # options started on this prompt (lazy start)
        # measured / priced seconds of recent one-token target passes, and of multi-token (verify) passes
        self.timings = (deque(maxlen=timing_window), deque(maxlen=timing_window))
        self._last_step: tuple[int, float] | None = None  # the previous step: (tokens its target pass fed, draft s)
        self._clock: float | None = None  # when the previous step's proposal began (this prompt)
        self._prompt: list[int] = []
        self._pending, self._before = None, 0

    def alpha(self, name: str) -> float:
        accepted, judged = self.counts[name]
        a0, w = self.prior
        return (accepted + a0 * w) / (judged + w)

    def rate(self, option: Option, gamma: int) -> float:
        """Expected tokens per second of a step of `option` at `gamma`, relative to a plain target step: the cost
        model at the option's recent acceptance, target passes priced at their live-measured slowdowns."""
        fed = (gamma if option.verified is None else option.verified) + 1
        cost = gamma * self.step_s[option.name] + pass_seconds(self.passes, fed) * self.slowdown(fed)
        return expected_tokens_per_step(self.alpha(option.name), gamma) * self.passes[0] * self.slowdown(1) / cost

    def slowdown(self, fed: int) -> float:
        """Measured over priced seconds of recent target passes over `fed` tokens (one, or several: a verify pass);
        1 before any was timed."""
        recent = self.timings[int(fed > 1)]
        return statistics.median(recent) if recent else 1.0

    def plan(self, gamma: int) -> list[tuple[float, Option, int]]:
        """(expected rate, option, gamma) from best to worst, down to the first that does not beat target-only."""
        ranked = [(self.rate(o, g), o, g) for o in self.options for g in o.gammas if g <= gamma]
        ranked.sort(key=lambda r: -r[0])
        return [r for r in ranked if r[0] > self.min_gain]

    def pays(self, option: Option) -> bool:
        """Whether `option`, at its recent acceptance and best draft length, is expected to beat a plain step."""
        return any(self.rate(option, g) > self.min_gain for g in option.gammas)

    def _time_last_step(self, now: float) -> None:
        """Fold the previous step's target pass (its wall time less its proposal's) into that pass kind's slowdown."""
        if self._clock is not None and self._last_step is not None:
            fed, draft_s = self._last_step
            self.timings[int(fed > 1)].append((now - self._clock - draft_s) / pass_seconds(self.passes, fed))
        self._clock, self._last_step = now, None

    def start(self, prompt):
        self._prompt, self.started = list(prompt), set()  # each option starts when it first drafts (lazy)
        self._clock, self._last_step = None, None  # the prefill between prompts is not a step
        self._pending = None  # acceptance and timings carry over from prompt to prompt: same pair, same machine

    def propose(self, tokens, gamma, params, generator):
        self._pending, self.last_source, self._before = None, "none", len(tokens)
        self._time_last_step(time.perf_counter())
        if gamma < 1:
            return [], torch.empty(0)
        plan = self.plan(gamma)
        probe = next((o for o in self.options if self.probe_every and self.idle[o.name] >= self.wait[o.name]), None)
        if probe is not None and all(o is not probe for _, o, _ in plan[:1]):
            plan = [(None, probe, 1)] + plan  # one drafted token to refresh what it is worth
        for o in self.options:
            self.idle[o.name] += 1
        for rate, option, g in plan:
            if option.name not in self.started:
                option.proposer.start(self._prompt)
                self.started.add(option.name)
            t0 = time.perf_counter()
            drafted, q = option.proposer.propose(tokens, g, params, generator)
            elapsed = time.perf_counter() - t0
            size = drafted.depth if isinstance(drafted, TreeDraft) else len(drafted)
            if size:
                fed = (drafted.size if isinstance(drafted, TreeDraft) else size) + 1
                self._last_step = (fed, time.perf_counter() - self._clock)  # this step's proposals, starts included
                if option.step_s > 0:  # a model's draft passes: keep its pass time current
                    self.step_s[option.name] = 0.7 * self.step_s[option.name] + 0.3 * elapsed / size
                self.idle[option.name] = 0
                self._pending = (option, size, drafted, rate is None)
                self.last_source = getattr(option.proposer, "last_source", "") or option.name
                return drafted, q
        self._last_step = (1, time.perf_counter() - self._clock)
        return [], torch.empty(0)

    def rollback(self, keep):
        if self._pending is not None:
            option, size, drafted, probed = self._pending
            accepted = len(drafted.path) if isinstance(drafted, TreeDraft) else None
            if accepted is None:  # a chain: the tokens kept beyond those before this step
                accepted = keep - self._before
            counts = self.counts[option.name]
            counts[0] = self.memory * counts[0] + accepted
            counts[1] = self.memory * counts[1] + accepted + (accepted < size)
            if not probed or self.pays(option):  # drafting because it pays: probe as usual once it stops paying
                self.wait[option.name] = self.probe_every
            else:  # a probe that found it still not paying: wait twice as long before the next one
                self.wait[option.name] = min(2 * self.wait[option.name], self.max_wait)
        for o in self.options:
            if o.name in self.started:
                o.proposer.rollback(keep)
        self._pending = None


def with_auto_off(proposer, name: str, step_s: float, gamma: int, target_pass_s: list[float],
                  verified: int | None = None, **router_settings) -> RouterProposer:
    """`proposer` at its own gamma, drafting only while the cost model expects its recent acceptance to pay, a plain
    target step otherwise (with probes): any policy gets the router's auto-off."""
    return RouterProposer([Option(name, proposer, step_s, [gamma], verified)], target_pass_s, **router_settings)


def router_step_s(drafts: dict, costs: dict) -> dict:
    """Each router option's draft pass time, by the source name its steps record."""
    return {"lookup": 0.0, **{name: costs[name]["draft_step_s"] for name in drafts}}


def build(request) -> RouterProposer:
    """proposers=[router] (decode/proposers/registry.py): prompt lookup (with settings.router.lookup) and every
    draft of request.drafts, priced by their measured request.costs, at lengths 1..settings.router.max_gamma."""
    r, drafts = request.settings["router"], request.drafts
    gammas, step_s = list(range(1, int(r["max_gamma"]) + 1)), router_step_s(drafts, request.costs)
    options = [Option("lookup", build_lookup(request), 0.0, gammas)] if r["lookup"] else []
    options += [Option(name, DraftModelProposer(d), step_s[name], gammas) for name, d in drafts.items()]
    return RouterProposer(options, request.costs[next(iter(drafts))]["target_pass_s"], float(r["memory"]),
                          probe_every=int(r["probe_every"]), max_probe_every=int(r["max_probe_every"]),
                          timing_window=int(r["timing_window"]))
