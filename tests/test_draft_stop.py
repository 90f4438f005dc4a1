"""Drafting that stops early when the draft is unsure (`confidence_threshold`): still lossless, greedy and sampled.

The sampled law is checked on the whole decoder (proposer, verifier, caches, accept/reject) with bigram "models"
whose next-token law depends on the last token only, so the target's law of two tokens is known exactly."""


import pytest
import torch

from conftest import first_two_tokens, make_model
from decode.core.metrics import acceptance
from decode.core.speculative import NoProposer, SamplingParams, draft_confidence, generate
from decode.proposers.draft_model import DraftModelProposer
from test_tree_sampling import BigramLM  # next-token law = table[last token]: known exactly

V = 300


@pytest.fixture(scope="module")
def pair():
    return make_model(V, layers=3, hidden=32, seed=1, init=0.3), make_model(V, layers=1, hidden=32, seed=2, init=0.3)


@pytest.mark.parametrize("gamma,threshold", [(2, 0.05), (4, 0.2), (6, 0.5)])
def test_greedy_output_is_the_targets_and_drafts_stop_early(pair, gamma, threshold):
    target, draft = pair
    reference = generate(target, NoProposer(), [5, 9, 17], 0, 30).tokens
    gen = generate(target, DraftModelProposer(draft, threshold), [5, 9, 17], gamma, 30)
    assert gen.tokens == reference
    drafted = [s.drafted for s in gen.steps]
    assert all(1 <= d <= gamma for d in drafted[:-1])  # the last step may be cut by max_new_tokens
    assert min(drafted) < gamma  # the threshold did stop some drafts


def test_a_sure_draft_drafts_gamma_and_an_unsure_one_drafts_one(pair):
    target, draft = pair
    prompt = [5, 9, 17, 33]
    same = generate(target, DraftModelProposer(target, 1e-9), prompt, 3, 24)
    assert acceptance(same.steps)["tau"] == 4 and all(s.drafted == 3 for s in same.steps)
    unsure = generate(target, DraftModelProposer(draft, 0.999), prompt, 4, 24)  # a random draft is never that sure
    assert {s.drafted for s in unsure.steps} == {0, 1}  # 0: the last step, with no room left to draft
    assert unsure.tokens == generate(target, NoProposer(), prompt, 0, 24).tokens


def test_draft_confidence_is_the_softmax_probability():
    logits = torch.tensor([2.0, 0.0, float("-inf"), 1.0])
    assert draft_confidence(logits, 0) == pytest.approx(torch.softmax(logits, -1)[0].item())


@pytest.mark.parametrize("threshold", [-0.1, 1.0, 2.0])
def test_bad_threshold(pair, threshold):
    with pytest.raises(ValueError, match="confidence_threshold"):
        DraftModelProposer(pair[1], threshold)


@pytest.mark.integration  # the fast suite keeps the per-token laws (test_decode.py, test_ngram.py)
@pytest.mark.parametrize("temperature,top_p,threshold", [(1.0, None, 0.3), (0.7, 0.9, 0.5)])
def test_sampled_output_follows_the_target_law_whole_decoder(temperature, top_p, threshold):
    """Joint law of the first two emitted tokens over 4k decodings at gamma=3: TV to the target's exact law <= 0.045
    (sampling noise alone: ~0.025), and drafts of several lengths really happened. (Through real models and their
    KV caches: the integration test below.)"""
    vocab, draws = 4, 4_000
    g = torch.Generator().manual_seed(3)
    t_table, d_table = torch.randn(vocab, vocab, generator=g) * 1.5, torch.randn(vocab, vocab, generator=g) * 1.5
    target, draft = BigramLM(t_table), BigramLM(d_table)
    params = SamplingParams(temperature, top_p=top_p)
    p, q = params.probs(t_table), params.probs(d_table)  # p[a, b] = P(next = b | last = a)
    exact = p[2][:, None] * p  # the prompt ends in token 2: P(x1, x2) = p(x1 | 2) p(x2 | x1)
    counts, first_drafted = first_two_tokens(target, DraftModelProposer(draft, threshold), [1, 2], 3, params, vocab,
                                             draws)
    tv = 0.5 * (counts / draws - exact).abs().sum().item()
    assert tv <= 0.045, tv
    assert set(first_drafted) == {1, 2, 3}  # the first step stopped after 1 and 2 drafted tokens, and drafted all 3
    wrong = 0.5 * (counts / draws - q[2][:, None] * q).abs().sum().item()
    assert wrong > 0.1, wrong  # the test tells the draft's law from the target's


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["draft_stopped_when_unsure", "prompt_lookup", "predicted_gamma", "router"])
def test_sampled_law_through_real_models_and_their_kv_caches(kind):
    """The same law as above, with real tiny Llama models and their KV caches (rollback included), so a cache bug
    would show: target and draft of vocabulary 6; the target's exact law of the first two tokens computed by forward
    passes; 6k decodings at gamma=3; TV <= 0.04 where the draft's own law is far away."""
    from decode.proposers.ngram import PromptLookupProposer

    vocab, draws = 6, 6_000
    target = make_model(vocab, layers=2, hidden=32, seed=11, init=1.0)
    draft = make_model(vocab, layers=1, hidden=32, seed=12, init=1.0)
    prompt = [2, 1, 3, 2]  # lookup proposes 1, 3 after the last 2
    params = SamplingParams(1.0)
    with torch.no_grad():
        first = params.probs(target(torch.tensor([prompt])).logits[0, -1])
        second = torch.stack([params.probs(target(torch.tensor([prompt + [x]])).logits[0, -1]) for x in range(vocab)])
    exact = first[:, None] * second
    if kind == "prompt_lookup":
        proposer, own = PromptLookupProposer(vocab), torch.zeros(vocab, vocab)
        own[1, 3] = 1.0  # lookup's proposal: a point mass
    else:
        from decode.proposers.predict_gamma import Calibration, SurvivalStop
        from decode.proposers.router import Option, RouterProposer

        proposer = {"draft_stopped_when_unsure": lambda: DraftModelProposer(draft, 0.4),
                    "predicted_gamma": lambda: DraftModelProposer(draft, stop_rule=SurvivalStop(
                        Calibration([0.0, 0.5], [0.2, 0.8], 0.5), 0.3, [1.0] * 8)),
                    "router": lambda: RouterProposer([Option("lookup", PromptLookupProposer(vocab), 0.0, [1, 2]),
                                                      Option("draft", DraftModelProposer(draft), 0.01, [1, 2, 3])],
                                                     [1.0] * 5, probe_every=2, timing_window=0)}[kind]()
        with torch.no_grad():
            q1 = params.probs(draft(torch.tensor([prompt])).logits[0, -1])
            q2 = torch.stack([params.probs(draft(torch.tensor([prompt + [x]])).logits[0, -1]) for x in range(vocab)])
        own = q1[:, None] * q2
    counts, first_drafted = first_two_tokens(target, proposer, prompt, 3, params, vocab, draws, new_tokens=2)
    tv = 0.5 * (counts / draws - exact).abs().sum().item()
    assert tv <= 0.04, tv
    assert min(first_drafted) >= 1  # every decoding's first step drafted
    assert 0.5 * (own - exact).abs().sum().item() > 0.1  # the proposer's own law is far from the target's
