"""Lossless sampling over token trees (decode/core/trees.py: `judge_siblings`, `sampled_tree_accept`, `judge_tree`).

Three levels: the rule's exact law at one node (computed from its acceptance probabilities, for candidates chosen
deterministically and for candidates drawn i.i.d. from the draft); Monte Carlo of the code itself; and the whole
decoder (proposer, tree verifier, caches) with every tree proposer, where the target's exact law of the first two
tokens is known (integration: TV <= 0.01 over 40k decodings)."""

from itertools import product
from types import SimpleNamespace

import pytest
import torch
from transformers import LlamaConfig

from conftest import first_two_tokens, make_model
from decode.core.sampling import sample
from decode.core.speculative import NoProposer, SamplingParams, generate
from decode.core.trees import TreeDraft, judge_siblings, judge_tree, residual, sampled_tree_accept, static_tree


def laws(vocab: int, seed: int, rows: int = 1, scale: float = 1.5) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(rows, vocab, generator=g, dtype=torch.float64) * scale, -1)


def point(vocab: int, x: int) -> torch.Tensor:
    q = torch.zeros(vocab, dtype=torch.float64)
    q[x] = 1.0
    return q


def rule_law(r: torch.Tensor, tokens: list[int], qs: list[torch.Tensor]) -> torch.Tensor:
    """The law of what one node emits under multi-round rejection, given its candidates: candidate i is reached with
    the probability that every earlier one was rejected, accepted with min(1, r_i(x)/q_i(x)) where r_i is the
    residual after the earlier rejections; with none accepted, the last residual."""
    out, reach = torch.zeros_like(r), 1.0
    for x, q in zip(tokens, qs):
        a = min(1.0, float(r[x] / q[x])) if q[x] > 0 else 0.0
        out[x] += reach * a
        reach *= 1 - a
        r = residual(r, q)
    return out + reach * r


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("k", [1, 2, 3])
def test_the_rule_is_exact_for_candidates_drawn_iid_from_the_draft(seed, k):
    vocab = 5
    r, q = laws(vocab, seed)[0], laws(vocab, 100 + seed)[0]
    law = torch.zeros(vocab, dtype=torch.float64)
    for xs in product(range(vocab), repeat=k):  # every candidate tuple, weighted by its draft probability
        law += torch.prod(q[list(xs)]) * rule_law(r, list(xs), [q] * k)
    assert torch.allclose(law, r, atol=1e-12)


@pytest.mark.parametrize("tokens", [[0], [3, 1], [1, 3, 4], [2, 2], [4, 0, 1, 2, 3]])
def test_the_rule_is_exact_for_candidates_chosen_deterministically(tokens):
    vocab = 5
    r = laws(vocab, 7)[0]
    r[0] = 0.0  # a candidate the target never writes
    r /= r.sum()
    assert torch.allclose(rule_law(r, tokens, [point(vocab, x) for x in tokens]), r, atol=1e-12)


@pytest.mark.integration  # a long Monte Carlo run; the law itself is checked exactly above
def test_judge_siblings_samples_that_law():
    """The code, not only the maths: 40k calls of `judge_siblings`, each with its candidates (two drawn from the
    draft's q, then the draft's argmax as a point mass); the emitted token's law is r (TV <= 0.01)."""
    vocab, draws = 5, 40_000
    r, q = laws(vocab, 1)[0], laws(vocab, 2)[0]
    g = torch.Generator().manual_seed(0)
    xs = sample(q.expand(draws, 2, vocab), g).tolist()
    us = torch.rand(draws, 3, generator=g, dtype=torch.float64)
    counts = torch.zeros(vocab, dtype=torch.float64)
    argmax = int(q.argmax())
    for (x1, x2), u in zip(xs, us):
        tokens = [x1, x2, argmax]
        pick, left = judge_siblings(r, tokens, [q, q, None], u)
        counts[tokens[pick] if pick is not None else int(sample(left, g))] += 1
    assert 0.5 * (counts / draws - r).abs().sum() <= 0.01


@pytest.mark.integration  # a long Monte Carlo run
def test_a_tree_step_emits_the_targets_law_of_two_tokens():
    """`sampled_tree_accept` over a fixed depth-2 tree whose nodes hold a bigram target's laws: the first two tokens it
    emits (the accepted path, the next token, and one more draw from the target where the step stopped after one)
    follow p(x1) p(x2 | x1) (TV <= 0.01 over 40k steps)."""
    vocab, draws = 4, 40_000
    table = laws(vocab, 3, rows=vocab)  # table[a] = p(next | last = a)
    parents = static_tree([2, 1])  # root -> children 1, 2; each with one child (3, 4)
    tokens = [0, 2, 1, 3, 0]
    probs = torch.stack([table[t] for t in tokens])  # a bigram target's law after each node is table[its token]
    g = torch.Generator().manual_seed(1)
    counts = torch.zeros(vocab, vocab, dtype=torch.float64)
    for _ in range(draws):
        path, nxt = sampled_tree_accept(tokens, parents, probs, g)
        emitted = [tokens[i] for i in path] + [nxt]
        if len(emitted) == 1:
            emitted.append(int(sample(table[nxt], g)))
        counts[emitted[0], emitted[1]] += 1
    exact = table[0][:, None] * table
    assert 0.5 * (counts / draws - exact).abs().sum() <= 0.01


def test_judge_tree_records_the_path_and_is_greedy_at_temperature_0():
    tree = TreeDraft([0, 2, 1, 3, 0], static_tree([2, 1]))
    logits = torch.full((5, 4), -5.0)
    logits[0, 1], logits[2, 0], logits[4, 2] = 5.0, 5.0, 5.0  # argmax: root -> 1 (node 2) -> 0 (node 4) -> 2
    assert judge_tree(tree, logits, SamplingParams(0.0)) == ([1, 0], 2) and tree.path == [2, 4]
    tokens, nxt = judge_tree(tree, logits, SamplingParams(1.0), torch.Generator().manual_seed(0))
    assert tokens == [tree.tokens[i] for i in tree.path] and 0 <= nxt < 4


class BigramLM(torch.nn.Module):
    """Logits of the next token = table[token]: a causal LM whose law after any node of a tree is known exactly (it
    takes a tree pass's mask and positions and ignores them)."""

    def __init__(self, table: torch.Tensor):
        super().__init__()
        self.table = torch.nn.Parameter(table.float(), requires_grad=False)
        self.config = LlamaConfig(vocab_size=table.shape[0], hidden_size=8, num_hidden_layers=1,
                                  num_attention_heads=1, num_key_value_heads=1, intermediate_size=8)

    @property
    def device(self):
        return self.table.device

    def forward(self, input_ids, attention_mask=None, position_ids=None, cache=None, use_cache=True,
                logits_to_keep=0):
        return SimpleNamespace(logits=self.table[input_ids][:, -logits_to_keep:])


def bigram_pair(vocab: int):
    g = torch.Generator().manual_seed(5)
    return BigramLM(torch.randn(vocab, vocab, generator=g) * 1.5), BigramLM(torch.randn(vocab, vocab, generator=g) * 1.5)


TREE_SHAPES = {"static": {"branching": [2, 2]}, "dynamic": {"depth": 2, "width": 3, "top_k": 2}}


def tree_proposer(kind: str, target, vocab: int):
    """A tree proposer of each kind, its draft built for `target`: a draft LM (static, dynamic), Medusa heads and an
    EAGLE-style layer (feature drafts read the target's hidden states)."""
    from decode.proposers.tree import TreeProposer

    if kind in TREE_SHAPES:
        return TreeProposer(bigram_pair(vocab)[1] if isinstance(target, BigramLM) else
                            make_model(vocab, layers=1, hidden=32, seed=12, init=1.0), **TREE_SHAPES[kind])
    from decode.drafts.feature_drafts import EagleDraft, MedusaHeads
    from decode.proposers.eagle_tree import EagleTreeProposer
    from decode.proposers.feature_decoding import MedusaTreeProposer
    from test_feature_drafts import trained_like

    if kind == "medusa":
        return MedusaTreeProposer(trained_like(MedusaHeads.from_target(target, 2)), depth=2, width=3, top_k=2)
    return EagleTreeProposer(trained_like(EagleDraft.from_target(target)), branching=[2, 2])


@pytest.mark.parametrize("kind", ["static", "dynamic", "medusa", "eagle"])
def test_every_tree_proposer_samples_and_decodes_greedily_as_before(kind):
    vocab = 16
    target = make_model(vocab, layers=2, hidden=32, seed=11, init=1.0)
    proposer = tree_proposer(kind, target, vocab)
    prompt = [2, 1, 3, 2]
    assert generate(target, proposer, prompt, 2, 12).tokens == generate(target, NoProposer(), prompt, 0, 12).tokens
    out = generate(target, proposer, prompt, 2, 12, SamplingParams(1.0), generator=torch.Generator().manual_seed(0))
    assert len(out.tokens) == 12 and sum(s.accepted for s in out.steps) > 0


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["static", "dynamic", "medusa", "eagle"])
def test_the_sampled_law_of_every_tree_proposer_is_the_targets(kind):
    """40k decodings of two tokens at T=1 through the whole decoder (tree proposer, verifier, KV caches and their
    compaction): the joint law of the two tokens is the target's (TV <= 0.01; sampling noise alone ~0.005), and the
    trees did accept drafted tokens. Static and dynamic trees: bigram target and draft, whose law is exact; feature
    trees: a tiny Llama target (its law by forward passes) and a draft on its hidden states."""
    vocab, draws, prompt, params = 3, 40_000, [2, 1, 0, 2], SamplingParams(1.0)
    if kind in TREE_SHAPES:
        target = bigram_pair(vocab)[0]
        p = params.probs(target.table)
        exact = p[prompt[-1]][:, None] * p
    else:
        target = make_model(vocab, layers=2, hidden=32, seed=11, init=1.0)
        with torch.no_grad():
            first = params.probs(target(torch.tensor([prompt])).logits[0, -1])
            second = torch.stack([params.probs(target(torch.tensor([prompt + [x]])).logits[0, -1])
                                  for x in range(vocab)])
        exact = first[:, None] * second
    proposer = tree_proposer(kind, target, vocab)
    counts, first_drafted = first_two_tokens(target, proposer, prompt, 2, params, vocab, draws, new_tokens=2)
    tv = 0.5 * (counts / draws - exact).abs().sum().item()
    assert tv <= 0.01, tv
    assert min(first_drafted) >= 1
