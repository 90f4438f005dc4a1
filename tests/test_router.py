"""Several proposers chosen per step (decode/proposers/router.py): lossless, picks what pays, falls back to no draft."""

import time

import pytest
import torch

from conftest import first_two_tokens, make_model
from decode.core.metrics import hardware_speedup
from decode.core.speculative import NoProposer, SamplingParams, generate
from decode.proposers.draft_model import DraftModelProposer
from decode.proposers.ngram import PromptLookupProposer
from decode.proposers.router import Option, RouterProposer, step_rate, with_auto_off
from decode.proposers.tree import TreeProposer

V = 64
PASSES = [1.0, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3]  # a k-token target pass, relative to one token
UNTIMED = {"timing_window": 0}  # prices in units of a target pass, not seconds: no live timing to scale them

@pytest.fixture(scope="module")
def pair():
    return make_model(V, layers=3, hidden=32, seed=1, init=0.3), make_model(V, layers=1, hidden=32, seed=2, init=0.3)


def test_step_rate_is_the_cost_models_speedup():
    for alpha, gamma, c in [(0.5, 2, 0.1), (0.9, 5, 0.3), (0.0, 1, 0.0)]:
        assert step_rate(alpha, gamma, c, PASSES) == pytest.approx(hardware_speedup(alpha, gamma, c, PASSES))


class SlowProposer:
    """A draft made artificially slow: every proposal sleeps."""

    def __init__(self, inner, seconds):
        self.inner, self.seconds = inner, seconds

    def start(self, prompt):
        self.inner.start(prompt)

    def propose(self, tokens, gamma, params, generator):
        time.sleep(self.seconds)
        return self.inner.propose(tokens, gamma, params, generator)

    def rollback(self, keep):
        self.inner.rollback(keep)


def _router(target, draft, **kw):
    options = [Option("lookup", PromptLookupProposer(V), 0.0, [1, 2, 3]),
               Option("draft", DraftModelProposer(draft), 0.05, [1, 2, 3, 4]),
               Option("self", DraftModelProposer(target), 0.3, [1, 2, 3, 4])]
    return RouterProposer(options, PASSES, **UNTIMED, **kw)


def _reference(target, prompt, n):
    return generate(target, NoProposer(), prompt, 0, n).tokens


@pytest.mark.parametrize("prompt", [[5, 9, 14, 3, 22, 5, 9], [40, 41]])
def test_greedy_output_is_the_targets_whatever_the_router_picks(pair, prompt):
    target, draft = pair
    router = _router(target, draft, probe_every=3)
    gen = generate(target, router, prompt, 4, 40)
    assert gen.tokens == _reference(target, prompt, 40)
    sources = {s.source for s in gen.steps}
    assert len(sources - {"none"}) >= 2  # it really switched between proposers


def test_greedy_with_a_tree_option_verifies_trees_and_chains(pair):
    target, draft = pair
    options = [Option("lookup", PromptLookupProposer(V), 0.0, [1, 2]),
               Option("tree", TreeProposer(draft, branching=[2, 2, 1]), 0.05, [3], verified=10)]
    router = RouterProposer(options, PASSES, probe_every=2, **UNTIMED)
    prompt = [5, 9, 14, 3, 22, 5, 9]
    assert generate(target, router, prompt, 3, 30).tokens == _reference(target, prompt, 30)


def test_the_accurate_option_wins_the_steps(pair):
    """The target as its own draft (alpha = 1, c = 0.3) against a poor cheap draft: most steps go to the first."""
    target, draft = pair
    options = [Option("poor", DraftModelProposer(draft), 0.05, [1, 2, 3]),
               Option("exact", DraftModelProposer(target), 0.3, [1, 2, 3, 4])]
    router = RouterProposer(options, PASSES, probe_every=0, **UNTIMED)
    gen = generate(target, router, [5, 9, 14], 4, 60)
    exact = [s for s in gen.steps if s.source == "exact"]
    assert len(exact) >= 0.7 * len(gen.steps) and all(s.accepted == s.drafted for s in exact)
    assert router.alpha("exact") > 0.9 > router.alpha("poor")


def test_auto_off_falls_back_to_no_draft_when_the_draft_is_made_slow(pair):
    """A draft whose proposals take far longer than a target step: after its first steps reveal it, the router
    drafts nothing but its probes, so decoding costs little more than the target alone."""
    target, draft = pair
    t0 = time.perf_counter()
    for _ in range(3):
        target_only = generate(target, NoProposer(), [5, 9, 14], 0, 48)
    step = (time.perf_counter() - t0) / (3 * 48)  # one target step here
    options = [Option("slow", SlowProposer(DraftModelProposer(target), 5 * step), step * 0.1, [1, 2, 3])]
    # target passes priced as measured above (timing_window=0): on a loaded machine the live re-timing of the tiny
    # target's passes can slow them enough that the fixed sleep really does pay, which is not what this law is about
    router = RouterProposer(options, [step * k ** 0.1 for k in range(1, 6)], probe_every=16, timing_window=0)
    gen = generate(target, router, [5, 9, 14], 4, 48)
    assert gen.tokens == target_only.tokens
    drafted = [s for s in gen.steps if s.source == "slow"]
    assert len(drafted) <= 2 + len(gen.steps) // 16, [s.source for s in gen.steps]
    assert router.step_s["slow"] > step  # it learned the real cost


@pytest.mark.integration  # also through real models and KV caches: test_draft_stop.py's integration law test
@pytest.mark.parametrize("temperature,top_p", [(0.8, None)])
def test_sampled_output_follows_the_target_law_through_the_router(temperature, top_p):
    """Joint law of the first two emitted tokens over 3k decodings, the router switching between prompt lookup and a
    draft model: the target's exact law (TV <= 0.05; sampling noise alone ~0.03), far from the draft's own."""
    from test_draft_stop import BigramLM

    vocab, draws = 4, 3_000
    g = torch.Generator().manual_seed(5)
    t_table, d_table = torch.randn(vocab, vocab, generator=g) * 1.5, torch.randn(vocab, vocab, generator=g) * 1.5
    target, draft = BigramLM(t_table), BigramLM(d_table)
    params = SamplingParams(temperature, top_p=top_p)
    p = params.probs(t_table)
    exact = p[2][:, None] * p
    router = RouterProposer([Option("lookup", PromptLookupProposer(vocab), 0.0, [1, 2]),
                             Option("draft", DraftModelProposer(draft), 0.01, [1, 2, 3])], [1.0, 1.0, 1.0, 1.0],
                            probe_every=2, timing_window=0)
    counts, first = first_two_tokens(target, router, [1, 2, 1, 2], 3, params, vocab, draws)
    tv = 0.5 * (counts / draws - exact).abs().sum().item()
    assert tv <= 0.05, tv
    q = params.probs(d_table)
    assert 0.5 * (counts / draws - q[2][:, None] * q).abs().sum().item() > 0.1  # the test tells the laws apart
    assert len(set(first)) >= 2  # drafts of several lengths (and sources) really happened


def test_bad_router_settings_name_the_fix(pair):
    with pytest.raises(ValueError, match="at least one option"):
        RouterProposer([], PASSES)
    with pytest.raises(ValueError, match="memory"):
        RouterProposer([Option("d", DraftModelProposer(pair[1]), 0.1, [1])], PASSES, memory=0)


def test_auto_off_wraps_any_policy_even_a_tree(pair):
    """A tree that cannot pay (its draft passes priced at 2 target steps) is switched off after its first steps:
    output still the target's, almost every step a plain target step. Priced cheap, it keeps drafting."""
    target, draft = pair
    prompt = [5, 9, 14, 3, 22]
    dear = with_auto_off(TreeProposer(draft, branching=[2, 1]), "tree", 2.0, 2, PASSES, verified=4, probe_every=8,
                         **UNTIMED)
    gen = generate(target, dear, prompt, 2, 40)
    assert gen.tokens == _reference(target, prompt, 40)
    assert sum(s.source == "tree" for s in gen.steps) <= 2 + len(gen.steps) // 8
    cheap = with_auto_off(TreeProposer(target, branching=[2, 1]), "tree", 0.01, 2, PASSES, verified=4, **UNTIMED)
    gen = generate(target, cheap, prompt, 2, 40)
    assert gen.tokens == _reference(target, prompt, 40) and all(s.source == "tree" for s in gen.steps[:-1])


class CountingProposer(SlowProposer):
    """Counts starts and the draft length of every proposal."""

    def __init__(self, inner):
        super().__init__(inner, 0.0)
        self.starts, self.lengths = 0, []

    def start(self, prompt):
        self.starts += 1
        super().start(prompt)

    def propose(self, tokens, gamma, params, generator):
        self.lengths.append(gamma)
        return super().propose(tokens, gamma, params, generator)


def test_a_draft_that_never_pays_is_never_started_and_probes_back_off(pair):
    """Priced far above a target step, the draft is not even prefilled on prompts where it does not draft; its probes
    draft one token each and come ever more rarely (16, 32, 64, ... steps apart, up to max_probe_every)."""
    target, draft = pair
    prompt = [5, 9, 14, 3, 22]
    never = CountingProposer(DraftModelProposer(draft))
    router = with_auto_off(never, "dear", 50.0, 3, PASSES, probe_every=0)
    for _ in range(2):
        assert generate(target, router, prompt, 3, 20).tokens == _reference(target, prompt, 20)
    assert never.starts == 0 and never.lengths == []

    probed = CountingProposer(DraftModelProposer(draft))
    router = with_auto_off(probed, "dear", 50.0, 3, PASSES, probe_every=4, max_probe_every=16)
    gen = generate(target, router, prompt, 3, 80)
    assert gen.tokens == _reference(target, prompt, 80)
    assert probed.lengths and set(probed.lengths) == {1}  # every draft was a one-token probe
    drafted = [i for i, s in enumerate(gen.steps) if s.source == "dear"]
    gaps = [b - a for a, b in zip(drafted, drafted[1:])]
    assert gaps[:3] == [9, 17, 17], gaps  # waits of 8 then 16 (capped) steps, plus the probe's own step
    assert probed.starts == 1  # started once, at its first probe


def test_bad_probe_cap_names_the_fix(pair):
    with pytest.raises(ValueError, match="max_probe_every"):
        RouterProposer([Option("d", DraftModelProposer(pair[1]), 0.1, [1])], PASSES, probe_every=16,
                       max_probe_every=8)


class OracleProposer:
    """Proposes the target's own greedy continuation (known in advance) at no cost: alpha = 1, c = 0. With
    `verify_extra_s`, every step it drafted costs that much more after the proposal (in rollback), as a verify pass
    dearer in real decoding than the cost model timed it would."""

    def __init__(self, prompt, reference, verify_extra_s=0.0):
        self.text, self.extra, self.drafted = list(prompt) + list(reference), verify_extra_s, False

    def start(self, prompt):
        pass

    def propose(self, tokens, gamma, params, generator):
        self.drafted = True
        return self.text[len(tokens):len(tokens) + gamma], torch.empty(0)

    def rollback(self, keep):
        if self.drafted and self.extra:
            time.sleep(self.extra)
        self.drafted = False


def test_auto_off_prices_target_passes_at_what_they_really_cost(pair):
    """A perfect free draft pays by the cost model (4 tokens a step at about one pass) and keeps drafting; the same
    draft whose steps really cost several target steps more (the cost model does not see it) is switched off by the
    live timing of its steps, after a few, with the target's output unchanged."""
    target, _ = pair
    prompt = [5, 9, 14]
    t0 = time.perf_counter()
    reference = [generate(target, NoProposer(), prompt, 0, 60) for _ in range(3)][-1].tokens
    step = (time.perf_counter() - t0) / (3 * 60)
    passes = [step * (1 + 0.05 * k) for k in range(6)]

    free = with_auto_off(OracleProposer(prompt, reference), "oracle", 0.0, 3, passes, probe_every=16)
    gen = generate(target, free, prompt, 3, 60)
    assert gen.tokens == reference and all(s.source == "oracle" for s in gen.steps[:-1])

    # far dearer than any load from other test workers makes a plain pass (they slow both; the margin must hold)
    dear = with_auto_off(OracleProposer(prompt, reference, verify_extra_s=24 * step), "oracle", 0.0, 3, passes,
                         probe_every=16)
    gen = generate(target, dear, prompt, 3, 60)
    assert gen.tokens == reference
    drafted = sum(s.source == "oracle" for s in gen.steps)
    assert drafted <= 6 + 2, [s.source for s in gen.steps]  # the window's median turns after 5 dear steps (+ probes)
    assert dear.slowdown(4) > 3 * dear.slowdown(1)
