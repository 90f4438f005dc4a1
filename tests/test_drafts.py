"""Draft construction and the vocabulary guard."""

import pytest
import torch

from conftest import make_model, make_tokenizer
from decode.models.loading import VocabMismatchError, check_same_vocab
from train.drafts import build_draft


def test_truncated_with_all_layers_reproduces_the_target(tokenizer):
    target = make_model(len(tokenizer), layers=3)
    draft = build_draft(target, "truncated", layers=[0, 1, 2]).eval()
    ids = torch.randint(0, len(tokenizer), (2, 9))
    with torch.no_grad():
        assert torch.allclose(draft(ids).logits, target(ids).logits, atol=1e-5)


def test_truncated_copies_chosen_layers_embeddings_and_norm(tokenizer):
    target = make_model(len(tokenizer), layers=4, tie=False)
    draft = build_draft(target, "truncated", layers=[0, 3], train_embeddings=False)
    assert draft.config.num_hidden_layers == 2
    t, d = target.state_dict(), draft.state_dict()
    assert torch.equal(d["model.layers.1.mlp.up_proj.weight"], t["model.layers.3.mlp.up_proj.weight"])
    assert torch.equal(d["model.embed_tokens.weight"], t["model.embed_tokens.weight"])
    assert torch.equal(d["model.norm.weight"], t["model.norm.weight"])
    assert torch.equal(d["lm_head.weight"], t["lm_head.weight"])
    assert not draft.get_input_embeddings().weight.requires_grad
    assert not draft.get_output_embeddings().weight.requires_grad
    assert draft.model.layers[0].self_attn.q_proj.weight.requires_grad
    # the draft is a copy: training it never touches the target
    d["model.norm.weight"].add_(1.0)
    assert not torch.equal(d["model.norm.weight"], target.state_dict()["model.norm.weight"])


@pytest.mark.parametrize("layers", [[], [0, 0], [7]])
def test_truncated_rejects_bad_layer_lists(tokenizer, layers):
    with pytest.raises(ValueError, match="model.draft.layers"):
        build_draft(make_model(len(tokenizer), layers=3), "truncated", layers=layers)


def test_fresh_draft_has_target_vocab_and_smaller_shape(tokenizer):
    target = make_model(len(tokenizer), layers=3)
    draft = build_draft(target, "fresh", config={"num_hidden_layers": 1, "intermediate_size": 16})
    assert draft.config.vocab_size == target.config.vocab_size
    assert draft.config.num_hidden_layers == 1
    assert torch.equal(draft.get_input_embeddings().weight, target.get_input_embeddings().weight)
    with pytest.raises(ValueError, match="no such field"):
        build_draft(target, "fresh", config={"not_a_field": 1})
    with pytest.raises(ValueError, match="hidden size"):
        build_draft(target, "fresh", config={"hidden_size": 16, "num_attention_heads": 2, "num_key_value_heads": 1})


def test_unknown_kind_and_missing_pretrained_path(tokenizer):
    target = make_model(len(tokenizer))
    with pytest.raises(ValueError, match="truncated, fresh, pretrained or one of medusa, eagle, eagle3"):
        build_draft(target, "magic")
    with pytest.raises(ValueError, match="name_or_path"):
        build_draft(target, "pretrained")


def test_vocab_guard_names_both_sides(tokenizer):
    other = make_tokenizer(vocab_size=290, corpus="completely different words " * 50)
    with pytest.raises(VocabMismatchError, match=r"'big-target'.*'small-draft'.*tokenizers differ"):
        check_same_vocab(tokenizer, other, target_name="big-target", draft_name="small-draft")
    target, draft = make_model(len(tokenizer)), make_model(len(tokenizer) + 8)
    with pytest.raises(VocabMismatchError, match=r"embedding vocab sizes differ \(t: \d+, d: \d+\)"):
        check_same_vocab(tokenizer, tokenizer, target, draft, "t", "d")
    check_same_vocab(tokenizer, tokenizer, target, make_model(len(tokenizer), seed=3))  # same vocab: fine


def test_truncated_from_a_source_model_takes_its_layers_and_width(tokenizer, tmp_path):
    """kind=truncated with `source`: the layers of a smaller model of the target's vocabulary (the Qwen2.5-Coder
    recipe cuts the 0.5B for the 1.5B target), not of the target."""
    target = make_model(len(tokenizer), layers=3, hidden=32)
    donor = make_model(len(tokenizer), layers=4, hidden=16, seed=3)
    donor.save_pretrained(tmp_path / "donor")
    draft = build_draft(target, "truncated", layers=[0, 3], source=str(tmp_path / "donor"), train_embeddings=False)
    assert draft.config.hidden_size == 16 and draft.config.num_hidden_layers == 2
    d, s = draft.state_dict(), donor.state_dict()
    assert torch.equal(d["model.layers.1.mlp.up_proj.weight"], s["model.layers.3.mlp.up_proj.weight"])
    assert torch.equal(d["model.embed_tokens.weight"], s["model.embed_tokens.weight"])
    with pytest.raises(ValueError, match=r"in \[0, 3\]"):  # indices are the donor's (4 layers), not the target's
        build_draft(target, "truncated", layers=[4], source=str(tmp_path / "donor"))
