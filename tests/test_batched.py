"""Batched speculative decoding (decode/core/batched.py): each sequence's greedy output is batch 1's, ragged
acceptance and early finishers included; target-only decoding at the same batch through the same code; sampling
keeps the target's law."""

import pytest
import torch

from conftest import make_model
from decode.core.batched import BatchLM, generate_batch, left_padded
from decode.core.speculative import NoProposer, SamplingParams, generate
from test_tree_sampling import BigramLM

PROMPTS = [[5, 9, 17], [3, 4, 5, 6, 7, 8, 9], [11], [20, 21, 22, 23, 30]]


@pytest.fixture(scope="module")
def pair():
    """A target and a draft that agrees with it often but not always (the target's weights, perturbed)."""
    target, draft = make_model(64, layers=2, hidden=32, seed=1, init=0.3), make_model(64, layers=2, hidden=32, seed=1,
                                                                                      init=0.3)
    torch.manual_seed(2)
    with torch.no_grad():
        for w in draft.parameters():
            w.add_(0.15 * torch.randn_like(w) * w.std())
    return target, draft


def reference(target, prompt, n, eos=None):
    return generate(target, NoProposer(), prompt, 0, n, eos_token_ids=eos).tokens


@pytest.mark.parametrize("gamma", [0, 1, 3, 5])
def test_greedy_output_per_sequence_is_batch_ones(pair, gamma):
    target, draft = pair
    out = generate_batch(target, draft, PROMPTS, gamma, 24)
    assert out.tokens == [reference(target, p, 24) for p in PROMPTS]
    accepted = [sum(s.accepted for s in steps) for steps in out.steps]
    assert (min(accepted) > 0) == (gamma > 0) and out.passes == max(map(len, out.steps))
    if gamma > 1:  # the sequences accepted different numbers: the rollback was ragged
        assert len({tuple(s.accepted for s in steps[:3]) for steps in out.steps}) > 1
        assert any(0 < s.accepted < s.drafted for steps in out.steps for s in steps)


def test_a_draft_equal_to_the_target_accepts_everything(pair):
    target, _ = pair
    out = generate_batch(target, target, PROMPTS, 4, 21)
    assert out.tokens == [reference(target, p, 21) for p in PROMPTS]
    assert all(s.accepted == s.drafted for steps in out.steps for s in steps) and out.passes == 5


def test_sequences_that_stop_at_eos_leave_the_batch(pair):
    target, draft = pair
    refs = [reference(target, p, 30) for p in PROMPTS]
    eos = {refs[0][4], refs[2][7]}  # two sequences meet an end token early
    out = generate_batch(target, draft, PROMPTS, 3, 30, eos_token_ids=eos)
    assert out.tokens == [reference(target, p, 30, eos) for p in PROMPTS]
    assert len(out.tokens[0]) <= 5 and len(out.tokens[2]) <= 8


def test_holes_are_hidden_and_skipped_by_positions():
    lm = BatchLM(make_model(16, layers=1, seed=3))
    lm.reset(2)
    ids, live = left_padded([[1, 2, 3], [4]], 0)
    assert live.tolist() == [[True] * 3, [False, False, True]]
    lm.feed(ids, live, 1)
    assert lm.count.tolist() == [3, 1]
    lm.feed(torch.tensor([[5, 6], [7, 8]]), torch.ones(2, 2, dtype=torch.bool), 2)
    lm.hide_last(torch.tensor([[True, False], [True, True]]))
    assert lm.count.tolist() == [4, 3] and lm.valid.sum(1).tolist() == [4, 3]
    lm.select(torch.tensor([1]))
    assert lm.count.tolist() == [3] and lm.cache.layers[0].keys.shape[0] == 1


@pytest.mark.parametrize("batches,limit", [(600, 0.05), pytest.param(6_000, 0.015, marks=pytest.mark.integration)])
def test_sampled_law_of_two_tokens_is_the_targets(batches, limit):
    """Bigram target and draft (exact law); batches of 8 copies of one prompt at gamma=3, T=1: the first two tokens'
    joint law is the target's (fast: 4,800 draws, TV <= 0.05; integration: 48,000 draws, TV <= 0.015; sampling noise
    alone ~0.02 and ~0.007), far from the draft's own."""
    vocab, width = 4, 8
    g = torch.Generator().manual_seed(3)
    target = BigramLM(torch.randn(vocab, vocab, generator=g) * 1.5)
    draft = BigramLM(torch.randn(vocab, vocab, generator=g) * 1.5)
    params = SamplingParams(1.0)
    p, q = params.probs(target.table), params.probs(draft.table)
    exact = p[2][:, None] * p
    counts, sampler = torch.zeros(vocab, vocab), torch.Generator().manual_seed(0)
    for _ in range(batches):
        for row in generate_batch(target, draft, [[1, 2]] * width, 3, 2, params, generator=sampler).tokens:
            counts[row[0], row[1]] += 1
    draws = batches * width
    assert 0.5 * (counts / draws - exact).abs().sum() <= limit
    assert 0.5 * (q[2][:, None] * q - exact).abs().sum() > 0.1


def test_bad_arguments():
    with pytest.raises(ValueError, match="non-empty prompts"):
        generate_batch(None, None, [[1], []], 1, 4)


def test_speculate_measures_speedup_against_batch_size(tmp_path, tiny_target_dir, tiny_draft_dir):
    """eval/speculate.py batch_size=[1,2]: a record per batch size, each over target-only at the same batch size,
    with the cost model's expectation, greedy output identical to batch 1's; table, JSON and plot written."""
    import json
    import shutil

    from eval.speculate import evaluate
    from test_eval import eval_cfg

    draft = tmp_path / "draft"
    shutil.copytree(tiny_draft_dir, draft)  # update_card writes into the folder
    cfg = eval_cfg(tmp_path, tiny_target_dir, [draft], "gamma=[2]", "batch_size=[1,2]", "n_prompts=4",
                   "domains=[general]", "repeats=1", "reference_draft=null", "update_card=true")
    records = evaluate(cfg)
    card = (draft / "README.md").read_text()  # the card says where speculation stops paying
    assert "## Batch sizes" in card and "gamma=2" in card and "1: " in card and "2: " in card
    assert [b["batch_size"] for b in json.loads((draft / "draftsmith.json").read_text())["batches"]] == [1, 2]
    assert [r["batch_size"] for r in records] == [1, 2]
    for r in records:
        assert r["speedup_over"] == f"draftsmith target-only at batch {r['batch_size']}" and r["greedy_identical"]
        assert r["groups"] == 4 // r["batch_size"] and r["speedup_ci"][0] <= r["speedup"] <= r["speedup_ci"][1]
        assert r["hardware_expected_speedup"] > 0 and 0 <= r["alpha"] <= 1
    saved = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert set(saved["conditions"]["batch_costs"]) == {f"{draft}@1", f"{draft}@2"}
    assert (tmp_path / "eval" / "speedup_vs_batch.png").stat().st_size > 0
    assert "| 2 |" in (tmp_path / "eval" / "results.md").read_text()


@pytest.mark.parametrize("extra,match", [("proposers=[lookup]", "fixed gammas only"), ("gamma=[auto]", "fixed gammas"),
                                         ("n_prompts=2", "n_prompts >= 4"), ("batch_size=[0]", "integers >= 1")])
def test_bad_batch_settings_fail_before_loading(tmp_path, extra, match):
    from eval.speculate import evaluate
    from test_eval import eval_cfg

    cfg = eval_cfg(tmp_path, "no-such-target", ["no-such-draft"], "batch_size=[1,4]", "gamma=[2]", *extra.split())
    with pytest.raises(ValueError, match=match):
        evaluate(cfg)


def test_the_card_names_the_largest_batch_where_speculation_still_pays():
    from eval.shared.card import _batch_lines

    rows = [{"domain": "medical", "temperature": 0.0, "gamma": 3, "batch_size": b, "speedup": x, "speedup_ci": ci,
             "device": "cpu", "threads": 2} for b, x, ci in ((1, 1.6, [1.5, 1.7]), (2, 1.38, [1.3, 1.45]),
                                                            (4, 1.03, [0.98, 1.08]), (8, 0.84, [0.8, 0.9]))]
    text = "\n".join(_batch_lines(rows))
    assert "pays up to batch 2, stops paying at batch 4" in text and "8: 0.84x [0.80, 0.90]" in text
    gap = [{**r, "speedup_ci": [0.9, 1.1]} if r["batch_size"] == 2 else r for r in rows]  # pays at 1, not at 2
    assert "pays up to batch 1, stops paying at batch 2" in "\n".join(_batch_lines(gap))
    never = [{**r, "speedup_ci": [0.8, 0.99]} for r in rows]
    assert "pays at no batch size measured" in "\n".join(_batch_lines(never)) and _batch_lines([]) == []
