"""eval/speculate.py end to end on tiny models: results.json schema, markdown, plots, greedy identity."""

import json
import math

import pytest
from hydra import compose, initialize_config_dir
from transformers import AutoModelForCausalLM

from conftest import CONF
from data.prompts import encode_prompt, load_prompts
from eval.speculate import evaluate
from decode.core.trees import static_tree

SCHEMA = {"draft", "proposer", "domain", "gamma", "temperature", "n_prompts", "new_tokens", "alpha", "tau",
          "accepted_per_proposed", "per_position_accept", "target_tok_s", "spec_tok_s", "speedup", "cost_ratio_c",
          "theoretical_speedup", "hardware_expected_speedup", "greedy_identical", "accept_by_entropy",
          "speedup_ci", "alpha_ci", "per_prompt"}


def eval_cfg(tmp_path, target, drafts, *extra):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        # small and quick by default (tests that need the CPU kernels or longer gammas ask for them in `extra`)
        return compose("speculate", overrides=[f"target={target}", f"drafts=[{','.join(map(str, drafts))}]",
                                               "max_new_tokens=12", "n_prompts=2", f"out={tmp_path / 'eval'}",
                                               "domains=[general,medical]", "cpu_matmul=torch", "max_auto_gamma=3",
                                               *extra])


def test_results_json_schema_and_files(tmp_path, tiny_target_dir, tiny_draft_dir):
    records = evaluate(eval_cfg(tmp_path, tiny_target_dir, [tiny_draft_dir], "gamma=[1,3]", "temperature=[0,1.0]",
                                "draft_quant=int8"))
    assert len(records) == 2 * 2 * 2  # domains x gammas x temperatures
    saved = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert saved["records"] == json.loads(json.dumps(records))
    assert {"threads", "device", "torch", "transformers", "costs", "cpu_matmul", "provenance"} <= set(saved["conditions"])
    prov = saved["conditions"]["provenance"]
    assert len(prov["commit"]) == 40 and prov["draft_weights_sha256"][str(tiny_draft_dir)]
    assert saved["conditions"]["draft_quant"][str(tiny_draft_dir)]["quantized"]  # greedy stays identical below
    for r in records:
        assert SCHEMA <= set(r)
        assert len(r["per_position_accept"]) == r["gamma"]
        assert 0 <= r["alpha"] <= 1 and 1 <= r["tau"] <= r["gamma"] + 1
        lo, hi = r["speedup_ci"]
        assert lo <= hi and len(r["per_prompt"]["target_s"]) == r["n_prompts"] == 2
        # the interval is a bootstrap of the same per-prompt times the point estimate sums
        per_prompt = [t / s for t, s in zip(r["per_prompt"]["target_s"], r["per_prompt"]["spec_s"])]
        assert min(per_prompt) - 1e-9 <= lo and hi <= max(per_prompt) + 1e-9
        # the decode-phase speedup: the same sums with each prompt's prefill taken out of both times
        pp = r["per_prompt"]
        decode_t = sum(t - p for t, p in zip(pp["target_s"], pp["target_prefill_s"]))
        decode_s = sum(t - p for t, p in zip(pp["spec_s"], pp["spec_prefill_s"]))
        assert all(0 < p < t for t, p in zip(pp["spec_s"], pp["spec_prefill_s"]))
        assert r["decode_speedup"] == pytest.approx((sum(pp["spec_tokens"]) / decode_s)
                                                    / (sum(pp["target_tokens"]) / decode_t))
        assert r["decode_speedup_ci"][0] <= r["decode_speedup"] <= r["decode_speedup_ci"][1]
        if r["temperature"] == 0:
            assert r["greedy_identical"] is True
        else:
            assert r["greedy_identical"] is None
    assert (tmp_path / "eval" / "results.md").read_text().count("\n|") >= 9
    assert (tmp_path / "eval" / "acceptance_speedup_vs_gamma.png").stat().st_size > 1000
    assert (tmp_path / "eval" / "cost_model.png").stat().st_size > 1000  # expected speedup vs alpha, measured points
    assert not (tmp_path / "eval" / "results.partial.json").exists()  # the full report replaced it


def test_a_crash_mid_grid_keeps_the_records_measured_so_far(tmp_path, tiny_target_dir, tiny_draft_dir, monkeypatch,
                                                            caplog):
    import eval.speculate as speculate

    real, made = speculate.make_record, []

    def crash_on_third(*args, **kwargs):
        if len(made) == 2:
            raise KeyboardInterrupt
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(speculate, "make_record", crash_on_third)
    with pytest.raises(KeyboardInterrupt):
        evaluate(eval_cfg(tmp_path, tiny_target_dir, [tiny_draft_dir], "gamma=[1,2]", "draft_quant=none"))
    partial = json.loads((tmp_path / "eval" / "results.partial.json").read_text())
    assert partial["complete"] is False and [r["gamma"] for r in partial["records"]] == [1, 2]
    assert partial["records"] == json.loads(json.dumps(made)) and "costs" in partial["conditions"]
    assert not (tmp_path / "eval" / "results.json").exists()
    assert "results.partial.json" in caplog.text


def test_update_card_appends_measurements(tmp_path, tiny_target_dir, tiny_draft_dir):
    import shutil
    from eval.shared.card import write_card

    folder = tmp_path / "draft"
    shutil.copytree(tiny_draft_dir, folder)
    write_card(folder)
    assert "Not measured yet" in (folder / "README.md").read_text()
    (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    records = evaluate(eval_cfg(tmp_path, tiny_target_dir, [folder], "gamma=[2]", "update_card=true",
                                "draft_quant=int8", "draft_vocab=64", "cpu_matmul=auto"))
    card = (folder / "README.md").read_text()
    assert "Not measured yet" not in card
    assert all(f"{r['alpha']:.3f}" in card for r in records) and card.count("eval/speculate.py |") == len(records)
    assert "Provenance:" in card and "- eval/speculate.py: commit `" in card
    assert card.count("cpu_matmul=auto") == len(records)  # the decoder's CPU matmul layout is a condition
    assert card.count("draft weights int8 while decoding") == len(records)  # and so are the draft's int8 weights
    assert card.count("draft head over the first 64 token ids") == len(records)  # and its cut head
    assert all(r["greedy_identical"] for r in records)
    # transformers' assisted generation with the folder as it is drafts the card's gamma (its default would be 20)
    from transformers import GenerationConfig
    loaded = GenerationConfig.from_pretrained(folder)
    assert loaded.num_assistant_tokens == 2 and loaded.num_assistant_tokens_schedule == "constant"
    assert loaded.assistant_confidence_threshold == 0.0  # as measured: no early stop (transformers' default: 0.4)
    assert loaded.eos_token_id == 2 and "num_assistant_tokens = 2  # already this folder's default" in card
    saved = json.loads((tmp_path / "eval" / "results.json").read_text())["conditions"]
    assert saved["draft_vocab"][str(folder)] == {"size": 64, "restricted": True, "vocab_size": 320,
                                                 "order": "ids"}


@pytest.mark.integration  # slow (several seconds): kept out of the 2-minute fast suite
def test_wandb_offline_run_holds_the_table(tmp_path, tiny_target_dir, tiny_draft_dir, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    evaluate(eval_cfg(tmp_path, tiny_target_dir, [tiny_draft_dir], "gamma=[2]", "wandb.enabled=true"))
    runs = list((tmp_path / "eval" / "wandb").glob("offline-run-*"))
    assert runs and list(runs[0].glob("*.wandb"))


def test_self_draft_and_gamma_auto(tmp_path, tiny_target_dir):
    records = evaluate(eval_cfg(tmp_path, tiny_target_dir, [tiny_target_dir], "gamma=auto", "domains=[code]"))
    (r,) = records
    assert r["alpha"] == 1.0 and r["gamma_setting"].startswith("auto:")


def test_gamma_auto_chooses_on_tune_prompts_and_reports_test_prompts(tmp_path, tiny_target_dir, tiny_draft_dir,
                                                                     tokenizer, monkeypatch):
    import eval.speculate as speculate

    chosen_on, measured_on = [], []
    choose, interleave = speculate.choose_auto, speculate.timed_interleaved
    monkeypatch.setattr(speculate, "choose_auto", lambda cfg, t, d, tune, *a: chosen_on.extend(tune["prompts"])
                        or choose(cfg, t, d, tune, *a))
    monkeypatch.setattr(speculate, "timed_interleaved", lambda t, arms, prompts, *a, **k: measured_on.extend(prompts)
                        or interleave(t, arms, prompts, *a, **k))
    for temperature in ("0", "1.0"):
        chosen_on.clear(), measured_on.clear()
        (r,) = evaluate(eval_cfg(tmp_path, tiny_target_dir, [tiny_draft_dir], "gamma=auto", "domains=[code]",
                                 f"temperature=[{temperature}]", "n_prompts=3"))
        tune = [encode_prompt(tokenizer, p) for p in load_prompts("code", 3, split="tune")]
        test = [encode_prompt(tokenizer, p) for p in load_prompts("code", 3, split="test")]
        assert chosen_on == tune and measured_on == test and r["split"] == "test"
        assert not {tuple(p) for p in tune} & {tuple(p) for p in test}


@pytest.mark.integration  # slow (several seconds): kept out of the 2-minute fast suite
def test_greedy_gamma_auto_replays_every_rule_and_sampling_pilots(tmp_path, tiny_target_dir, tiny_draft_dir):
    greedy, sampled = evaluate(eval_cfg(tmp_path, tiny_target_dir, [tiny_draft_dir], "gamma=auto", "max_auto_gamma=4",
                                        "domains=[general]", "confidence_threshold=[0,0.1]", "temperature=[0]",
                                        "max_new_tokens=24")) + evaluate(
        eval_cfg(tmp_path, tiny_target_dir, [tiny_draft_dir], "gamma=auto", "max_auto_gamma=4", "domains=[general]",
                 "temperature=[1.0]", "max_new_tokens=24"))
    assert 1 <= greedy["gamma"] <= 4 and greedy["greedy_identical"]
    stop = f",stop<{greedy['confidence_threshold']:g}" if greedy["confidence_threshold"] else ""
    assert greedy["gamma_setting"] == f"auto:{greedy['gamma']}{stop}"
    assert sampled["gamma_setting"] == f"auto:{sampled['gamma']}" and sampled["confidence_threshold"] == 0.0
    assert greedy["auto_expected_speedup"] > 0 and sampled["auto_expected_speedup"] > 0


@pytest.mark.integration
def test_compiled_decoding_gives_the_same_tokens_and_is_recorded(tmp_path, tiny_target_dir, tiny_draft_dir):
    import shutil

    folder = tmp_path / "draft"
    shutil.copytree(tiny_draft_dir, folder)
    (r,) = evaluate(eval_cfg(tmp_path, tiny_target_dir, [folder], "gamma=[2]", "domains=[general]", "compile=true",
                             "update_card=true"))
    assert r["greedy_identical"] is True and 0 <= r["alpha"] <= 1
    saved = json.loads((tmp_path / "eval" / "results.json").read_text())["conditions"]
    assert saved["compile"]["enabled"] and saved["compile"]["max_len"] >= 12
    assert len(saved["costs"][str(folder)]["target_pass_s"]) == 3  # compiled: the gammas asked for, not 1..8
    assert "compiled passes on static caches" in (folder / "README.md").read_text()


def test_confidence_threshold_sweep_records_and_expected_speedup(tmp_path, tiny_target_dir, tiny_draft_dir):
    from decode.core.metrics import replayed_speedup

    records = evaluate(eval_cfg(tmp_path, tiny_target_dir, [tiny_draft_dir], "gamma=[1,3]", "domains=[general]",
                                "confidence_threshold=[0,0.1]", "max_new_tokens=24"))
    one, fixed, stopped = records  # a threshold cannot change a one-token draft: gamma=1 runs once
    assert (one["gamma"], one["confidence_threshold"], fixed["gamma"], stopped["gamma"]) == (1, 0.0, 3, 3)
    assert (fixed["confidence_threshold"], stopped["confidence_threshold"]) == (0.0, 0.1)
    assert fixed["mean_drafted"] > stopped["mean_drafted"] >= 1  # the threshold cut some drafts short
    assert fixed["greedy_identical"] and stopped["greedy_identical"]
    assert 0 < stopped["hardware_expected_speedup"] and 0 < stopped["theoretical_speedup"]
    assert "| 0.100 |" in (tmp_path / "eval" / "results.md").read_text()
    # for fixed-length drafts, replaying the cost model on the steps is Leviathan's formula with tau for alpha's part
    steps = [(3, 3), (3, 0), (3, 1), (2, 2)]  # the last step cut short by max_new_tokens
    assert replayed_speedup(steps, 0.1, [1.0] * 4) == pytest.approx((4 + 1 + 2 + 3) / (3 * 1.3 + 1.2))
    assert replayed_speedup(steps, 0.1, [1.0, 1.5, 2.0, 2.5]) == pytest.approx(10 / (3 * (0.3 + 2.5) + 0.2 + 2.0))


def test_bad_eval_settings_fail_before_work(tmp_path, tiny_target_dir, tiny_draft_dir):
    with pytest.raises(ValueError, match="gamma"):
        evaluate(eval_cfg(tmp_path, tiny_target_dir, [tiny_draft_dir], "gamma=[0]"))
    with pytest.raises(ValueError, match="temperature"):
        evaluate(eval_cfg(tmp_path, tiny_target_dir, [tiny_draft_dir], "temperature=[-1]"))
    with pytest.raises(ValueError, match="top_p"):
        evaluate(eval_cfg(tmp_path, tiny_target_dir, [tiny_draft_dir], "top_p=1.5"))
    with pytest.raises(ValueError, match="confidence_threshold"):
        evaluate(eval_cfg(tmp_path, tiny_target_dir, [tiny_draft_dir], "confidence_threshold=[1.0]"))
    with pytest.raises(ValueError, match="gamma=auto"):  # auto picks a threshold only for greedy decoding
        evaluate(eval_cfg(tmp_path, tiny_target_dir, [tiny_draft_dir], "gamma=auto", "confidence_threshold=[0,0.5]",
                          "temperature=[0,1.0]"))


def test_prompts(tokenizer, tmp_path, caplog):
    assert len(load_prompts("medical", 3)) == 3
    with pytest.raises(ValueError, match="Unknown domain"):
        load_prompts("astrology", 3)
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "hi"}\n{"messages": [{"role": "user", "content": "yo"}]}\n')
    with caplog.at_level("WARNING"):
        prompts = load_prompts("general", 5, str(f))  # no split field: both splits, with a warning
    assert prompts[0] == "hi" and isinstance(prompts[1], list) and "no \"split\" field" in caplog.text
    f.write_text('{"prompt": "a", "split": "tune"}\n{"prompt": "b", "split": "test"}\n{"prompt": "c", "split": "test"}\n')
    assert load_prompts("general", 5, str(f), "tune") == ["a"]
    assert load_prompts("general", 5, str(f)) == ["b", "c"]  # test by default
    f.write_text('{"prompt": "a", "split": "train"}\n')
    with pytest.raises(ValueError, match=r"p.jsonl line 1: \"split\" must be tune or test"):
        load_prompts("general", 5, str(f))
    with pytest.raises(ValueError, match="missing.jsonl does not exist"):
        load_prompts("general", 5, str(tmp_path / "missing.jsonl"))
    ids = encode_prompt(tokenizer, "hello")
    assert tokenizer.decode(ids).endswith("<|im_start|>assistant\n")


def test_compare_runs_from_local_folders(tmp_path):
    from eval.compare import compare

    for i, loss in enumerate(["forward_kl", "tvd"]):
        run = tmp_path / "runs" / f"r{i}"
        (run / "csv").mkdir(parents=True)
        after = {"val/expected_accept": 0.2 + i / 10, "val/top1_agree": 0.3, "val/kl": 3.0 - i, "val/alpha": 0.25}
        (run / "summary.json").write_text(json.dumps({
            "run_name": f"run-{loss}", "steps": 4, "seconds": 1.5, "before": after, "after": after,
            "setup": {"domain": "general", "loss": loss, "draft": "truncated", "draft_layers": 4, "lora": i == 1}}))
        (run / "csv" / "metrics.csv").write_text("step,train/loss,val/expected_accept,val/kl\n0,5.0,,\n"
                                                 f"1,,{0.1 + i / 10},4.0\n3,,{0.2 + i / 10},{3.0 - i}\n")
    files = compare([str(tmp_path / "runs" / "*")], tmp_path / "out")
    md = files["markdown"].read_text()
    assert "run-forward_kl" in md and "run-tvd" in md and "truncated 4L +LoRA" in md and "0.300" in md
    assert "<table>" in files["html"].read_text() and "data:image/png;base64," in files["html"].read_text()
    assert files["curves"].stat().st_size > 0 and files["final"].stat().st_size > 0
    assert len(json.loads(files["json"].read_text())["rows"]) == 2
    with pytest.raises(FileNotFoundError, match="summary.json"):
        compare([str(tmp_path)], tmp_path / "out2")


def test_compare_shows_the_off_the_shelf_draft_as_the_reference(tmp_path):
    from eval.compare import compare

    for i, domain in enumerate(["medical", "medical", "code"]):
        run = tmp_path / "runs" / f"r{i}"
        run.mkdir(parents=True)
        before = {"val/expected_accept": 0.6 + i / 100, "val/top1_agree": 0.5}
        (run / "summary.json").write_text(json.dumps({
            "run_name": f"lora-{i}", "steps": 10, "seconds": 2.0, "before": before,
            "after": {"val/expected_accept": 0.7, "val/top1_agree": 0.6},
            "setup": {"domain": domain, "loss": "forward_kl", "draft": "pretrained", "draft_layers": 24, "lora": True,
                      "draft_from": "embedded:qwen2.5-coder-0.5b-instruct"}}))
    rows = json.loads(compare([str(tmp_path / "runs" / "*")], tmp_path / "out")["json"].read_text())["rows"]
    refs = [r for r in rows if "(reference)" in r[0]]
    assert [r[1] for r in refs] == ["medical", "code"] and rows[:2] == refs  # one per domain, listed first
    assert refs[0][0].startswith("embedded:qwen2.5-coder-0.5b-instruct off the shelf") and refs[0][6] == 0.6
    assert len(rows) == 5


def test_card_snippets_use_the_best_measured_gamma():
    from eval.shared.card import render

    def ev(gamma, speedup):
        return {"domain": "general", "gamma": gamma, "temperature": 0.0, "alpha": 0.3, "tau": 1.3,
                "speedup": speedup, "device": "cpu"}

    unmeasured = render({"target": "t"}, "export")
    assert unmeasured.startswith("# export: ") and "not a measurement" in unmeasured
    assert '"num_speculative_tokens": 4' in unmeasured and "--speculative-num-draft-tokens 5" in unmeasured

    card = render({"target": "t", "run_name": "distill-x", "evaluations": [ev(1, 1.04), ev(3, 1.21), ev(2, 0.97)]}, "export")
    assert card.startswith("# distill-x: ")
    assert "gamma = 3" in card and "1.21x" in card and "num_assistant_tokens = 3" in card
    assert '"num_speculative_tokens": 3' in card and "--speculative-num-steps 3" in card
    assert "--speculative-num-draft-tokens 4" in card and "No measurement above pays" not in card

    slower = render({"target": "t", "evaluations": [ev(1, 0.91), ev(2, 0.85)]}, "export")
    assert "gamma = 1" in slower and "No measurement above pays" in slower
    assert "assistant_confidence_threshold = 0  # transformers' default 0.4" in card  # fixed gamma, as measured

    stopped = render({"target": "t", "evaluations": [ev(1, 1.04), {**ev(4, 1.12), "confidence_threshold": 0.6}]},
                     "export")
    assert "| <= 4, stop < 0.6 |" in stopped and "up to 4 tokens" in stopped
    assert "assistant_confidence_threshold = 0.6" in stopped and '"num_speculative_tokens": 4' in stopped


def test_card_names_the_domains_where_speculation_lost():
    from eval.shared.card import best_by_domain, losing_domains, render

    def ev(domain, gamma, speedup):
        return {"domain": domain, "gamma": gamma, "temperature": 0.0, "alpha": 0.3, "tau": 1.3, "speedup": speedup}

    evals = [ev("general", 1, 1.10), ev("code", 1, 0.95), ev("general", 2, 1.12), ev("code", 2, 0.86)]
    best = best_by_domain(evals)
    assert list(best) == ["general", "code"] and best["general"]["gamma"] == 2 and best["code"]["speedup"] == 0.95
    assert "code (best 0.95x)" in losing_domains(evals) and "general" not in losing_domains(evals)
    assert "+domain=<domain>" in render({"target": "t", "evaluations": evals}, "export")
    assert losing_domains([ev("general", 1, 1.1), ev("medical", 1, 1.02)]) == ""  # all paid
    everywhere = [ev("general", 1, 0.9), ev("code", 1, 0.8)]  # none paid: serving_gamma's own sentence says so
    assert losing_domains(everywhere) == "" and "No measurement above pays" in render({"evaluations": everywhere}, "x")


def test_prompt_lookup_alone_and_before_the_draft(tmp_path, tiny_target_dir, tiny_draft_dir):
    records = evaluate(eval_cfg(tmp_path, tiny_target_dir, [tiny_draft_dir], "gamma=[3]", "domains=[code]",
                                "proposers=[draft,heuristic,lookup,lookup+draft]"))
    by = {r["proposer"]: r for r in records}
    assert set(by) == {"draft", "heuristic", "lookup", "lookup+draft"} and by["lookup"]["draft"] == "prompt lookup"
    assert 0 < by["heuristic"]["mean_drafted"] <= 3  # the last step of a budget may draft nothing
    assert all(r["greedy_identical"] is True for r in records)
    assert by["draft"]["lookup_step_fraction"] == 0.0 and 0 <= by["lookup"]["lookup_step_fraction"] <= 1
    assert "lookup" in (tmp_path / "eval" / "results.md").read_text()


def test_predicted_gamma_trees_and_the_router_are_arms_of_the_same_run(tmp_path, tiny_target_dir, tiny_draft_dir):
    records = evaluate(eval_cfg(tmp_path, tiny_target_dir, [tiny_draft_dir], "gamma=[2]", "domains=[code]",
                                "proposers=[draft,predicted,tree,dynamic_tree,router]", "tree.branching=[2,1]",
                                "tree.depth=3", "tree.width=2", "router.max_gamma=3", "max_auto_gamma=4",
                                "auto_off=true"))  # every policy wrapped in the router's auto-off
    by = {r["proposer"]: r for r in records}
    assert all(r["auto_off"] for r in records)
    assert set(by) == {"draft", "predicted", "tree", "dynamic_tree", "router"} and by["router"]["draft"] == "router"
    assert by["predicted"]["gamma_setting"] == "predicted≤4" and by["predicted"]["mean_drafted"] <= 4
    assert by["tree"]["gamma"] == 2 and by["dynamic_tree"]["gamma"] == 3
    assert all(r["greedy_identical"] is True for r in records)
    assert all(math.isfinite(r["hardware_expected_speedup"]) for r in records)
    assert 0 < by["tree"]["mean_drafted"] <= 2  # a tree's drafted length is its depth


def test_policy_auto_chooses_on_tune_prompts_and_writes_the_policy_into_the_export(tmp_path, tiny_target_dir,
                                                                                   tiny_draft_dir):
    import shutil

    draft = shutil.copytree(tiny_draft_dir, tmp_path / "draft")
    records = evaluate(eval_cfg(tmp_path, tiny_target_dir, [str(draft)], "gamma=[1,2]", "domains=[code]",
                                "proposers=[draft,lookup]", "policy=auto"))
    tuned = json.loads((tmp_path / "eval" / "tune" / "results.json").read_text())["records"]
    assert len(tuned) == 4 and {r["split"] for r in tuned} == {"tune"}  # every policy ran on the tune prompts
    assert len(records) == 1 and records[0]["split"] == "test"  # only the chosen one on the test prompts
    best = max(tuned, key=lambda r: r["speedup"])
    assert records[0]["arm"] == best["arm"]  # one domain, one temperature: the geometric mean is the speedup
    policy = json.loads((draft / "draftsmith.json").read_text())["serving_policy"]
    assert policy["candidate"]["proposer"] == best["proposer"] and policy["test"][0]["speedup"] == records[0]["speedup"]
    assert policy["proposer"] == (best["proposer"] if best["speedup"] > 1 else "none")
    assert "Serving policy" in (draft / "README.md").read_text()
    assert json.loads((draft / "generation_config.json").read_text())["draftsmith_policy"]["proposer"] == \
        policy["proposer"]


def test_policy_test_all_measures_every_policy_on_test_prompts_and_flags_the_choice(tmp_path, tiny_target_dir,
                                                                                    tiny_draft_dir):
    records = evaluate(eval_cfg(tmp_path, tiny_target_dir, [tiny_draft_dir], "gamma=[1,2]", "domains=[code]",
                                "proposers=[draft,lookup]", "policy=auto", "policy_test=all"))
    tuned = json.loads((tmp_path / "eval" / "tune" / "results.json").read_text())["records"]
    assert {r["split"] for r in records} == {"test"} and len(records) == len(tuned) == 4  # every policy, test prompts
    chosen = [r for r in records if r.get("policy_auto")]
    assert len(chosen) == 1 and chosen[0]["arm"] == max(tuned, key=lambda r: r["speedup"])["arm"]
    saved = json.loads((tmp_path / "eval" / "results.json").read_text())["records"]
    assert [r.get("policy_auto", False) for r in saved] == [r.get("policy_auto", False) for r in records]


def test_mark_choice_flags_only_the_chosen_arms_records():
    from eval.policy import mark_choice

    recs = [{"arm": ["draft", "d", "auto", 0.5], "proposer": "draft", "domain": "code"},
            {"arm": ["draft", "d", 3, 0.0], "proposer": "draft", "domain": "code"},
            {"arm": ["draft", "d", "auto", 0.5], "proposer": "draft", "domain": "general"},
            {"proposer": "transformers lookup", "domain": "code"}]
    marked = mark_choice(recs, ["draft", "d", "auto", 0.5])
    assert [bool(r.get("policy_auto")) for r in marked] == [True, False, True, False]
    assert "policy_auto" not in recs[0]  # pure


def test_choose_policy_takes_the_best_geometric_mean_over_cells():
    from eval.policy import choose_policy

    def rec(arm, domain, speedup):
        return {"arm": arm, "domain": domain, "temperature": 0.0, "speedup": speedup, "proposer": arm[0]}

    a, b, c = ["draft", "d", 1, 0.0], ["lookup", None, 3, 0.0], ["tree", "d", 4, 0.0]
    records = [rec(a, "code", 1.5), rec(a, "general", 0.7), rec(b, "code", 1.1), rec(b, "general", 1.05),
               rec(c, "code", 3.0)]  # c is missing a cell: not a candidate
    arm, score = choose_policy(records)
    assert arm == b and score == pytest.approx((1.1 * 1.05) ** 0.5)


@pytest.mark.parametrize("extra,match", [("proposers=[beam]", "proposers must be"),
                                         ("policy=best", "policy must be"),
                                         ("policy=auto policy_test=some", "policy_test must be"),
                                         ("policy_test=all", "add policy=auto"),
                                         ("lookup.min_n=0", "min_n <= max_n"),
                                         ("proposers=[dynamic_tree] compile=true", "dynamic KV caches"),
                                         ("proposers=[router] router.memory=0", "router needs"),
                                         ("proposers=[lookup]", "gamma=auto")])
def test_bad_proposer_settings_fail_before_loading(tmp_path, extra, match):
    cfg = eval_cfg(tmp_path, "no-such-target", ["no-such-draft"], *extra.split(),
                   "gamma=[auto]" if "[lookup]" in extra else "gamma=[1]")
    with pytest.raises(ValueError, match=match):
        evaluate(cfg)


def test_card_says_when_the_serving_target_is_not_the_weights_measured():
    from eval.shared.card import render, serving_target_of

    target, caveat = serving_target_of("embedded:smollm2-135m-instruct")
    assert target == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert "NOT the weights measured" in caveat and "b179c9523d0e6a0f" in caveat
    assert serving_target_of("/models/my-target") == ("/models/my-target", "")
    card = render({"target": "embedded:smollm2-135m-instruct"}, "x")
    assert caveat in card and 'from_pretrained("HuggingFaceTB/SmolLM2-135M-Instruct")' in card
    assert "NOT the weights measured" not in render({"target": "/models/my-target"}, "x")


@pytest.mark.integration  # slow (several seconds): kept out of the 2-minute fast suite
def test_transformers_baselines_run_in_the_same_interleaved_run(tmp_path, tiny_target_dir, tiny_draft_dir):
    """transformers=[assisted,lookup]: stock assisted generation and prompt lookup are timed beside ours, each over
    transformers' own plain generate() on the same prompts (one engine); greedy rows reproduce the target's output;
    tau counts tokens per target pass; every record names its engine and its tok/s."""
    records = evaluate(eval_cfg(tmp_path, tiny_target_dir, [tiny_draft_dir], "gamma=[2]", "temperature=[0,1.0]",
                                "domains=[code]", "transformers=[assisted,lookup]", "cpu_matmul=rows_first"))
    hf = [r for r in records if r["proposer"].startswith("transformers")]
    assert sorted(r["proposer"] for r in hf) == ["transformers assisted", "transformers assisted",
                                                 "transformers lookup", "transformers lookup",
                                                 "transformers plain", "transformers plain"]
    assert {r["engine"] for r in hf} == {"transformers"} and {r["engine"] for r in records} == {"draftsmith",
                                                                                                "transformers"}
    for r in hf:
        assert r["gamma"] == "default" and math.isnan(r["alpha"]) and r["target_passes"] > 0
        assert 1 <= r["tau"] <= r["new_tokens"] and r["speedup_ci"][0] <= r["speedup"] <= r["speedup_ci"][1]
        assert r["greedy_identical"] is (True if r["temperature"] == 0 else None)
        assert math.isnan(r["decode_speedup"])  # transformers' generate() does not split its prefill out
        plain = next(o for o in hf if o["proposer"] == "transformers plain" and o["temperature"] == r["temperature"])
        assert r["target_tok_s"] == plain["tok_s"] and r["tok_s"] == r["spec_tok_s"]  # over transformers' own plain
    assert all(r["speedup"] == 1.0 for r in hf if r["proposer"] == "transformers plain")
    saved = json.loads((tmp_path / "eval" / "results.json").read_text().replace("NaN", "null"))
    assert len(saved["records"]) == len(records)
    assert "transformers assisted" in (tmp_path / "eval" / "results.md").read_text()
    with pytest.raises(ValueError, match="assisted and/or lookup"):
        evaluate(eval_cfg(tmp_path, tiny_target_dir, [tiny_draft_dir], "transformers=[medusa]"))
    only_lookup = evaluate(eval_cfg(tmp_path, tiny_target_dir, [tiny_draft_dir], "gamma=[2]", "domains=[code]",
                                    "transformers=[assisted,lookup]", "transformers_drafts=[]"))
    assert [r["proposer"] for r in only_lookup if r["proposer"].startswith("transformers")] == ["transformers plain",
                                                                                            "transformers lookup"]
    with pytest.raises(ValueError, match="transformers_drafts must name standalone drafts"):
        evaluate(eval_cfg(tmp_path, tiny_target_dir, [tiny_draft_dir], "transformers=[assisted]",
                          "transformers_drafts=[not/a/listed/draft]"))


def test_stock_linears_undo_the_fast_layout_only_inside_the_block(tiny_target_dir):
    from decode.kernels.fast_linear import FastLinear, fast_cpu_linears
    from eval.hf_arms import stock_linears

    model = AutoModelForCausalLM.from_pretrained(tiny_target_dir)
    with fast_cpu_linears([model], 4, "rows_first"):
        count = sum(isinstance(m, FastLinear) for m in model.modules())
        assert count > 0
        with stock_linears(model):
            assert not any(isinstance(m, FastLinear) for m in model.modules())
        assert sum(isinstance(m, FastLinear) for m in model.modules()) == count


def test_tree_branching_auto_chooses_a_shape_on_tune_prompts_and_decodes_with_it(tmp_path, tiny_target_dir,
                                                                                tiny_draft_dir):
    records = evaluate(eval_cfg(tmp_path, tiny_target_dir, [tiny_draft_dir], "gamma=[2]", "domains=[code]",
                                "proposers=[draft,tree]", "tree.branching=auto", "tree.max_depth=3",
                                "tree.max_nodes=8", "temperature=[0,1.0]"))
    trees = [r for r in records if r["proposer"] == "tree"]
    assert len(trees) == 2 and trees[0]["tree_choice"] == trees[1]["tree_choice"]  # one shape for both temperatures
    shape = trees[0]["tree_choice"]["branching"]
    assert 1 <= len(shape) <= 3 and len(static_tree(shape)) - 1 <= 8
    assert all(r["gamma_setting"] == "auto:" + "-".join(map(str, shape)) and r["gamma"] == len(shape) for r in trees)
    assert trees[0]["greedy_identical"] is True and trees[0]["tree_acceptance"]["steps"] > 0
    assert trees[0]["tree_choice"]["expected_speedup"] >= trees[0]["tree_choice"]["best_chain_expected_speedup"] * 0.9
