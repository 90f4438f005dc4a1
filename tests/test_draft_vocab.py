"""decode/drafts/draft_vocab.py: a draft head over part of the vocabulary keeps decoding lossless."""

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch import nn

from conftest import first_token_tv, make_model
from decode.core.sampling import logits_to_probs
from decode.core.speculative import NoProposer, SamplingParams, generate
from decode.drafts.draft_vocab import SubsetHead, kept_ids, restrict_vocab
from decode.drafts.quantize import Int8Linear, quantize_draft
from decode.kernels.fast_linear import fast_cpu_linears
from decode.proposers.draft_model import DraftModelProposer

V = 96


@settings(max_examples=25, deadline=None)
@given(vocab=st.integers(8, 300), size=st.integers(4, 300), specials=st.lists(st.integers(0, 299), max_size=3),
       seed=st.integers(0, 1000))
def test_subset_head_equals_the_full_head_on_kept_ids_and_is_minus_inf_elsewhere(vocab, size, specials, seed):
    size = min(size, vocab)
    specials = [s for s in specials if s < vocab]
    ids = kept_ids(vocab, size, specials)
    assert len(ids) == size and set(specials) <= set(ids.tolist()) and torch.equal(ids, ids.sort().values)
    others = [i for i in ids.tolist() if i not in specials]
    assert others == [i for i in range(vocab) if i not in specials][: len(others)]
    g = torch.Generator().manual_seed(seed)
    full = nn.Linear(16, vocab, bias=seed % 2 == 0)
    head = SubsetHead(full, ids)
    x = torch.randn(3, 5, 16, generator=g)
    with torch.no_grad():
        ref, out = full(x), head(x)
    assert out.shape == ref.shape
    torch.testing.assert_close(out[..., ids], ref[..., ids])
    mask = torch.ones(vocab, dtype=torch.bool)
    mask[ids] = False
    assert torch.all(out[..., mask] == float("-inf"))


def test_restrict_vocab_modes_and_errors(monkeypatch):
    import decode.drafts.draft_vocab

    draft = make_model(V, layers=1)
    assert restrict_vocab(draft, "auto")[1] == {"size": 8192, "restricted": False, "vocab_size": V}  # head < 8192
    monkeypatch.setattr(decode.drafts.draft_vocab, "AUTO_CPU_SIZE", 32)
    assert restrict_vocab(draft, "auto", copy=True)[1] == {"size": 32, "restricted": True, "vocab_size": V,
                                                           "order": "ids"}
    same, plan = restrict_vocab(draft, None)
    assert same is draft and not plan["restricted"]
    assert restrict_vocab(draft, V)[0] is draft  # a head as big as the vocabulary: nothing to cut
    before = draft.lm_head.weight.clone()
    small, plan = restrict_vocab(draft, 32, keep=[2, 90], copy=True)
    assert plan["restricted"] and small is not draft and isinstance(small.lm_head, SubsetHead)
    assert type(draft.lm_head) is nn.Linear and torch.equal(draft.lm_head.weight, before)  # the original is kept
    assert {2, 90} <= set(small.lm_head.ids.tolist()) and len(small.lm_head.ids) == 32
    with pytest.raises(ValueError, match="already restricted"):
        restrict_vocab(small, 16)
    with pytest.raises(ValueError, match="auto, a positive integer or null"):
        restrict_vocab(draft, -3)
    with pytest.raises(ValueError, match="positive integer or null"):
        restrict_vocab(draft, True)
    with pytest.raises(ValueError, match="special tokens"):
        restrict_vocab(draft, 2, keep=[0, 1, 2])


def test_a_smaller_draft_head_keeps_greedy_output_identical():
    """Greedy output equals the target's own for several gamma, with the head alone, with int8 weights and with the
    CPU matmul layouts (compiled: tests/test_compiled.py); a draft whose full-head argmax lies in the kept ids
    proposes the same tokens."""
    target = make_model(V, layers=3, seed=1, init=0.3)
    draft = make_model(V, layers=1, seed=2, init=0.3)
    prompt = [7, 11, 13, 40, 90]
    reference = generate(target, NoProposer(), prompt, 0, 24).tokens
    small, _ = restrict_vocab(draft, 48, keep=[2], copy=True)
    for gamma in (1, 2, 4):
        assert generate(target, DraftModelProposer(small), prompt, gamma, 24).tokens == reference
    int8, plan = quantize_draft(small, "int8", copy=True)
    assert plan["quantized"] and isinstance(int8.lm_head.proj, Int8Linear)  # the cut head is quantized too
    with fast_cpu_linears([target, int8], 3, "auto"):
        assert generate(target, DraftModelProposer(int8), prompt, 2, 24).tokens == reference
    # a head that keeps every token the full head proposed drafts exactly the same tokens, step by step
    full = Recording(draft)
    full_steps = generate(target, full, prompt, 2, 24).steps
    cut = Recording(restrict_vocab(draft, len(full.seen) + 1, keep=full.seen, copy=True)[0])
    cut_steps = generate(target, cut, prompt, 2, 24).steps
    assert cut.seen <= full.seen and len(full.seen) + 1 < V
    assert [(s.drafted, s.accepted) for s in cut_steps] == [(s.drafted, s.accepted) for s in full_steps]


class Recording(DraftModelProposer):
    """Remembers every token it drafted."""

    def __init__(self, draft):
        super().__init__(draft)
        self.seen: set[int] = set()

    def propose(self, tokens, gamma, params, generator):
        drafted, q = super().propose(tokens, gamma, params, generator)
        self.seen.update(drafted)
        return drafted, q


@pytest.mark.parametrize("temperature,top_p", [pytest.param(1.0, None, marks=pytest.mark.integration), (0.7, 0.9)])
def test_sampling_with_a_cut_head_follows_the_target_distribution(temperature, top_p):
    """q is zero outside the kept ids (their logits are -inf): the emitted token's law is still the target's."""
    vocab, draws, gamma = 8, 10_000, 2
    g = torch.Generator().manual_seed(0)
    full = nn.Linear(6, vocab)
    head = SubsetHead(full, kept_ids(vocab, 4))
    with torch.no_grad():
        d_logits = head(torch.randn(gamma, 6, generator=g) * 2)
    q = logits_to_probs(d_logits, temperature, top_p=top_p)
    assert torch.all(q[:, 4:] == 0) and torch.allclose(q.sum(-1), torch.ones(gamma))
    p = logits_to_probs(torch.randn(gamma + 1, vocab, generator=g) * 1.5, temperature, top_p=top_p)
    tv = first_token_tv(q, p, draws)
    assert tv <= 0.025, tv  # sampling noise alone ~0.012
    assert 0.5 * (q[0] - p[0]).abs().sum() > 0.1  # the draft's own law is far from the target's


def test_sampled_decoding_with_a_cut_head_runs_in_vocabulary():
    target = make_model(V, layers=2, seed=1, init=0.3)
    small, _ = restrict_vocab(make_model(V, layers=1, seed=2, init=0.3), 40)
    gen = generate(target, DraftModelProposer(small), [7, 11, 13], 3, 20, SamplingParams(1.0, top_k=20),
                   generator=torch.Generator().manual_seed(0))
    assert len(gen.tokens) == 20 and all(0 <= t < V for t in gen.tokens)


def test_a_frequency_ranking_chooses_the_kept_ids_and_greedy_output_stays_the_targets():
    from data.token_ranking import rank_tokens

    assert rank_tokens([5, 9, 9, 3, 5, 9, 200, -1], 100) == [9, 5, 3]  # by count, ties to the lower id, in range
    assert kept_ids(100, 5, keep=[0], ranking=[90, 50, 90, 7]).tolist() == [0, 1, 7, 50, 90]  # then the lowest ids
    assert kept_ids(100, 3, keep=[0], ranking=[90, 50, 7]).tolist() == [0, 50, 90]  # the ranking's order decides
    target = make_model(V, layers=3, seed=1, init=0.3)
    draft = make_model(V, layers=1, seed=2, init=0.3)
    prompt = [7, 11, 13, 40, 90]
    reference = generate(target, NoProposer(), prompt, 0, 24).tokens
    ranked = rank_tokens(reference, V)  # the target's own tokens, most frequent first
    small, plan = restrict_vocab(draft, 16, keep=[2], copy=True, ranking=ranked)
    assert plan["order"] == "frequency" and set(ranked[:15]) <= set(small.lm_head.ids.tolist())
    for gamma in (1, 3):
        assert generate(target, DraftModelProposer(small), prompt, gamma, 24).tokens == reference


def test_draft_vocab_from_ranks_the_assistants_turns(tmp_path):
    import json

    from eval.eval_models import draft_vocab_ranking

    class Chars:  # a tokenizer: one id per character
        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [ord(c) for c in text]}

    path = tmp_path / "answers.jsonl"
    path.write_text("\n".join(json.dumps({"messages": [{"role": "user", "content": "zzzz"},
                                                       {"role": "assistant", "content": text}]})
                              for text in ("abb", "bcc", "cc")) + "\n")
    ranked = draft_vocab_ranking({"kind": "files", "path": str(path), "format": "chat"}, Chars(), 128)
    assert ranked == [ord("c"), ord("b"), ord("a")]  # the user's turns are not counted
    # a config node naming its path through an interpolation (as conf/experiment/qwen_coder_eagle.yaml does)
    from omegaconf import OmegaConf

    from data.token_ranking import rank_source

    cfg = OmegaConf.create({"data": {"store": str(path)},
                            "model": {"draft": {"train_vocab_from": {"kind": "files", "path": "${data.store}",
                                                                     "format": "chat"}}}})
    assert rank_source(cfg.model.draft.train_vocab_from, Chars(), 128) == ranked
    assert draft_vocab_ranking(None, Chars(), 128) is None
    with pytest.raises(ValueError, match="must be a data source"):
        draft_vocab_ranking(str(path), Chars(), 128)
