"""Data: built-in corpora, sources, chat masking, packing, split and cache."""

import json
import os

import pytest

from data.corpora import icd10cm, medical_hpo, python_code, python_docs
from data.datamodule import DistillDataModule, split_and_pack
from data.packing import encode, encode_chat, pack
from data.sources import iter_source


def test_builtin_corpora_yield_real_text():
    hpo = next(iter(medical_hpo()))
    assert ": " in hpo and len(hpo) > 40
    assert next(iter(icd10cm())).startswith("ICD-10-CM, ")
    assert "def " in next(iter(python_code())) or "import" in next(iter(python_code()))
    assert len(next(iter(python_docs())).split()) >= 8


def test_hpo_skips_obsolete_terms():
    assert not any(doc.lower().startswith("obsolete") for doc in medical_hpo())


def test_pack_cuts_full_blocks_and_masks_labels():
    encoded = [([1, 2, 3], [1, 1, 1]), ([4, 5, 6, 7], [0, 0, 1, 1]), ([8, 9], [1, 1])]
    blocks = pack(encoded, block_size=4)
    assert blocks["input_ids"] == [[1, 2, 3, 4], [5, 6, 7, 8]]
    assert blocks["labels"] == [[1, 2, 3, -100], [-100, 6, 7, 8]]  # tail [9] dropped
    with pytest.raises(ValueError, match="block_size"):
        pack(encoded, block_size=1)


def test_pack_drops_blocks_with_nothing_to_learn():
    assert pack([([1, 2, 3, 4], [0, 0, 0, 0])], block_size=4)["input_ids"] == []


def test_chat_masks_the_prompt(tokenizer):
    messages = [{"role": "user", "content": "What is fever?"}, {"role": "assistant", "content": "A high temperature."}]
    ids, mask = encode_chat(tokenizer, messages)
    text = tokenizer.decode([i for i, m in zip(ids, mask) if m])
    assert "high temperature" in text and "fever" not in text
    assert len(ids) == len(mask) and 0 < sum(mask) < len(mask)
    _, all_mask = encode_chat(tokenizer, messages, train_on_prompt=True)
    assert all(all_mask)


def test_text_examples_end_with_eos(tokenizer):
    (ids, mask), = encode(tokenizer, ["hello world"])
    assert ids[-1] == tokenizer.eos_token_id and all(mask)


def test_files_source_reads_jsonl_txt_and_chat(tmp_path):
    (tmp_path / "a.jsonl").write_text(json.dumps({"body": "first"}) + "\n" + json.dumps({"body": "second"}) + "\n")
    assert list(iter_source({"kind": "files", "path": str(tmp_path / "a.jsonl"), "text_field": "body"})) == \
        ["first", "second"]
    (tmp_path / "b.txt").write_text("line one\nline two\n")
    assert list(iter_source({"kind": "files", "path": str(tmp_path / "*.txt")})) == ["line one", "line two"]
    (tmp_path / "c.jsonl").write_text(json.dumps({"prompt": "q", "response": "a"}) + "\n")
    chat = list(iter_source({"kind": "files", "path": str(tmp_path / "c.jsonl"), "format": "chat"}))
    assert chat == [[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]]
    first = {"kind": "files", "path": str(tmp_path / "a.jsonl"), "text_field": "body", "max_records": 1}
    assert list(iter_source(first)) == ["first"]  # a store's first answers only (the quick Qwen recipe's)
    with pytest.raises(ValueError, match="max_records must be >= 1"):
        list(iter_source({**first, "max_records": 0}))


def test_bad_sources_fail_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="no file matches"):
        list(iter_source({"kind": "files", "path": str(tmp_path / "missing*.jsonl")}))
    (tmp_path / "a.jsonl").write_text(json.dumps({"body": "x"}) + "\n")
    with pytest.raises(KeyError, match=r"no text field 'text'.*\['body'\]"):
        list(iter_source({"kind": "files", "path": str(tmp_path / "a.jsonl")}))
    with pytest.raises(ValueError, match="Unknown built-in corpus"):
        list(iter_source({"kind": "builtin", "name": "nope"}))


def test_empty_source_is_an_error(tokenizer, tmp_path):
    (tmp_path / "empty.txt").write_text("\n\n")
    with pytest.raises(ValueError, match="is empty"):
        split_and_pack(tokenizer, [{"kind": "files", "path": str(tmp_path / "empty.txt")}], 16, None, 64)


def test_split_is_by_document_and_respects_budgets(tokenizer, tmp_path):
    docs = [f"doc{i:03d} " + "alpha beta gamma " * 5 for i in range(100)]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps({"text": d}) for d in docs))
    packed, stats = split_and_pack(tokenizer, [{"kind": "files", "path": str(tmp_path / "d.jsonl")}], 32,
                                   train_tokens=600, val_tokens=128)
    decode = lambda blocks: {w for b in blocks for w in tokenizer.decode(b).split() if w.startswith("doc")}
    train_docs, val_docs = decode(packed["train"]["input_ids"]), decode(packed["val"]["input_ids"])
    assert train_docs and val_docs and not train_docs & val_docs
    assert len(packed["val"]["input_ids"]) <= 4
    assert stats[0]["train_tokens"] <= 600 + 64


def test_datamodule_caches_and_serves_batches(tokenizer, text_file, tmp_path):
    kwargs = dict(sources=[{"kind": "files", "path": str(text_file)}], block_size=32, batch_size=2, val_tokens=64,
                  cache_dir=tmp_path)
    dm = DistillDataModule(tokenizer, **kwargs)
    dm.prepare_data()
    dm.setup()
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape == (2, 32) and batch["attention_mask"].all()
    assert dm.cache_path.is_dir() and (dm.cache_path / "stats.json").is_file()
    again = DistillDataModule(tokenizer, **kwargs)
    assert again.cache_path == dm.cache_path  # same inputs, same cache entry
    assert DistillDataModule(tokenizer, **{**kwargs, "block_size": 16}).cache_path != dm.cache_path


def test_a_files_source_that_grows_gets_a_new_cache_entry(tokenizer, text_file, tmp_path):
    """Answers appended to a store (the Qwen recipes add to the quick run's) must be read, not the stale blocks."""
    store = tmp_path / "store.jsonl"
    store.write_text(text_file.read_text())
    kwargs = dict(sources=[{"kind": "files", "path": str(store)}], block_size=32, batch_size=2, val_tokens=64,
                  cache_dir=tmp_path)
    first = DistillDataModule(tokenizer, **kwargs)
    first.prepare_data()
    blocks = len(first.train_labels())
    os.utime(store, (1, 1))  # touched, same content: the same cache (a teacher cache keyed by it can take an hour)
    assert DistillDataModule(tokenizer, **kwargs).cache_path == first.cache_path
    with store.open("a") as f:
        f.write(text_file.read_text())
    grown = DistillDataModule(tokenizer, **kwargs)
    assert grown.cache_path != first.cache_path
    grown.prepare_data()
    assert len(grown.train_labels()) > blocks


def test_too_little_training_data_fails_clearly(tokenizer, text_file, tmp_path):
    dm = DistillDataModule(tokenizer, sources=[{"kind": "files", "path": str(text_file)}], block_size=32,
                           batch_size=10_000, val_tokens=64, cache_dir=tmp_path)
    with pytest.raises(ValueError, match="fewer than data.batch_size=10000"):
        dm.setup()


def test_pack_records_the_source_of_each_blocks_first_token():
    encoded = [([1, 2, 3], [1, 1, 1]), ([4, 5, 6, 7, 8], [1, 1, 1, 1, 1]), ([9, 10, 11, 12], [1, 1, 1, 1])]
    blocks = pack(encoded, block_size=4, doc_sources=[0, 1, 2])
    assert blocks["input_ids"] == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]
    assert blocks["source"] == [0, 1, 2]
    assert "source" not in pack(encoded, block_size=4)


def test_spread_picks_k_distinct_evenly_spaced_indices():
    from data.views import spread

    for n in range(1, 40):
        for k in range(1, n + 3):
            picked = spread(n, k)
            assert len(picked) == min(n, k) and sorted(set(picked)) == picked and picked[0] == 0
            assert all(0 <= i < n for i in picked)
            if k < n:  # no gap more than one index wider than another
                gaps = [b - a for a, b in zip(picked, picked[1:])] + [n - picked[-1]]
                assert max(gaps) - min(gaps) <= 1
    assert spread(5, None) == list(range(5))


def _two_sources(tmp_path):
    for name, word in (("code", "alpha"), ("medical", "omega")):
        docs = [f"{word}{i:03d} " + f"{word} beta gamma " * 6 for i in range(40)]
        (tmp_path / f"{name}.jsonl").write_text("\n".join(json.dumps({"text": d}) for d in docs))
    return [{"kind": "files", "path": str(tmp_path / f"{n}.jsonl"), "prompts_from": n} for n in ("code", "medical")]


def test_a_view_reads_one_sources_blocks_of_the_shared_cache(tokenizer, tmp_path):
    """data.train_sources / data.train_blocks select rows of the one packed dataset (so of its teacher cache):
    the cache entry is that of all sources, and the view's blocks are exactly those of its source."""
    sources = _two_sources(tmp_path)
    kwargs = dict(sources=sources, block_size=32, batch_size=2, val_tokens=256, cache_dir=tmp_path / "c")
    whole = DistillDataModule(tokenizer, **kwargs)
    whole.setup()
    view = DistillDataModule(tokenizer, **kwargs, train_sources=["medical"])
    assert view.cache_path == whole.cache_path
    view.setup()
    text = lambda rows: [tokenizer.decode(rows[i]["input_ids"]) for i in range(len(rows))]
    medical = text(view.train_set)
    assert medical and all("omega" in t for t in medical[1:]) and not any("alpha" in t for t in medical[1:])
    assert 0 < len(view.train_set) < len(whole.train_set)
    assert all("omega" in t for t in text(view.val_set))
    assert len(view.train_labels()) == len(view.train_set)
    curve = DistillDataModule(tokenizer, **kwargs, train_blocks=5)
    curve.setup()
    assert len(curve.train_set) == 5 and any("alpha" in t for t in text(curve.train_set)) \
        and any("omega" in t for t in text(curve.train_set))
    first = DistillDataModule(tokenizer, **kwargs, train_blocks=5, train_blocks_pick="first")
    first.setup()
    assert text(first.train_set) == text(whole.train_set)[:5]  # the blocks a partial teacher cache holds first
    with pytest.raises(Exception, match="train_blocks_pick"):
        DistillDataModule(tokenizer, **kwargs, train_blocks=5, train_blocks_pick="last")
    with pytest.raises(Exception, match="train_sources"):
        bad = DistillDataModule(tokenizer, **kwargs, train_sources=["legal"])
        bad.setup()


def test_a_view_of_a_cache_packed_before_views_finds_its_sources_again(tokenizer, tmp_path):
    sources = _two_sources(tmp_path)
    kwargs = dict(sources=sources, block_size=32, batch_size=2, val_tokens=256, cache_dir=tmp_path / "c")
    whole = DistillDataModule(tokenizer, **kwargs)
    whole.prepare_data()
    stats = json.loads((whole.cache_path / "stats.json").read_text())
    (whole.cache_path / "stats.json").write_text(json.dumps([{k: v for k, v in r.items() if k != "blocks"}
                                                             for r in stats]))
    view = DistillDataModule(tokenizer, **kwargs, train_sources=["code"])
    view.setup()
    assert json.loads((whole.cache_path / "stats.json").read_text()) == stats
    assert len(view.train_set) == stats[0]["blocks"]["train"][1] - stats[0]["blocks"]["train"][0]
