"""The EAGLE-3 draft (decode/drafts/eagle3.py): the layer inputs it reads, its start as a copy of the target's layer, the
training-time test against drafting with a cache, decoding through the main loop (greedy identity for the chain and
the tree, feature reuse), the cached layer inputs, and the export in speculators' eagle3 layout."""

import json

import pytest
import torch
from safetensors.torch import load_file

from conftest import make_model
from decode.drafts.eagle3 import Eagle3Draft
from decode.drafts.features import default_aux_layers, layer_inputs
from decode.proposers.eagle_tree import EagleTreeProposer
from decode.proposers.feature_decoding import EagleProposer, draft_proposer
from decode.drafts.feature_export import draft_head_state, load_feature_draft, write_feature_weights
from decode.drafts.kinds import feature_kind_of
from decode.core.speculative import SamplingParams, generate
from test_feature_drafts import assert_unroll_is_cached_drafting, trained_like

VOCAB = 64
PROMPT = [5, 9, 11, 7, 20, 3]


@pytest.fixture(scope="module")
def target():
    return make_model(VOCAB, layers=4, hidden=32, init=0.2)


def greedy(target, prompt, n):
    return target.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, eos_token_id=None,
                           pad_token_id=0)[0, len(prompt):].tolist()


def test_default_aux_layers_are_eagle3s_low_middle_and_high_layers():
    assert default_aux_layers(30) == [2, 15, 27]
    assert default_aux_layers(28) == [2, 14, 25]
    assert default_aux_layers(4) == [1, 2]  # a tiny target: inside its range, no repeats
    assert default_aux_layers(1) == [0]


def test_layer_inputs_are_the_hidden_states_entering_those_layers(target):
    ids = torch.randint(3, VOCAB, (2, 7))
    with torch.no_grad():
        out, aux = layer_inputs(target, ids, [0, 2, 3], use_cache=False)
        states = target(ids, output_hidden_states=True).hidden_states  # [0]: embeddings, [i]: after layer i-1
        assert torch.allclose(out.last_hidden_state, target.get_decoder()(input_ids=ids).last_hidden_state)
        assert torch.allclose(aux, torch.cat([states[0], states[2], states[3]], -1), atol=1e-6)
        assert layer_inputs(target, ids, None, use_cache=False)[1] is None
    with pytest.raises(ValueError, match="not layers of this target"):
        layer_inputs(target, ids, [4])


def test_it_starts_as_the_targets_layer_over_that_layers_input(target):
    draft = Eagle3Draft.from_target(target, aux_layers=[0, 2])
    ids = torch.randint(3, VOCAB, (1, 9))
    with torch.no_grad():
        _, aux = layer_inputs(target, ids, [0, 2], use_cache=False)
        _, after = layer_inputs(target, ids, [3], use_cache=False)  # what layer 2 gives = what enters layer 3
        out = draft(draft.fuse(aux), torch.randint(3, VOCAB, (1, 9)), torch.arange(9)[None])  # tokens ignored
    assert torch.allclose(out, after, atol=1e-5)
    fresh = Eagle3Draft.from_target(target, aux_layers=[0, 2], init_layer=None)
    assert fresh.fc.weight.shape == (32, 64) and fresh.layers[0].self_attn.q_proj.in_features == 64
    with pytest.raises(ValueError, match="aux_layers must be layers of the target"):
        Eagle3Draft.from_target(target, aux_layers=[1, 9])


def test_training_time_test_equals_drafting_with_a_cache(target):
    draft = trained_like(Eagle3Draft.from_target(target))
    ids = torch.randint(3, VOCAB, (1, 9))
    with torch.no_grad():
        _, aux = layer_inputs(target, ids, draft.aux_layers, use_cache=False)
    assert_unroll_is_cached_drafting(draft, aux, ids, (2, 5))


@pytest.mark.parametrize("gamma", [1, 3])
def test_greedy_output_is_the_targets_own_and_the_kept_features_are_the_layer_inputs(target, gamma):
    draft = trained_like(Eagle3Draft.from_target(target))
    proposer = draft_proposer(draft)
    assert isinstance(proposer, EagleProposer)
    out = generate(target, proposer, PROMPT, gamma, 24)
    assert out.tokens == greedy(target, PROMPT, 24) and sum(s.drafted for s in out.steps) > 0
    with torch.no_grad():
        _, aux = layer_inputs(target, torch.tensor([PROMPT + out.tokens]), draft.aux_layers, use_cache=False)
    kept = proposer.verifier.features  # rolled back with the cache after rejected drafts
    assert kept.shape[1] == 32 * len(draft.aux_layers) and torch.allclose(kept, aux[0, : len(kept)], atol=1e-5)


@pytest.mark.parametrize("shape", [{"branching": [2, 2, 1]}, {"depth": 3, "width": 3, "top_k": 3}])
def test_a_tree_keeps_greedy_identity_and_the_paths_layer_inputs(target, shape):
    draft = trained_like(Eagle3Draft.from_target(target))
    proposer = EagleTreeProposer(draft, **shape)
    out = generate(target, proposer, PROMPT, proposer.depth, 24)
    assert out.tokens == greedy(target, PROMPT, 24)
    with torch.no_grad():
        _, aux = layer_inputs(target, torch.tensor([PROMPT + out.tokens]), draft.aux_layers, use_cache=False)
    kept = proposer.verifier.features
    assert len(kept) == proposer.verifier.length and torch.allclose(kept, aux[0, : len(kept)], atol=1e-5)


def test_sampling_returns_the_drafting_distribution(target):
    proposer = draft_proposer(trained_like(Eagle3Draft.from_target(target)))
    verifier = proposer.make_verifier(target)
    verifier.start(PROMPT)
    proposer.start(PROMPT)
    drafted, q = proposer.propose(PROMPT, 3, SamplingParams(1.0), torch.Generator().manual_seed(0))
    assert len(drafted) == 3 and q.shape == (3, VOCAB) and torch.allclose(q.sum(-1), torch.ones(3), atol=1e-5)


def test_cached_layer_inputs_give_the_live_targets_loss_and_a_step_trains_only_the_draft(target):
    from train.losses import LossSettings
    from train.module import DistillModule
    from train.teacher_cache import AUX_FEATURES, FEATURES, features_of_target

    target.zero_grad(set_to_none=True)
    draft = trained_like(Eagle3Draft.from_target(target)).train()
    ids = torch.randint(3, VOCAB, (2, 12))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}
    cached = features_of_target(target, ids, draft.aux_layers)
    assert cached[AUX_FEATURES].shape == (2, 12, 32 * len(draft.aux_layers)) and cached[FEATURES].shape == (2, 12, 32)
    loss = LossSettings("forward_kl", decay=0.8, steps=2)
    live = DistillModule(target, draft, loss=loss, train_vocab=40, special_ids={0})
    alone = DistillModule(None, draft, loss=loss, train_vocab=40, special_ids={0})
    want = live._distill(batch, metrics=False)
    got = alone._distill({**batch, **cached}, metrics=False)
    assert torch.allclose(got["loss"], want["loss"], rtol=2e-3, atol=1e-4)  # float16 storage
    with pytest.raises(ValueError, match="holds no layer inputs"):
        alone._distill({**batch, FEATURES: cached[FEATURES]}, metrics=False)
    optimizer = torch.optim.Adam([p for p in draft.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    for _ in range(4):
        optimizer.zero_grad()
        out = live._distill(batch, metrics=False)
        out["loss"].backward()
        losses.append(out["loss"].item())
        optimizer.step()
    assert losses[-1] < losses[0] and all(p.grad is None for p in target.parameters())
    assert {"top1_agree_1", "top1_agree_2"} <= set(live._distill(batch, metrics=True))


def test_the_draft_vocabulary_head_maps_draft_ids_to_target_ids():
    head = torch.randn(10, 4)
    state = draft_head_state(head, torch.tensor([7, 1, 4]))
    assert torch.equal(state["lm_head.weight"], head[[1, 4, 7]])
    assert (torch.arange(3) + state["d2t"]).tolist() == [1, 4, 7]  # speculators: target id = draft id + d2t
    assert state["t2d"].nonzero().flatten().tolist() == [1, 4, 7]
    full = draft_head_state(head, None)
    assert torch.equal(full["lm_head.weight"], head) and set(full) == {"lm_head.weight"}  # vLLM: no map for all ids


def test_export_round_trip_in_the_speculators_eagle3_layout(tmp_path, target):
    draft = trained_like(Eagle3Draft.from_target(target))
    kept = torch.arange(0, VOCAB, 2)
    write_feature_weights(draft, tmp_path, "my/target", ["LlamaForCausalLM"], gamma=3, kept=kept)
    (tmp_path / "draftsmith.json").write_text(json.dumps({"draft_kind": "eagle3", "draft_config": draft.config_dict()}))
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle3" and config["architectures"] == ["Eagle3Speculator"]
    assert config["eagle_aux_hidden_state_layer_ids"] == draft.aux_layers and config["draft_vocab_size"] == 32
    assert config["speculators_config"]["algorithm"] == "eagle3"
    assert config["speculators_config"]["verifier"]["name_or_path"] == "my/target"
    assert config["transformer_layer_config"]["num_hidden_layers"] == 1
    stored = load_file(str(tmp_path / "model.safetensors"))
    assert {"fc.weight", "layers.0.hidden_norm.weight", "layers.0.self_attn.q_proj.weight", "norm.weight",
            "lm_head.weight", "d2t", "t2d"} <= set(stored)
    assert stored["layers.0.self_attn.q_proj.weight"].shape[1] == 64 and stored["lm_head.weight"].shape == (32, 32)
    assert not any(k.startswith("embed_tokens") for k in stored)  # the verifier's
    assert feature_kind_of(tmp_path) == "eagle3"
    loaded = load_feature_draft(tmp_path, target)
    runs = [generate(target, draft_proposer(d), PROMPT, 2, 12) for d in (draft, loaded)]
    assert runs[0].tokens == runs[1].tokens
    assert [s.accepted for s in runs[0].steps] == [s.accepted for s in runs[1].steps]
    with pytest.raises(ValueError, match="target's LM head"):
        from decode.drafts.feature_export import feature_draft_from_config

        write_feature_weights(feature_draft_from_config(draft.config_dict()), tmp_path, "my/target")


def test_a_card_serves_it_as_eagle3():
    from eval.shared.card import render

    card = render({"draft_kind": "eagle3", "target": "my/target", "evaluations": []}, "x")
    assert '"method": "eagle3"' in card and "--speculative-algorithm EAGLE3" in card
    assert "a copy of the target's rows" in card  # its export stores its draft-vocabulary head


@pytest.mark.integration
def test_eagle3_trains_exports_and_is_measured_end_to_end(tmp_path, tiny_target_dir, text_file):
    from test_feature_drafts import _train_export_and_measure

    from test_train import tiny_cfg

    from train.distill import train
    from eval.shared.export import export_checkpoint
    from data.teacher_cache_files import DONE, cache_aux_layers

    _train_export_and_measure(tmp_path, tiny_target_dir, text_file, "eagle3", "model.draft.unroll_steps=2",
                              "trainer.max_steps=6", "optim.lr=3e-3")
    # exporting a checkpoint on its own loads the target it names for the head
    ckpt = sorted((tmp_path / "run" / "checkpoints").glob("*.ckpt"))[-1]
    again = export_checkpoint(ckpt, tmp_path / "again")
    first = load_file(str(tmp_path / "run" / "export" / "model.safetensors"))
    assert torch.equal(load_file(str(again / "model.safetensors"))["lm_head.weight"], first["lm_head.weight"])
    # teacher=cache: the feature cache holds the layer inputs too, under a name of its own
    summary = train(tiny_cfg(tmp_path / "cached", tiny_target_dir, text_file, "model/draft=eagle3", "teacher=cache",
                             "spec_eval.enabled=false", "trainer.max_steps=2", "model.draft.unroll_steps=2",
                             f"paths.cache_dir={tmp_path / 'cache'}"))
    caches = list((tmp_path / "cache" / "teacher").glob(f"*/*-features-aux-*/{DONE}"))
    assert len(caches) == 1 and cache_aux_layers(caches[0].parent) and summary["steps"] == 2
    with pytest.raises(ValueError, match="inputs of target layers"):
        train(tiny_cfg(tmp_path / "other", tiny_target_dir, text_file, "model/draft=eagle3", "teacher=cache",
                       "spec_eval.enabled=false", "model.draft.aux_layers=[0]", f"teacher_cache={caches[0].parent}"))


def test_the_exported_draft_vocabulary_is_the_trained_one():
    from decode.drafts.draft_vocab import kept_ids
    from eval.shared.export import _export_kept_ids

    meta = {"draft_vocab": {"size": 5, "ranking": [9, 8, 7, 6, 5, 4], "special_ids": [0, 2]},
            "generation_config": {"eos_token_id": 2}}
    assert _export_kept_ids(12, meta).tolist() == kept_ids(12, 5, [0, 2], [9, 8, 7, 6, 5, 4]).tolist() == [0, 2, 7, 8, 9]
    del meta["draft_vocab"]["special_ids"]  # an older checkpoint: the end-of-sequence id is kept
    assert _export_kept_ids(12, meta).tolist() == [2, 6, 7, 8, 9]
    assert _export_kept_ids(12, {"draft_vocab": None}) is None  # trained over every id


def tiny_qwen2():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=False, initializer_range=0.2, rope_theta=1e6)
    qwen = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        for layer in qwen.model.layers:
            layer.self_attn.q_proj.bias.normal_()
            layer.self_attn.k_proj.bias.normal_()
    return qwen


def test_a_qwen2_target_with_attention_biases_starts_as_its_layer_and_keeps_greedy_identity():
    """Qwen2 layers carry q/k/v biases: the widened projections keep them, the start is still the target's layer,
    and decoding stays the target's own greedy output."""
    qwen = tiny_qwen2()
    draft = Eagle3Draft.from_target(qwen, aux_layers=[0, 2])
    assert draft.layers[0].self_attn.q_proj.bias is not None
    ids = torch.randint(3, VOCAB, (1, 9))
    with torch.no_grad():
        _, aux = layer_inputs(qwen, ids, [0, 2], use_cache=False)
        _, after = layer_inputs(qwen, ids, [3], use_cache=False)
        out = draft(draft.fuse(aux), torch.randint(3, VOCAB, (1, 9)), torch.arange(9)[None])
    assert torch.allclose(out, after, atol=1e-5)
    decoded = generate(qwen, draft_proposer(trained_like(Eagle3Draft.from_target(qwen))), PROMPT, 2, 24)
    assert decoded.tokens == greedy(qwen, PROMPT, 24) and sum(s.drafted for s in decoded.steps) > 0


def test_a_qwen2_layer_is_exported_as_the_llama_layer_that_computes_the_same(tmp_path):
    """Serving engines build EAGLE-3 layers from Llama's classes: a Qwen2 layer goes out as a Llama config with
    attention biases and a zero o_proj bias, which computes exactly what the Qwen2 layer does, and loads back."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer

    from decode.drafts.eagle3 import as_llama_layer

    qwen = tiny_qwen2()
    llama_config = LlamaConfig(**as_llama_layer(qwen.config.to_dict()))
    assert llama_config.model_type == "llama" and llama_config.attention_bias and not llama_config.mlp_bias
    assert llama_config.rope_parameters["rope_theta"] == qwen.config.rope_parameters["rope_theta"]
    theirs = qwen.model.layers[1]
    assert isinstance(theirs, Qwen2DecoderLayer)
    llama = LlamaDecoderLayer(llama_config, layer_idx=0).eval()
    state = dict(theirs.state_dict(), **{"self_attn.o_proj.bias": torch.zeros(32)})
    llama.load_state_dict(state, strict=True)
    x, positions = torch.randn(1, 7, 32), torch.arange(7)[None]
    rope = LlamaRotaryEmbedding(llama_config)(x, positions)
    mask = torch.full((7, 7), float("-inf")).triu(1)[None, None]
    with torch.no_grad():
        same = [layer(x, attention_mask=mask, position_ids=positions, position_embeddings=rope)
                for layer in (theirs, llama)]
    same = [out[0] if isinstance(out, tuple) else out for out in same]
    assert torch.allclose(same[0], same[1], atol=1e-6)

    draft = trained_like(Eagle3Draft.from_target(qwen, aux_layers=[0, 2]))
    assert not draft.serving_state()["layers.0.self_attn.o_proj.bias"].any()
    write_feature_weights(draft, tmp_path, "my/qwen", ["Qwen2ForCausalLM"], gamma=2)
    (tmp_path / "draftsmith.json").write_text(json.dumps({"draft_kind": "eagle3", "draft_config": draft.config_dict()}))
    assert json.loads((tmp_path / "config.json").read_text())["transformer_layer_config"]["model_type"] == "llama"
    runs = [generate(qwen, draft_proposer(d), PROMPT, 2, 12) for d in (draft, load_feature_draft(tmp_path, qwen))]
    assert runs[0].tokens == runs[1].tokens
    assert as_llama_layer({"model_type": "llama", "x": 1}) == {"model_type": "llama", "x": 1}  # others: as they are
    with pytest.raises(ValueError, match="sliding-window"):
        as_llama_layer(dict(qwen.config.to_dict(), use_sliding_window=True))
