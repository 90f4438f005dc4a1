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
    from eval.tracking import eval_summary
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
