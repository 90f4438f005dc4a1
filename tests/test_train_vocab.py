"""Training over the decoder's kept draft vocabulary (train/train_vocab.py)."""

import pytest
import torch
import torch.nn.functional as F

from conftest import make_model
from decode.drafts.draft_vocab import kept_ids
from train.losses import LossSettings
from train.module import DistillModule
from train.train_vocab import kept_head, remap


def test_remap_finds_kept_tokens_and_drops_the_rest():
    ids = torch.tensor([0, 2, 5, 9])
    index, kept = remap(torch.tensor([[5, 3, 9, -100, 0]]), ids, 12)
    assert kept.tolist() == [[True, False, True, False, True]]
    assert index[kept].tolist() == [2, 3, 0]


def test_kept_head_is_the_full_heads_rows_and_needs_a_frozen_head():
    draft = make_model(64, layers=1, tie=False)
    with pytest.raises(ValueError, match="train_embeddings=false"):
        kept_head(draft, 16, keep=[60])
    draft.get_output_embeddings().requires_grad_(False)
    ids, head = kept_head(draft, 16, keep=[60])
    assert torch.equal(ids, kept_ids(64, 16, [60])) and 60 in ids.tolist()
    h = torch.randn(5, draft.config.hidden_size)
    assert torch.allclose(head(h), draft.get_output_embeddings()(h)[:, ids])
    assert not head.weight.requires_grad


@pytest.mark.parametrize("ce_weight", [1.0, 0.0])
def test_a_kept_vocabulary_step_is_the_loss_over_kept_ids_at_kept_positions(tokenizer, ce_weight):
    """The step's loss equals cross-entropy (or KL to the renormalised teacher) computed from full logits cut to the
    kept ids, averaged over the positions whose next token is kept; the body trains, the head does not."""
    vocab = len(tokenizer)
    target, draft = make_model(vocab, layers=2, seed=1, init=0.3), make_model(vocab, layers=1, seed=2, init=0.3)
    draft.get_output_embeddings().requires_grad_(False)
    draft.get_input_embeddings().requires_grad_(False)
    module = DistillModule(target, draft, loss=LossSettings("forward_kl", ce_weight=ce_weight), train_vocab=40,
                           special_ids=[1, 2])
    torch.manual_seed(0)
    ids = torch.randint(0, vocab, (2, 12))
    labels = ids.clone()
    labels[:, :3] = -100
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    out = module._distill(batch, metrics=False)
    kept = module._kept[0]
    nxt = torch.roll(labels, -1, dims=1)
    index, is_kept = remap(nxt, kept, vocab)
    mask = torch.zeros_like(labels, dtype=torch.bool)
    mask[:, :-1] = labels[:, 1:] != -100
    mask &= is_kept
    s_logits = draft(ids).logits[..., kept][mask]
    if ce_weight == 1:
        expected = F.cross_entropy(s_logits, index[mask])
    else:
        with torch.no_grad():
            t_logits = target(ids).logits[..., kept][mask]
        expected = F.kl_div(F.log_softmax(s_logits, -1), F.log_softmax(t_logits, -1), log_target=True,
                            reduction="batchmean")
    assert 0 < int(mask.sum()) < mask.numel()
    assert torch.allclose(out["loss"], expected, atol=1e-5)
    out["loss"].backward()
    assert draft.model.layers[0].mlp.up_proj.weight.grad is not None
    assert draft.get_output_embeddings().weight.grad is None


def test_rank_labels_counts_trained_tokens_only_most_frequent_first():
    from data.token_ranking import rank_labels

    labels = [torch.tensor([-100, -100, 7, 7, 3]), [7, 5, 5, -100]]
    assert rank_labels(labels, 10) == [7, 5, 3]  # 7 three times, 5 twice, 3 once; -100 is not a token
    with pytest.raises(ValueError, match="train_vocab_from=null"):
        rank_labels([[-100, -100]], 10)


def test_a_ranked_kept_head_keeps_the_most_frequent_ids_and_the_export_file_round_trips(tmp_path):
    from data.token_ranking import saved_ranking, write_ranking

    draft = make_model(64, layers=1, tie=False)
    draft.get_output_embeddings().requires_grad_(False)
    ranking = [50, 40, 30, 20, 10]
    ids, head = kept_head(draft, 4, keep=[60], ranking=ranking)
    assert ids.tolist() == [30, 40, 50, 60]  # the special id, then the three most frequent
    assert torch.equal(head.weight, draft.get_output_embeddings().weight[ids])
    assert saved_ranking(tmp_path) is None and saved_ranking("embedded:some-model") is None
    write_ranking(tmp_path, ranking, 4, "test text")
    assert saved_ranking(tmp_path) == ranking


def test_a_draft_trained_over_ranked_ids_keeps_them_whatever_draft_vocab_from_ranks():
    """Its loss covered only its ids: a cut head over others would propose tokens it never learned to rank."""
    from data.token_ranking import head_ranking

    assert head_ranking([5, 4], [9, 8]) == ([5, 4], "draft_vocab.json: the ids it trained over")
    assert head_ranking(None, [9, 8]) == ([9, 8], "draft_vocab_from")
    assert head_ranking(None, None) == (None, None)


def test_train_labels_on_another_rank_waits_for_rank_zeros_cache(tmp_path, tokenizer, monkeypatch):
    """Ranking happens before the Trainer exists: under torchrun only local rank 0 packs the data."""
    from data.datamodule import DistillDataModule

    path = tmp_path / "a.txt"
    path.write_text("\n".join(f"line {i} of some text to pack into blocks" for i in range(200)))
    dm = DistillDataModule(tokenizer, [{"kind": "files", "path": str(path)}], block_size=16, batch_size=2,
                           val_tokens=32, cache_dir=tmp_path / "cache")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(TimeoutError, match="local rank 0"):
        dm.train_labels(wait_s=0.1)
    assert not dm.cache_path.exists()  # rank 1 never packs
    monkeypatch.setenv("LOCAL_RANK", "0")
    labels = dm.train_labels()
    assert len(labels) > 0 and dm.cache_path.exists()
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert dm.train_labels(wait_s=0.1) == labels  # the cache is there: read at once
