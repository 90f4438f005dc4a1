"""Prompt lookup (decode/proposers/ngram.py): the n-gram search, greedy identity with and without a draft model, and the
sampled law of one-hot proposals through the whole decoder."""

import pytest
import torch
from hypothesis import given, settings, strategies as st

from conftest import first_two_tokens, make_model
from decode.core.metrics import replayed_speedup
from decode.core.speculative import NoProposer, SamplingParams, StepLog, generate
from decode.proposers.draft_model import DraftModelProposer
from decode.proposers.ngram import LookupThenDraftProposer, PromptLookupProposer, ngram_continuation, one_hot_rows
from test_draft_stop import BigramLM

V = 300


def test_longest_and_most_recent_match_wins():
    #        0  1  2  3  4  5  6  7  8  9
    tokens = [5, 6, 7, 9, 5, 6, 8, 1, 5, 6]
    # suffix [5, 6] occurred at 0 and 4: the most recent (4) is followed by 8, 1
    assert ngram_continuation(tokens, 2) == [8, 1]
    # a longer suffix [1, 5, 6] never occurred before: falls back to n=2
    assert ngram_continuation(tokens, 3, min_n=3) == []
    # the continuation may run into the suffix itself
    assert ngram_continuation([3, 4, 3, 4, 3], 4) == [4, 3]
    assert ngram_continuation([1, 2, 3], 4) == [] and ngram_continuation([7], 3) == []
    assert ngram_continuation(tokens, 0) == [] and ngram_continuation(tokens, 2, min_n=3, max_n=2) == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=2, max_size=40), st.integers(1, 5), st.integers(1, 3))
def test_a_proposal_is_what_followed_an_earlier_occurrence_of_a_suffix(tokens, gamma, max_n):
    out = ngram_continuation(tokens, gamma, 1, max_n)
    assert len(out) <= gamma
    if not out:  # no suffix of length 1..max_n occurs earlier
        assert all(tokens[len(tokens) - n:] not in [tokens[i:i + n] for i in range(len(tokens) - n)]
                   for n in range(1, min(max_n, len(tokens) - 1) + 1))
        return
    found = False
    for n in range(1, max_n + 1):
        suffix = tokens[len(tokens) - n:]
        for start in range(len(tokens) - n):
            if tokens[start:start + n] == suffix and tokens[start + n:start + n + len(out)] == out:
                found = True
    assert found


def test_one_hot_rows():
    q = one_hot_rows([3, 1], 5)
    assert q.shape == (2, 5) and q.sum(-1).tolist() == [1.0, 1.0] and q[0, 3] == 1 and q[1, 1] == 1
    assert one_hot_rows([], 5).shape == (0, 5)


@pytest.fixture(scope="module")
def pair():
    return make_model(V, layers=3, hidden=32, seed=1, init=0.3), make_model(V, layers=1, hidden=32, seed=2, init=0.3)


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_greedy_output_is_the_targets_with_lookup_alone_and_with_a_draft(pair, gamma):
    target, draft = pair
    prompt = [7, 11, 13, 40, 7, 11, 13, 40, 7, 11]  # repetitive: lookup finds matches
    reference = generate(target, NoProposer(), prompt, 0, 30).tokens
    lookup = PromptLookupProposer(V)
    out = generate(target, lookup, prompt, gamma, 30)
    assert out.tokens == reference
    assert any(s.drafted for s in out.steps) and all(s.source == "lookup" for s in out.steps)
    both = generate(target, LookupThenDraftProposer(PromptLookupProposer(V), DraftModelProposer(draft)), prompt,
                    gamma, 30)
    assert both.tokens == reference
    assert {s.source for s in both.steps} <= {"lookup", "draft"} and any(s.source == "lookup" for s in both.steps)


def test_lookup_that_proposes_the_targets_own_path_is_accepted_in_full():
    """A bigram target's greedy path depends on the last token only, so an earlier occurrence of the last token is
    followed by exactly what the target will say: every lookup proposal is accepted (alpha = 1)."""
    table = torch.randn(6, 6, generator=torch.Generator().manual_seed(5)) * 3
    target = BigramLM(table)
    reference = generate(target, NoProposer(), [2], 0, 8).tokens
    out = generate(target, PromptLookupProposer(6, max_n=1), [2] + reference + [2], 3, 8)
    drafted = [s for s in out.steps if s.drafted]
    assert drafted and all(s.accepted == s.drafted for s in drafted)
    assert out.tokens == generate(target, NoProposer(), [2] + reference + [2], 0, 8).tokens


def test_lookup_steps_cost_no_draft_step_in_the_cost_model():
    steps = [StepLog(3, 3, 0.0, 0.0, source="lookup"), StepLog(0, 0, 0.0, 0.0, source="lookup")]
    passes = [1.0, 1.2, 1.4, 1.6]
    assert replayed_speedup(steps, 0.5, passes) == pytest.approx((4 + 1) / (1.6 + 1.0))
    model = [StepLog(3, 3, 0.0, 0.0, source="draft")]
    assert replayed_speedup(model, 0.5, passes) == pytest.approx(4 / (1.5 + 1.6))


def test_bad_settings_fail_naming_the_fix():
    with pytest.raises(ValueError, match="min_n <= max_n"):
        PromptLookupProposer(V, min_n=3, max_n=2)
    with pytest.raises(ValueError, match="min_n <= max_n"):
        PromptLookupProposer(V, min_n=0)


@pytest.mark.parametrize("temperature,top_p", [(0.7, 0.9)])
def test_sampled_output_follows_the_target_law_whole_decoder(temperature, top_p):
    """Lookup proposes deterministically (one-hot q); the joint law of the first two emitted tokens over 4k
    decodings must still be the target's (TV <= 0.045; sampling noise alone ~0.025), while the proposal itself is a
    point mass far from it."""
    vocab, draws = 4, 4_000
    g = torch.Generator().manual_seed(3)
    table = torch.randn(vocab, vocab, generator=g) * 1.5
    target = BigramLM(table)
    params = SamplingParams(temperature, top_p=top_p)
    p = params.probs(table)
    exact = p[2][:, None] * p  # the prompt ends in token 2
    counts, first_drafted = first_two_tokens(target, PromptLookupProposer(vocab), [2, 1, 3, 2], 3, params, vocab,
                                             draws, new_tokens=2)  # lookup proposes 1, 3 after the last 2
    tv = 0.5 * (counts / draws - exact).abs().sum().item()
    assert tv <= 0.045, tv
    assert min(first_drafted) >= 1  # lookup drafted at the first step of every decoding
    point = torch.zeros(vocab, vocab)
    point[1, 3] = 1.0
    assert 0.5 * (exact - point).abs().sum().item() > 0.3  # the test tells the proposal from the target's law


def test_heuristic_schedule_moves_gamma_like_transformers():
    from decode.proposers.schedule import next_gamma

    assert next_gamma(1, 1, 1, 8) == 3 and next_gamma(3, 3, 3, 8) == 5 and next_gamma(7, 7, 7, 8) == 8
    assert next_gamma(5, 5, 2, 8) == 4 and next_gamma(1, 1, 0, 8) == 1 and next_gamma(4, 0, 0, 8) == 4


@pytest.mark.parametrize("gamma", [2, 6])
def test_heuristic_schedule_keeps_greedy_output_and_varies_the_draft_length(pair, gamma):
    from decode.proposers.schedule import HeuristicGammaProposer

    target, _ = pair
    prompt = [7, 11, 13, 40, 90]
    reference = generate(target, NoProposer(), prompt, 0, 30).tokens
    out = generate(target, HeuristicGammaProposer(DraftModelProposer(target)), prompt, gamma, 30)  # always accepted
    assert out.tokens == reference
    lengths = [s.drafted for s in out.steps]
    assert lengths[:2] == [1, min(3, gamma)] and max(lengths) == gamma  # +2 after each fully accepted draft
    with pytest.raises(ValueError, match="gamma >= 1"):
        HeuristicGammaProposer(DraftModelProposer(target), start=0)
