"""Feature drafts (Medusa heads, EAGLE-style layer): training offsets, the training-time test's attention, decoding
through the main loop (greedy identity, feature reuse), export round trip, and a tiny end-to-end training run."""

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import DynamicCache

from conftest import make_model
from decode.proposers.feature_decoding import EagleProposer, FeatureRows, MedusaProposer, MedusaTreeProposer, draft_proposer
from decode.drafts.feature_drafts import EagleDraft, MedusaHeads, additive, final_hidden, unroll_allowed
from decode.drafts.feature_export import load_feature_draft, write_feature_weights
from decode.drafts.kinds import feature_kind_of
from decode.core.speculative import SamplingParams, generate
from train.feature_loss import eagle_pairs, eagle_unroll, medusa_pairs

VOCAB = 64


@pytest.fixture(scope="module")
def target():
    return make_model(VOCAB, layers=2, hidden=32, init=0.2)


def trained_like(draft, seed: int = 0):
    """Random non-zero weights everywhere (fresh Medusa blocks are zero: an identity would hide offsets)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return draft.eval()


def test_medusa_head_k_is_scored_against_the_targets_logits_k_positions_later(target):
    heads = trained_like(MedusaHeads.from_target(target, num_heads=3))
    features = torch.randn(2, 10, 32)
    labels = torch.arange(20).reshape(2, 10)
    labels[1, 7] = -100
    pairs = medusa_pairs(heads, features, labels)
    assert len(pairs) == 3
    for k, (student, teacher, mask, nxt) in enumerate(pairs, start=1):
        assert student.shape == teacher.shape == (2, 10 - k, 32)
        assert torch.equal(student, heads.blocks[k - 1](features[:, : 10 - k]))  # head k reads position t ...
        assert torch.equal(teacher, features[:, k:])  # ... and is judged by the target's logits at t+k (-> token t+k+1)
        assert nxt[0, : 9 - k].tolist() == list(range(k + 1, 10))  # the data's token t+k+1 (cross-entropy mixing)
        # position t counts when token t+k+1 is a label
        assert mask[1].tolist() == [t + k + 1 < 10 and t + k + 1 != 7 for t in range(10 - k)]


def test_unroll_attention_is_causal_at_depth_one_and_follows_decoding_after():
    n, steps = 6, 3
    allowed = unroll_allowed(n, steps)
    assert torch.equal(allowed[:n, :n], torch.ones(n, n, dtype=torch.bool).tril())
    assert not allowed[:n, n:].any()  # depth 1 never sees guesses
    for s in range(1, steps + 1):
        for i in range(n):
            seen = allowed[(s - 1) * n + i].nonzero().flatten().tolist()
            expected = [j for j in range(n) if j <= i - s + 1] + [(r - 1) * n + i - (s - r)
                                                                  for r in range(2, s + 1) if i - (s - r) >= 0]
            assert seen == sorted(expected)


def assert_unroll_is_cached_drafting(draft, inputs, ids, last_trues):
    """Depth s of eagle_unroll at slot i is what decoding computes for the s-th token drafted after slot i-s+1
    (`inputs`: what the draft reads, fused first; true slots 0..last_true, then two slots reading guesses)."""
    with torch.no_grad():
        outs = eagle_unroll(draft, inputs, ids, steps=3)
        for last_true in last_trues:
            cache = DynamicCache(config=draft.layer_config)
            out = draft(draft.fuse(inputs[:, : last_true + 1]), ids[:, 1: last_true + 2],
                        torch.arange(last_true + 1)[None], cache=cache)
            assert torch.allclose(out[:, -1], outs[0][:, last_true], atol=1e-5)
            guess = out[:, -1:]
            for depth in (2, 3):
                slot = last_true + depth - 1
                guess = draft(guess, ids[:, slot + 1: slot + 2], torch.tensor([[slot]]), cache=cache)
                assert torch.allclose(guess[:, 0], outs[depth - 1][:, slot], atol=1e-5)


def test_training_time_test_equals_drafting_with_a_cache(target):
    draft = trained_like(EagleDraft.from_target(target))
    ids = torch.randint(3, VOCAB, (1, 9))
    with torch.no_grad():
        features = final_hidden(target, ids)
    assert_unroll_is_cached_drafting(draft, features, ids, (2, 4, 5))


def stacked_unroll(draft, features, input_ids, steps):
    """Reference: every depth reruns the whole stacked sequence of the depths so far under `unroll_allowed`."""
    batch, length, hidden = features.shape
    n, ids, inputs, outs = length - 1, input_ids[:, 1:], [features[:, : length - 1]], []
    for s in range(1, steps + 1):
        positions = torch.arange(n).repeat(s)[None].expand(batch, -1)
        out = draft(torch.cat(inputs, dim=1), ids.repeat(1, s), positions,
                    additive(unroll_allowed(n, s), features.dtype))[:, -n:]
        outs.append(out)
        inputs.append(torch.cat([out.new_zeros(batch, 1, hidden), out[:, :-1]], dim=1))
    return outs


def test_the_cached_unroll_equals_the_stacked_sequence_values_and_gradients(target):
    """eagle_unroll runs each depth over its own slots against a shared KV cache: same outputs, same gradients as
    rerunning the stacked sequence (the training-time test's definition)."""
    draft = trained_like(EagleDraft.from_target(target)).train()
    ids = torch.randint(3, VOCAB, (2, 9))
    features = final_hidden(target, ids).detach()
    grads = []
    for unroll in (eagle_unroll, stacked_unroll):
        draft.zero_grad()
        outs = unroll(draft, features, ids, 3)
        sum((k + 1) * out.square().mean() for k, out in enumerate(outs)).backward()
        grads.append(({name: p.grad.clone() for name, p in draft.named_parameters() if p.grad is not None},
                      [out.detach() for out in outs]))
    (cached, cached_out), (stacked, stacked_out) = grads
    for a, b in zip(cached_out, stacked_out):
        assert torch.allclose(a, b, atol=1e-5)
    assert cached.keys() == stacked.keys() and cached
    for name in cached:
        # float32 sums in another order (thread counts differ under pytest-xdist): close relative to the whole tensor
        assert (cached[name] - stacked[name]).norm() <= 1e-4 * stacked[name].norm() + 1e-6, name


def test_eagle_depth_s_counts_only_slots_with_enough_true_context(target):
    draft = EagleDraft.from_target(target)
    ids = torch.randint(3, VOCAB, (1, 8))
    with torch.no_grad():
        pairs = eagle_pairs(draft, final_hidden(target, ids), ids.clone(), ids, steps=3)
    for s, (_, teacher, mask, _) in enumerate(pairs):
        assert teacher.shape[1] == 7 and mask[0, :s].sum() == 0 and mask[0, s:6].all()


@pytest.mark.parametrize("kind", ["medusa", "eagle"])
@pytest.mark.parametrize("gamma", [1, 3])
def test_greedy_output_is_the_targets_own(target, kind, gamma):
    draft = trained_like(MedusaHeads.from_target(target, 3) if kind == "medusa" else EagleDraft.from_target(target))
    prompt = [5, 9, 11, 7, 20, 3]
    expected = target.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False, eos_token_id=None,
                               pad_token_id=0)[0, len(prompt):].tolist()
    proposer = draft_proposer(draft)
    assert isinstance(proposer, MedusaProposer if kind == "medusa" else EagleProposer)
    out = generate(target, proposer, prompt, gamma, 24)
    assert out.tokens == expected
    assert sum(s.drafted for s in out.steps) > 0


def test_feature_reuse_equals_recomputing_the_features(target):
    draft = trained_like(EagleDraft.from_target(target))
    proposer = draft_proposer(draft)
    prompt = [5, 9, 11, 7, 20, 3]
    out = generate(target, proposer, prompt, 3, 20)  # with rollbacks after rejected drafts
    sequence = torch.tensor([prompt + out.tokens])
    with torch.no_grad():
        recomputed = final_hidden(target, sequence)[0]
        kept = proposer.verifier.features
        assert torch.allclose(kept, recomputed[: len(kept)], atol=1e-5)
        # the draft's cached slots give what one pass over all of them gives
        n = len(kept)
        full = draft(recomputed[None, :n], sequence[:, 1: n + 1], torch.arange(n)[None])
        cache = DynamicCache(config=draft.layer_config)
        parts = [draft(recomputed[None, a:b], sequence[:, a + 1: b + 1], torch.arange(a, b)[None], cache=cache)
                 for a, b in ((0, 5), (5, 6), (6, n))]
        assert torch.allclose(torch.cat(parts, dim=1), full, atol=1e-5)


@pytest.mark.parametrize("shape", [{"branching": [2, 2, 1]}, {"depth": 3, "width": 3, "top_k": 3},
                                   {"branching": [VOCAB, 1]}])
def test_medusa_tree_greedy_output_is_the_targets_own_and_keeps_the_paths_features(target, shape):
    """Every token a candidate at depth 1 ([VOCAB, 1]): each step accepts a node, often not the first, so the
    features and cache are compacted to a path of nodes that were not fed last."""
    draft = trained_like(MedusaHeads.from_target(target, 3))
    prompt = [5, 9, 11, 7, 20, 3]
    expected = target.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False, eos_token_id=None,
                               pad_token_id=0)[0, len(prompt):].tolist()
    proposer = MedusaTreeProposer(draft, **shape)
    out = generate(target, proposer, prompt, proposer.depth, 24)
    assert out.tokens == expected
    assert all(s.drafted <= proposer.depth for s in out.steps) and sum(s.verified for s in out.steps) > 0
    if "branching" in shape and shape["branching"][0] == VOCAB:
        assert all(s.accepted >= 1 for s in out.steps if s.drafted)
    with torch.no_grad():
        recomputed = final_hidden(target, torch.tensor([prompt + out.tokens]))[0]
    kept = proposer.verifier.features
    assert len(kept) == proposer.verifier.length and torch.allclose(kept, recomputed[: len(kept)], atol=1e-5)


def test_medusa_tree_refuses_trees_deeper_than_its_heads(target):
    draft = trained_like(MedusaHeads.from_target(target, 2))
    with pytest.raises(ValueError, match="at most as deep as the draft's heads"):
        MedusaTreeProposer(draft, branching=[2, 2, 1])


@pytest.mark.parametrize("kind", ["medusa", "eagle"])
def test_sampling_runs_and_returns_the_drafting_distribution(target, kind):
    draft = trained_like(MedusaHeads.from_target(target, 3) if kind == "medusa" else EagleDraft.from_target(target))
    proposer = draft_proposer(draft)
    verifier = proposer.make_verifier(target)
    prompt = [5, 9, 11, 7]
    verifier.start(prompt)
    proposer.start(prompt)
    drafted, q = proposer.propose(prompt, 3, SamplingParams(1.0), torch.Generator().manual_seed(0))
    assert len(drafted) == 3 and q.shape == (3, VOCAB)
    assert torch.allclose(q.sum(-1), torch.ones(3), atol=1e-5) and all(q[i, t] > 0 for i, t in enumerate(drafted))


@pytest.mark.parametrize("kind", ["medusa", "eagle"])
def test_export_round_trip_in_the_serving_layout(tmp_path, target, kind):
    draft = trained_like(MedusaHeads.from_target(target, 2) if kind == "medusa" else EagleDraft.from_target(target))
    write_feature_weights(draft, tmp_path, "my/target", ["LlamaForCausalLM"], gamma=3)
    (tmp_path / "draftsmith.json").write_text(json.dumps({"draft_kind": kind, "draft_config": draft.config_dict()}))
    config = json.loads((tmp_path / "config.json").read_text())
    if kind == "eagle":
        assert config["speculators_model_type"] == "eagle" and config["layernorms"] is True
        assert config["speculators_config"]["verifier"]["name_or_path"] == "my/target"
        assert config["transformer_layer_config"]["num_hidden_layers"] == 1
    else:
        assert config["model_type"] == "medusa" and config["num_heads"] == 2
        assert config["base_model_name_or_path"] == "my/target"
    assert feature_kind_of(tmp_path) == kind
    loaded = load_feature_draft(tmp_path, target)
    prompt = [5, 9, 11, 7, 20, 3]
    runs = [generate(target, draft_proposer(d), prompt, 2, 12) for d in (draft, loaded)]
    assert runs[0].tokens == runs[1].tokens
    assert [s.accepted for s in runs[0].steps] == [s.accepted for s in runs[1].steps]


def test_a_draft_for_another_target_is_refused(target):
    other = make_model(VOCAB, layers=1, hidden=48)
    with pytest.raises(ValueError, match="hidden size"):
        EagleDraft.from_target(target).attach(other)


def test_additive_mask_blocks_what_is_not_allowed():
    mask = additive(torch.tensor([[True, False], [True, True]]), torch.float32)
    assert mask.shape == (1, 1, 2, 2) and mask[0, 0, 0, 1] < -1e30 and mask[0, 0, 1].abs().sum() == 0


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["medusa", "eagle"])
def test_sampled_output_follows_the_targets_distribution(kind):
    """The first two sampled tokens through the main loop with a feature draft have the target's exact joint law."""
    from conftest import first_two_tokens

    vocab, draws, prompt = 6, 4_000, [1, 2, 3]
    small = make_model(vocab, layers=1, hidden=16, seed=3, init=0.8)
    draft = trained_like(MedusaHeads.from_target(small, 3) if kind == "medusa" else EagleDraft.from_target(small), 4)
    params = SamplingParams(1.0)
    with torch.no_grad():
        first = torch.softmax(small(torch.tensor([prompt])).logits[0, -1], -1)
        second = torch.stack([torch.softmax(small(torch.tensor([prompt + [t]])).logits[0, -1], -1)
                              for t in range(vocab)])
    exact = first[:, None] * second
    counts, drafted = first_two_tokens(small, draft_proposer(draft), prompt, 3, params, vocab, draws, new_tokens=2)
    tv = 0.5 * (counts / draws - exact).abs().sum().item()
    assert tv <= 0.04, tv
    assert max(drafted) >= 1  # drafts were really proposed (and judged)


def _train_export_and_measure(tmp_path, tiny_target_dir, text_file, kind, *extra):
    from test_eval import eval_cfg
    from test_train import tiny_cfg

    from eval.speculate import evaluate
    from train.distill import train

    summary = train(tiny_cfg(tmp_path, tiny_target_dir, text_file, f"model/draft={kind}", "spec_eval.gamma=2", *extra))
    export = tmp_path / "run" / "export"
    assert summary["after"]["val/kl"] < summary["before"]["val/kl"]  # it learned from the target
    assert "val/top1_agree_2" in summary["after"]  # head / depth 2 is scored too
    info = json.loads((export / "draftsmith.json").read_text())
    assert info["draft_kind"] == kind and feature_kind_of(export) == kind
    stored = load_file(str(export / "model.safetensors"))
    not_stored = ("embed_tokens",) if kind in ("eagle3", "medusa") else ("embed_tokens", "lm_head")  # their own heads
    assert stored and not any(k.startswith(not_stored) for k in stored)  # the target's, not stored
    if kind == "medusa":  # vLLM's Medusa loads its one lm_head from the export: the target's, every id, no map
        assert stored["lm_head.weight"].shape[0] == info["draft_config"]["vocab_size"] and "d2t" not in stored
    records = evaluate(eval_cfg(tmp_path, tiny_target_dir, [export], "gamma=[1,2,auto]", "domains=[general]",
                                "max_auto_gamma=3"))
    assert len(records) == 3 and all(r["greedy_identical"] for r in records)
    assert str(records[2]["gamma_setting"]).startswith("auto:")  # chosen by a pilot on the tune prompts
    assert all(r["cost_ratio_c"] > 0 for r in records)
    with pytest.raises(ValueError, match="decode with proposers"):
        evaluate(eval_cfg(tmp_path, tiny_target_dir, [export], "proposers=[draft,lookup+draft]"))
    trees = ("proposers=[tree,dynamic_tree]", "tree.branching=[2,1]", "tree.depth=2", "tree.width=2", "tree.top_k=2",
             "gamma=[1]", "domains=[general]")
    # each grows its own tree (Medusa: head k at depth k; EAGLE: its layer over its own cache), verified by the
    # feature-keeping tree verifier
    rows = evaluate(eval_cfg(tmp_path, tiny_target_dir, [export], *trees))
    assert [r["proposer"] for r in rows] == ["tree", "dynamic_tree"] and all(r["greedy_identical"] for r in rows)


@pytest.mark.integration
def test_eagle_trains_exports_and_is_measured_end_to_end(tmp_path, tiny_target_dir, text_file):
    _train_export_and_measure(tmp_path, tiny_target_dir, text_file, "eagle", "model.draft.unroll_steps=2",
                              "trainer.max_steps=6", "optim.lr=3e-3")


@pytest.mark.integration
def test_medusa_trains_exports_and_is_measured_end_to_end(tmp_path, tiny_target_dir, text_file):
    _train_export_and_measure(tmp_path, tiny_target_dir, text_file, "medusa", "model.draft.num_heads=2",
                              "trainer.max_steps=6", "optim.lr=3e-3")


def test_feature_drafts_refuse_what_they_cannot_do(tmp_path, tiny_target_dir, text_file):
    from test_train import tiny_cfg

    from train.distill import check_config

    for extra, match in (("lora.enabled=true", "lora.enabled=false"), ("onpolicy.fraction=0.5", "onpolicy.fraction=0")):
        with pytest.raises(ValueError, match=match):
            check_config(tiny_cfg(tmp_path, tiny_target_dir, text_file, "model/draft=eagle", extra,
                                  "spec_eval.enabled=false"))


@pytest.mark.parametrize("kind", ["eagle", pytest.param("medusa", marks=pytest.mark.integration)])  # one code path
def test_cached_features_give_the_live_targets_loss_without_the_target(target, kind):
    from train.losses import LossSettings
    from train.module import DistillModule
    from train.teacher_cache import FEATURES, features_of_target

    torch.manual_seed(1)
    draft = trained_like(MedusaHeads.from_target(target, 2) if kind == "medusa" else EagleDraft.from_target(target))
    ids = torch.randint(3, VOCAB, (2, 12))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}
    cached = features_of_target(target, ids)[FEATURES]
    assert cached.dtype == torch.float16 and cached.shape == (2, 12, 32)
    for train_vocab in (None, 40):
        loss = LossSettings("jsd", decay=0.8, steps=2)
        live = DistillModule(target, draft, loss=loss, train_vocab=train_vocab, special_ids={0})
        alone = DistillModule(None, draft, loss=loss, train_vocab=train_vocab, special_ids={0})  # no target at all
        for metrics in (False, True):
            want = live._distill(batch, metrics=metrics)
            exact = alone._distill({**batch, FEATURES: final_hidden(target, ids)}, metrics=metrics)
            assert torch.allclose(exact["loss"], want["loss"], atol=1e-6)  # the same features: the same loss
            rounded = alone._distill({**batch, FEATURES: cached}, metrics=metrics)
            assert torch.allclose(rounded["loss"], want["loss"], rtol=2e-3, atol=1e-4)  # float16 storage


@pytest.mark.integration
def test_a_feature_cache_is_built_once_and_trained_from(tmp_path, tiny_target_dir, text_file):
    from test_train import tiny_cfg

    from train.distill import train
    from data.teacher_cache_files import DONE, cache_kind

    def run(name, *extra):
        return train(tiny_cfg(tmp_path / name, tiny_target_dir, text_file, "model/draft=eagle", "teacher=cache",
                              "spec_eval.enabled=false", "trainer.max_steps=2", "model.draft.unroll_steps=2",
                              f"paths.cache_dir={tmp_path / 'cache'}", *extra))

    first = run("a")
    caches = list((tmp_path / "cache" / "teacher").glob(f"*/*-features/{DONE}"))
    assert len(caches) == 1 and cache_kind(caches[0].parent) == "features" and first["steps"] == 2
    stamp = caches[0].stat().st_mtime_ns
    second = run("b")  # the cache is reused, not rebuilt
    assert second["steps"] == 2 and caches[0].stat().st_mtime_ns == stamp
    assert first["teacher_cache_s"] > 0 and second["teacher_cache_s"] is not None  # the build's time is reported
    assert second["after"]["val/kl"] == pytest.approx(first["after"]["val/kl"])  # same data, same seed
    with pytest.raises(ValueError, match="holds the target's features"):  # a standalone draft cannot read it
        train(tiny_cfg(tmp_path / "c", tiny_target_dir, text_file, "teacher=cache", "spec_eval.enabled=false",
                       "loss=forward_kl", f"teacher_cache={caches[0].parent}"))


@pytest.mark.parametrize("kind,train_vocab", [("medusa", None), ("eagle", 40)])
def test_a_training_step_moves_only_the_draft_and_lowers_its_loss(target, kind, train_vocab):
    from train.losses import LossSettings
    from train.module import DistillModule, OptimSettings

    target.zero_grad(set_to_none=True)  # the module-scoped target: earlier tests may have left gradients on it
    draft = (MedusaHeads.from_target(target, 2) if kind == "medusa" else EagleDraft.from_target(target)).train()
    module = DistillModule(target, draft, loss=LossSettings("forward_kl", decay=0.8, steps=2),
                           optim=OptimSettings(lr=1e-2), train_vocab=train_vocab, special_ids={0})
    ids = torch.randint(3, VOCAB, (2, 16))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}
    optimizer = torch.optim.Adam([p for p in draft.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    for _ in range(4):
        optimizer.zero_grad()
        out = module._distill(batch, metrics=False)
        out["loss"].backward()
        losses.append(out["loss"].item())
        assert all(p.grad is None for p in target.parameters())
        optimizer.step()
    assert losses[-1] < losses[0]
    metrics = module._distill(batch, metrics=True)
    assert {"kl", "top1_agree", "expected_accept", "top1_agree_1", "top1_agree_2"} <= set(metrics)


@pytest.mark.parametrize("kind", ["medusa", "eagle"])
def test_the_card_of_a_feature_draft_serves_it_as_one(kind):
    from eval.shared.card import render

    card = render({"draft_kind": kind, "target": "my/target", "evaluations": []}, "x")
    assert "assistant_model=draft" not in card and "target=my/target drafts=[" in card
    if kind == "medusa":
        assert '"method": "medusa"' in card
    else:  # vLLM has no form of the EAGLE-style draft: the card says why instead of a command that fails
        assert "vllm serve" not in card and "vLLM: not served (vLLM reads speculators' eagle3 layout only" in card
    assert ("--speculative-algorithm EAGLE" in card) == (kind == "eagle")


def test_a_copy_of_the_draft_shares_the_targets_embeddings_and_head_and_a_cut_head_stays_its_own(target):
    import copy

    from decode.drafts.draft_vocab import restrict_vocab

    draft = EagleDraft.from_target(target)
    clone = copy.deepcopy(draft)
    assert clone.get_input_embeddings() is target.get_input_embeddings()
    assert clone.fusion_fc.weight is not draft.fusion_fc.weight
    cut, plan = restrict_vocab(draft, 16, {0}, copy=True)
    assert plan["restricted"] and cut.get_output_embeddings() is not target.get_output_embeddings()
    assert draft.get_output_embeddings() is target.get_output_embeddings()  # the original keeps the full head


@pytest.mark.integration  # a few seconds (Qwen2's modules import on first use): out of the fast suite
def test_a_qwen2_target_gets_a_qwen2_layer_and_keeps_greedy_identity():
    """Qwen2 (biased attention projections, per-layer attention kinds) as for the Qwen2.5-Coder pair."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    qwen = Qwen2ForCausalLM(Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                        tie_word_embeddings=True, initializer_range=0.2)).eval()
    prompt = [5, 6, 7, 8, 9]
    expected = qwen.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False, eos_token_id=None,
                             pad_token_id=0)[0, len(prompt):].tolist()
    eagle = trained_like(EagleDraft.from_target(qwen))
    assert type(eagle.transformer).__name__ == "Qwen2DecoderLayer"
    for draft in (eagle, trained_like(MedusaHeads.from_target(qwen, 2))):
        assert generate(qwen, draft_proposer(draft), prompt, 3, 16).tokens == expected


@pytest.mark.parametrize("seed", range(5))
def test_the_feature_buffer_appends_and_cuts_like_a_list_of_rows(seed):
    """The verifiers' growing feature buffer holds exactly the rows appended and not cut since, in order."""
    rng = torch.Generator().manual_seed(seed)
    rows, expected = FeatureRows(3, "cpu"), torch.empty(0, 3)
    for _ in range(60):
        if torch.rand(1, generator=rng) < 0.3:
            keep = int(torch.randint(0, len(expected) + 1, (1,), generator=rng))
            rows.cut(keep)
            expected = expected[:keep]
        else:
            new = torch.randn(int(torch.randint(1, 40, (1,), generator=rng)), 3, generator=rng)
            rows.append(new.half() if seed % 2 else new)  # float16 rows (a feature cache's) are kept as float32
            expected = torch.cat([expected, new.half().float() if seed % 2 else new])
        assert rows.view().dtype == torch.float32 and torch.equal(rows.view(), expected)
