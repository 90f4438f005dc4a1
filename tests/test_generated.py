"""Target-generated data: prompts from corpora, a resumable store, and training on it."""

import json

import pytest
from hydra import compose, initialize_config_dir

from conftest import CONF
from data.generated import EVERYDAY_TOPICS, PROMPT_SOURCES, TOPICS, append_records, domain_prompts, done_prompts, \
    settings_file
from data.prompts import DOMAINS, EVAL_TOPICS, evaluation_prompts
from train.teacher_data import generate_store


@pytest.mark.parametrize("domain", ["general", "everyday", "medical", "code"])
def test_domain_prompts_are_distinct_and_deterministic(domain):
    prompts = domain_prompts(domain, 50, seed=3)
    assert len(prompts) == 50 == len(set(prompts))
    assert prompts == domain_prompts(domain, 50, seed=3) != domain_prompts(domain, 50, seed=4)


def test_code_prompts_reach_2000_and_the_first_ones_stay_what_they_were():
    """Past the 677 function prompts come classes and methods of the same training-side modules; a domain's first
    prompts do not move when a tier is added (stores built from them stay valid)."""
    import random

    from data.generated import candidate_tiers

    functions, members = candidate_tiers("code")  # code_prompts(), then code_member_prompts() (parsed once a process)
    assert all(p.startswith("Write a Python function") for p in functions)
    alone = list(functions)
    random.Random(0).shuffle(alone)
    assert domain_prompts("code", len(functions)) == alone  # as before the second tier existed
    more = domain_prompts("code", 2000)
    assert len(set(more)) == 2000 and more[:len(functions)] == alone
    assert all(p.startswith(("Write a Python class", "Write the method")) for p in more[len(functions):])


def test_general_prompts_reach_2000_and_the_first_ones_stay_what_they_were():
    """Past the 976 general prompts come the everyday set's (other topics and question forms, general text too)."""
    import random

    from data.generated import candidate_tiers, everyday_prompts, general_prompts

    tiers = candidate_tiers("general")
    assert set(tiers[0]) == set(general_prompts()) and set(tiers[1]) == set(everyday_prompts())
    alone = list(tiers[0])
    random.Random(0).shuffle(alone)
    more = domain_prompts("general", 2000)
    assert len(set(more)) == 2000 and more[:len(alone)] == alone  # stores of the first 976 stay valid
    assert set(more[len(alone):]) <= set(tiers[1]) and len(alone) + len(tiers[1]) >= 2000


def test_training_prompts_never_overlap_evaluation_prompts():
    every_eval = {p for d in DOMAINS for p in evaluation_prompts(d)}
    for domain in PROMPT_SOURCES:
        assert not set(domain_prompts(domain, 100_000)) & every_eval
    topics = [{" ".join(t.split()) for t in kind} for kind in (TOPICS, EVERYDAY_TOPICS, EVAL_TOPICS)]
    assert not (topics[0] & topics[1] or topics[0] & topics[2] or topics[1] & topics[2])
    assert len(domain_prompts("everyday", 100_000)) >= 976  # +experiment=eagle_general's everyday stores
    with pytest.raises(ValueError, match="Unknown domain"):
        domain_prompts("astrology", 3)


def test_store_appends_and_survives_a_torn_line(tmp_path):
    store = tmp_path / "g.jsonl"
    append_records(store, [("q1", "a1"), ("q2", "a2")])
    with open(store, "a") as f:
        f.write('{"messages": [{"role": "user", "cont')  # killed mid-write
    assert done_prompts(store) == {"q1", "q2"}


def gen_cfg(tmp_path, target_dir, *extra):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("generate_data", overrides=["model/target=local", f"model.target.name_or_path={target_dir}",
                                                   "n_prompts=5", "batch_size=2", "max_new_tokens=6",
                                                   f"cache_dir={tmp_path}", *extra])


def test_generation_resumes_and_trains(tmp_path, tiny_target_dir):
    store = tmp_path / "generated" / "local" / "general.jsonl"
    first = domain_prompts("general", 5)
    append_records(store, [(first[0], "an answer written before the crash")])
    out = generate_store(gen_cfg(tmp_path, tiny_target_dir))
    assert out == store
    records = [json.loads(line) for line in store.read_text().splitlines()]
    assert len(records) == 5 and records[0]["messages"][1]["content"] == "an answer written before the crash"
    assert all(r["messages"][0]["role"] == "user" and r["messages"][1]["role"] == "assistant" for r in records)
    before = store.read_text()
    generate_store(gen_cfg(tmp_path, tiny_target_dir))  # nothing left to do
    assert store.read_text() == before

    from train.distill import train
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("distill", overrides=[
            "model/target=local", f"model.target.name_or_path={tiny_target_dir}", "model.draft.layers=[0]",
            "data=generated", "data.generate.n_prompts=5", "data.generate.max_new_tokens=6",  # the store as written
            "data.block_size=16", "data.val_tokens=16", "trainer.max_steps=2", "progress_bar=none",
            f"paths.output_dir={tmp_path / 'run'}", f"paths.cache_dir={tmp_path}", "spec_eval.enabled=false",
            "export.enabled=false"])
    assert cfg.data.sources[0].path == str(store) and cfg.data.name == "generated-general"
    assert train(cfg)["steps"] == 2


def generated_run_cfg(tmp_path, target_dir, *extra):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("distill", overrides=[
            "model/target=local", f"model.target.name_or_path={target_dir}", "model.draft.layers=[0]",
            "data.block_size=16", "data.val_tokens=16", "trainer.max_steps=2", "progress_bar=none",
            "data.generate.n_prompts=8", "data.generate.batch_size=4", "data.generate.max_new_tokens=12",
            "data.batch_size=2",
            f"paths.output_dir={tmp_path / 'run'}", f"paths.cache_dir={tmp_path}", "spec_eval.enabled=false",
            "export.enabled=false", *extra])


def test_default_data_answers_missing_prompts_before_training(tmp_path, tiny_target_dir):
    """The default data (the target's answers, greedy and sampled) needs no separate step: missing answers are
    generated first, each kind into its own store."""
    from train.distill import train

    cfg = generated_run_cfg(tmp_path, tiny_target_dir)
    greedy = tmp_path / "generated" / "local" / "general.jsonl"
    sampled = tmp_path / "generated" / "local" / "general-t1.jsonl"
    assert (cfg.data.store, cfg.data.sampled_store) == (str(greedy), str(sampled)) and not greedy.exists()
    assert train(cfg)["steps"] == 2
    assert done_prompts(greedy) == done_prompts(sampled) == set(domain_prompts("general", 8))
    assert json.loads(settings_file(greedy).read_text())["temperature"] == 0.0
    assert json.loads(settings_file(sampled).read_text())["temperature"] == 1.0
    answers = {store: [json.loads(line)["messages"][1]["content"] for line in store.read_text().splitlines()]
               for store in (greedy, sampled)}
    assert answers[greedy] != answers[sampled]
    summary = train(generated_run_cfg(tmp_path / "greedy", tiny_target_dir, "data=generated_greedy",
                                      f"paths.cache_dir={tmp_path}"))
    assert summary["steps"] == 2 and greedy.read_text().count("\n") == 8  # greedy only: nothing new was generated


def test_other_ranks_never_generate(tmp_path, tiny_target_dir, monkeypatch):
    from train.distill import train

    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(RuntimeError, match="scripts/generate_data.py"):
        train(generated_run_cfg(tmp_path, tiny_target_dir))
    with pytest.raises(ValueError, match="general.jsonl does not exist"):  # generation off and no store: named
        monkeypatch.delenv("LOCAL_RANK")
        train(generated_run_cfg(tmp_path, tiny_target_dir, "data.generate.enabled=false"))


def test_a_store_never_mixes_greedy_and_sampled_answers(tmp_path, tiny_target_dir, caplog):
    store = generate_store(gen_cfg(tmp_path, tiny_target_dir, "n_prompts=2"))
    assert json.loads(settings_file(store).read_text()) == {"temperature": 0.0, "top_p": None, "max_new_tokens": 6}
    with pytest.raises(ValueError, match=r"temperature=0.0 \(asked: 1.0\).*general-t1.jsonl"):
        generate_store(gen_cfg(tmp_path, tiny_target_dir, "n_prompts=4", "temperature=1.0"))
    assert len(done_prompts(store)) == 2  # nothing was added
    generate_store(gen_cfg(tmp_path, tiny_target_dir, "n_prompts=2", "temperature=1.0"))  # complete: only a warning
    assert "temperature=0.0 (asked: 1.0)" in caplog.text
    sampled = generate_store(gen_cfg(tmp_path, tiny_target_dir, "n_prompts=2", "temperature=1.0",
                                     f"out={tmp_path / 'general-t1.jsonl'}"))
    assert json.loads(settings_file(sampled).read_text())["temperature"] == 1.0 and len(done_prompts(sampled)) == 2


@pytest.mark.parametrize("quant", ["none", "int8"])
def test_the_speculative_engine_writes_the_targets_own_answers(tmp_path, tiny_target_dir, tiny_draft_dir, quant):
    """engine=speculative (our batched speculative decoder with a draft, its weights quantized or not): each answer
    is the target's greedy answer alone at batch 1, the same as the store would hold from target-only decoding."""
    from decode.core.speculative import NoProposer, generate
    from decode.models.loading import eos_token_ids, load_frozen, load_tokenizer

    out = generate_store(gen_cfg(tmp_path, tiny_target_dir, "engine=speculative",
                                 f"speculative.draft={tiny_draft_dir}", "speculative.gamma=2", "batch_size=3",
                                 f"speculative.draft_quant={quant}"))
    records = [json.loads(line)["messages"] for line in out.read_text().splitlines()]
    tokenizer, target = load_tokenizer(str(tiny_target_dir)), load_frozen(str(tiny_target_dir))
    for user, assistant in records:
        chat = tokenizer.apply_chat_template([user], tokenize=False, add_generation_prompt=True)
        ids = tokenizer(chat, add_special_tokens=False)["input_ids"]
        alone = generate(target, NoProposer(), ids, 0, 6, eos_token_ids=eos_token_ids(tokenizer, target)).tokens
        assert assistant["content"] == tokenizer.decode(alone, skip_special_tokens=True).strip()
    assert len(records) == 5


@pytest.mark.parametrize("engine", ["generate", "speculative"])
def test_prepacked_matmuls_answer_every_prompt_and_leave_the_models_as_they_were(tmp_path, tiny_target_dir,
                                                                                 tiny_draft_dir, engine):
    """cpu_matmul=prepacked: both engines answer with oneDNN's packed layout inside the run, plain layers after."""
    import torch.nn as nn

    from decode.models.loading import load_frozen, load_tokenizer

    target, tokenizer = load_frozen(str(tiny_target_dir)), load_tokenizer(str(tiny_target_dir))
    out = generate_store(gen_cfg(tmp_path, tiny_target_dir, f"engine={engine}", f"speculative.draft={tiny_draft_dir}",
                                 "cpu_matmul=prepacked"), target=target, tokenizer=tokenizer)
    assert len(done_prompts(out)) == 5
    assert all(type(m) is nn.Linear for m in target.modules() if isinstance(m, nn.Linear))


def test_a_new_store_starts_from_the_repositorys_store_written_the_same_way(tmp_path):
    from data.generated import done_prompts, seed_from_repo, settings_file

    greedy = {"temperature": 0.0, "top_p": None, "max_new_tokens": 128}
    kept = tmp_path / "stores" / "qwen" / "medical.jsonl"
    kept.parent.mkdir(parents=True)
    kept.write_text(json.dumps({"messages": [{"role": "user", "content": "a?"}, {"role": "assistant", "content": "A."}]})
                    + "\n")
    settings_file(kept).write_text(json.dumps(greedy))
    stores = tmp_path / "stores"
    assert not seed_from_repo(tmp_path / "c" / "x.jsonl", "qwen", "medical", {**greedy, "temperature": 1.0}, 0,
                              stores)  # sampled answers are not the kept greedy ones
    assert not seed_from_repo(tmp_path / "c" / "x.jsonl", "qwen", "medical", greedy, 1, stores)  # other prompts
    assert not seed_from_repo(tmp_path / "c" / "x.jsonl", "qwen", "code", greedy, 0, stores)  # no kept store
    assert not (tmp_path / "c" / "x.jsonl").exists()
    store = tmp_path / "c" / "medical.jsonl"
    assert seed_from_repo(store, "qwen", "medical", greedy, 0, stores)
    assert done_prompts(store) == {"a?"} and json.loads(settings_file(store).read_text()) == greedy
    store.write_text(store.read_text() * 2)
    assert not seed_from_repo(store, "qwen", "medical", greedy, 0, stores)  # an existing store is never replaced
    assert not seed_from_repo(kept, "qwen", "medical", greedy, 0, stores)  # the kept store itself
    assert not list(store.parent.glob(".*"))  # no temporaries left


class FakeVllm:
    """A stand-in for eval/vllm.VllmServer that answers what the tiny target's greedy generate() answers."""

    def __init__(self, target, calls):
        self.target, self.calls = target, calls

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.calls.append("stopped")

    def complete_batch(self, prompts, max_tokens, temperature, top_p, seed):
        import torch

        self.calls.append(len(prompts))
        out = []
        for ids in prompts:
            row = self.target.generate(torch.tensor([ids]), max_new_tokens=max_tokens, do_sample=False)
            out.append(row[0, len(ids):].tolist())
        return out


def test_the_vllm_engine_writes_the_same_store_as_transformers_generate(tmp_path, tiny_target_dir, monkeypatch):
    """engine=vllm: batches of token-id prompts to a server, its tokens decoded like the other engines' (here a
    fake server giving the same greedy tokens): byte-identical stores, resumable, the server stopped."""
    import train.vllm_answers
    from decode.models.loading import load_frozen

    reference = generate_store(gen_cfg(tmp_path / "ref", tiny_target_dir)).read_bytes()
    calls = []
    target = load_frozen(str(tiny_target_dir), dtype="float32")
    monkeypatch.setattr(train.vllm_answers, "vllm_server", lambda cfg, out: FakeVllm(target, calls))
    store = tmp_path / "generated" / "local" / "general.jsonl"
    first = domain_prompts("general", 5)
    written = reference.decode().splitlines(keepends=True)
    store.parent.mkdir(parents=True)
    store.write_text(written[0])  # one answer from before: four left, in batches of 2, 2 (the last one short)
    generate_store(gen_cfg(tmp_path, tiny_target_dir, "engine=vllm"))
    assert calls == [2, 2, "stopped"]
    assert store.read_bytes() == reference
    assert json.loads(written[0])["messages"][0]["content"] == first[0]
