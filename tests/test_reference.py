"""Each draft against a reference draft in one run (eval/reference.py): the paired speed ratio and its interval."""

import pytest

from eval.reference import add_reference, over_reference, reference_table, setting_of


def rec(draft, spec_s, alpha, tokens=10, gamma_setting="auto:4", temperature=0.0, domain="medical"):
    n = len(spec_s)
    return {"engine": "draftsmith", "draft": draft, "proposer": "draft", "domain": domain, "temperature": temperature,
            "confidence_threshold": 0.0, "auto_off": False, "gamma": int(gamma_setting.split(":")[-1]),
            "gamma_setting": gamma_setting, "alpha": alpha, "speedup": 1.0,
            "per_prompt": {"spec_s": spec_s, "spec_tokens": [tokens] * n, "target_s": [2.0] * n}}


def test_the_ratio_is_the_speed_of_one_over_the_other_on_the_same_prompts():
    ref, mine = rec("0.5b", [2.0, 4.0, 1.0], 0.70), rec("trained", [1.0, 2.0, 0.5], 0.78)
    o = over_reference(mine, ref)
    assert o["speedup_ratio"] == pytest.approx(2.0) and o["speedup_ratio_ci"] == pytest.approx([2.0, 2.0])
    assert o["alpha_diff"] == pytest.approx(0.08) and o["draft"] == "0.5b"
    noisy = rec("trained", [1.0, 4.0, 0.5], 0.75)  # one prompt no faster: the interval widens and contains it
    lo, hi = over_reference(noisy, ref)["speedup_ratio_ci"]
    assert lo < over_reference(noisy, ref)["speedup_ratio"] < hi and lo >= 1.0


def test_records_are_paired_by_setting_and_gamma_auto_picks_may_differ():
    records = [rec("0.5b", [2.0, 2.0], 0.7), rec("trained", [1.0, 1.0], 0.8, gamma_setting="auto:5"),
               rec("0.5b", [2.0, 2.0], 0.6, temperature=1.0), rec("trained", [4.0, 4.0], 0.5, temperature=1.0),
               rec("trained", [1.0, 1.0], 0.8, domain="code")]  # no reference for code: left alone
    assert add_reference(records, "0.5b") == 2
    assert records[1]["over_reference"]["speedup_ratio"] == pytest.approx(2.0)
    assert records[3]["over_reference"]["speedup_ratio"] == pytest.approx(0.5)
    assert "over_reference" not in records[0] and "over_reference" not in records[4]
    assert setting_of(records[0]) == setting_of(records[1])
    table = reference_table(records)
    assert table.count("\n") == 3 and "**2.00x**" in table and "**0.50x**" in table


def test_prompts_must_match():
    with pytest.raises(ValueError, match="same prompts"):
        over_reference(rec("a", [1.0], 0.5), rec("b", [1.0, 2.0], 0.5))


def test_wandb_shows_the_off_the_shelf_draft_as_the_reference():
    from eval.shared.tracking import eval_summary
    from train.loggers import reference_summary

    records = [{**rec("embedded:0.5b", [2.0, 2.0], 0.7), "tau": 2.1}, {**rec("outputs/run/export", [1.0, 1.0], 0.8), "tau": 2.4}]
    assert add_reference(records, "embedded:0.5b") == 1
    logged = eval_summary(records)
    assert logged["embedded:0.5b/medical/g4/T0.0/reference"] is True
    assert logged["export/medical/g4/T0.0/speedup_over_reference"] == pytest.approx(2.0)
    assert logged["export/medical/g4/T0.0/alpha_over_reference"] == pytest.approx(0.1)
    assert "export/medical/g4/T0.0/reference" not in logged
    # training: a run that starts from a pretrained draft taken whole logs that draft, before training, as reference/*
    run = {"setup": {"draft": "pretrained", "draft_from": "embedded:0.5b"}, "before": {"test/alpha": 0.7},
           "after": {"test/alpha": 0.8}}
    assert reference_summary(run) == {"reference/test/alpha": 0.7, "reference/draft": "embedded:0.5b off the shelf"}
    assert reference_summary({**run, "setup": {"draft": "layers"}}) == {}  # a draft cut from the target: none


def test_choose_names_the_fastest_and_says_when_the_runner_up_is_a_tie():
    from eval.reference import choice_table, choose

    def cand(draft, spec_s, speedup, alpha):
        return {**rec(draft, spec_s, alpha, gamma_setting="3"), "speedup": speedup, "speedup_ci": [speedup - 0.1, speedup + 0.1]}

    ref = cand("0.5b", [2.0, 2.0, 2.0, 2.0], 1.5, 0.68)
    fast, close = cand("cut", [1.0, 1.2, 0.8, 1.0], 3.0, 0.59), cand("lora", [1.1, 1.0, 0.9, 1.05], 2.9, 0.72)
    other_t = {**cand("lora", [0.1] * 4, 9.0, 0.9), "temperature": 1.0}  # another setting: not a candidate
    choice = choose([ref, close, fast, other_t], "0.5b")
    assert choice["winner"] == "cut" and choice["tie"]
    assert [r["draft"] for r in choice["ranked"]] == ["cut", "lora"] and choice["ranked"][0]["over_winner"] is None
    assert choice["ranked"][0]["over_reference"]["speedup_ratio"] == pytest.approx(2.0)
    assert "a tie" in choice_table(choice) and "| winner |" in choice_table(choice)
    slow = cand("lora", [2.0, 2.4, 1.6, 2.0], 1.5, 0.72)  # half the winner's speed on every prompt
    resolved = choose([ref, fast, slow], "0.5b")
    assert not resolved["tie"] and resolved["ranked"][1]["over_winner"]["speedup_ratio_ci"][1] < 1.0
    with pytest.raises(ValueError, match="besides the reference"):
        choose([ref], "0.5b")
    with pytest.raises(ValueError, match="exactly one setting"):
        choose([fast], "0.5b")


def test_choose_draft_script_writes_the_choice_and_fails_clearly(tmp_path, capsys):
    import json

    from scripts.choose_draft import main

    records = [{**rec("0.5b", [2.0, 2.0], 0.7, gamma_setting="3"), "speedup": 1.5},
               {**rec("cut", [1.0, 1.0], 0.6, gamma_setting="3"), "speedup": 3.0}]
    add_reference(records, "0.5b")
    (tmp_path / "results.json").write_text(json.dumps({"conditions": {}, "records": records}))
    assert main([str(tmp_path / "results.json")]) == 0
    assert json.loads((tmp_path / "choice.json").read_text())["winner"] == "cut"
    assert "Chosen: cut" in (tmp_path / "choice.md").read_text()
    assert main([str(tmp_path / "missing.json")]) == 2 and "Fix: run" in capsys.readouterr().err
    (tmp_path / "results.json").write_text(json.dumps({"conditions": {}, "records": [rec("cut", [1.0], 0.6)]}))
    assert main([str(tmp_path / "results.json")]) == 2 and "reference_draft=" in capsys.readouterr().err
