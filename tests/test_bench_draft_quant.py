"""scripts/bench_draft_quant.py: float, int8 and int4 copies of a draft judged on the target's own greedy path."""

import importlib.util
import json

import pytest
from hydra import compose, initialize_config_dir

from conftest import CONF, REPO

spec = importlib.util.spec_from_file_location("bench_draft_quant", REPO / "scripts" / "bench_draft_quant.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def quant_cfg(tmp_path, target, drafts, *extra):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("bench_draft_quant", overrides=[
            f"target={target}", f"drafts=[{','.join(map(str, drafts))}]", "n_prompts=2", "max_new_tokens=10",
            "repeats=2", "cpu_matmul=torch", "draft_vocab=null", f"out={tmp_path / 'quant'}", *extra])


def test_the_target_as_its_own_draft_agrees_everywhere_and_each_format_is_reported(tmp_path, tiny_target_dir,
                                                                                  tiny_draft_dir):
    rows = bench.run(quant_cfg(tmp_path, tiny_target_dir, [tiny_target_dir, tiny_draft_dir]))
    assert [r["variant"].split(", ")[-1] for r in rows] == ["float", "int8", "int4"] * 2
    same = rows[0]  # float weights of the target itself: its argmax is the next token of its own greedy path
    assert same["agreement"] == 1.0 and same["judged_tokens"] == 2 * 10
    for r in rows:
        assert 0.0 <= r["agreement_ci"][0] <= r["agreement"] <= r["agreement_ci"][1] <= 1.0
        assert r["c"] > 0 and r["c_ci"][0] <= r["c"] <= r["c_ci"][1] and r["expected_speedup"] > 0
    assert rows[1]["agreement"] >= 0.8  # int8 weights of the target: nearly always the same argmax
    saved = json.loads((tmp_path / "quant" / "results.json").read_text())
    assert saved["records"] == rows and saved["conditions"]["n_prompts"] == 2
    # paired by prompt: each draft's int8 and int4 against its float, then the second draft against the first per format
    assert [(p["a"].split(", ")[-1], p["b"].split(", ")[-1]) for p in saved["paired"]] == \
        [("int8", "float"), ("int4", "float")] * 2 + [("float", "float"), ("int8", "int8"), ("int4", "int4")]
    by_name = {r["variant"]: r for r in rows}
    for p in saved["paired"]:  # the same paths for every variant: the paired difference is the difference in agreement
        assert p["difference"] == pytest.approx(by_name[p["a"]]["agreement"] - by_name[p["b"]]["agreement"])
        assert p["stderr"] >= 0
    text = (tmp_path / "quant" / "results.md").read_text()
    assert "| draft, weights |" in text and "paired by prompt" in text


def test_paired_comparisons_remove_what_prompts_share():
    def row(name, agreed):
        return {"variant": name, "agreed": agreed, "judged": [10, 10, 10]}
    # B agrees 1 more token than A on every prompt, however hard the prompt: the difference is exact, no spread
    rows = [row("a, float", [2, 5, 9]), row("a, int4", [1, 4, 8]), row("b, float", [3, 6, 10]), row("b, int4", [2, 5, 9])]
    paired = bench.paired_comparisons(rows, n_modes=2)
    assert [(p["a"], p["b"]) for p in paired] == [("a, int4", "a, float"), ("b, int4", "b, float"),
                                                  ("b, float", "a, float"), ("b, int4", "a, int4")]
    assert [p["difference"] for p in paired] == pytest.approx([-1 / 10, -1 / 10, 1 / 10, 1 / 10])
    assert all(p["stderr"] == pytest.approx(0) for p in paired)


@pytest.mark.parametrize("extra, message", [("modes=[auto]", "modes must list"), ("modes=[int2]", "modes must list"),
                                            ("gamma=0", "must be >= 1")])
def test_bad_settings_fail_before_loading_anything(tmp_path, extra, message):
    with pytest.raises(ValueError, match=message):
        bench.run(quant_cfg(tmp_path, "missing-target", ["missing-draft"], extra))


def test_median_interval_brackets_the_median():
    lo, hi = bench.median_ci([0.1, 0.2, 0.3, 0.4, 0.5], 0.95)
    assert lo <= 0.3 <= hi and 0.1 <= lo and hi <= 0.5


def test_feature_drafts_are_refused_with_the_fix(tmp_path):
    eagle = tmp_path / "eagle-export"
    eagle.mkdir()
    (eagle / "draftsmith.json").write_text('{"draft_kind": "eagle"}')
    with pytest.raises(ValueError, match="feature drafts.*eval/speculate.py draft_quant"):
        bench.run(quant_cfg(tmp_path, "missing-target", [eagle]))
