"""The documentation a newcomer reads: every relative link resolves, the README stays an entrance (size), and the
generated results pages match the result files they are rendered from."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "bench" / "README.md",
        *sorted((REPO / "bench").glob("*/*/result.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(markdown: str) -> set[str]:
    """GitHub-style heading anchors: lower case, punctuation dropped, spaces to dashes."""
    out = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            text = line.lstrip("#").strip().lower()
            out.add(re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text)))
    return out


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+://|mailto:", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(target)
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved.read_text()):
            broken.append(target)
    assert not broken, f"{page.relative_to(REPO)}: broken links {broken}"


def test_readme_is_an_entrance_not_a_notebook():
    assert len((REPO / "README.md").read_bytes()) <= 16_000
    text = (REPO / "README.md").read_text()
    for needed in ("make demo", "make test", "eval/speculate.py", "docs/results.md"):
        assert needed in text


def test_generated_results_pages_are_up_to_date():
    run = subprocess.run([sys.executable, str(REPO / "scripts" / "results_page.py"), "--check"], capture_output=True,
                         text=True, cwd=REPO)
    assert run.returncode == 0, run.stderr


def test_results_renderer_refuses_a_result_without_its_command(tmp_path, monkeypatch):
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import results_page
    finally:
        sys.path.pop(0)
    bench = tmp_path / "bench"
    (bench / "decoding" / "x").mkdir(parents=True)
    (bench / "decoding" / "x" / "meta.json").write_text('{"title": "t", "date": "d", "commit": "c", "files": {}}')
    monkeypatch.setattr(results_page, "BENCH", bench)
    with pytest.raises(SystemExit, match="missing 'command'"):
        results_page.load_results()


def test_policy_table_has_one_row_per_policy_in_every_run_and_one_column_per_pair_and_domain(tmp_path):
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import results_page
    finally:
        sys.path.pop(0)

    def rec(arm, domain, speedup):
        return {"arm": arm, "domain": domain, "speedup": speedup, "speedup_ci": [speedup - 0.1, speedup + 0.1]}

    runs = []
    for name, domains, extra in (("a", ["general", "code"], [["tree", "d", 4, 0.0]]), ("b", ["code"], [])):
        folder = tmp_path / "decoding" / name
        folder.mkdir(parents=True)
        arms = [["draft", "d", 3, 0.0], ["draft", "d", "auto", 0.0], ["router", None, 6, 0.0]] + extra
        records = [rec(arm, d, 1.0 + i / 10) for d in domains for i, arm in enumerate(arms)]
        (folder / "results.json").write_text(json.dumps({"records": records}))
        runs.append({"dir": folder, "topic": "decoding", "commit": "abc", "policies": f"pair {name}",
                     "files": {"results.json": "speculate"}})
    block = results_page.policies_block(runs)
    table = [line for line in block.splitlines() if line.startswith("|")]
    assert table[0] == "| policy | pair a, general | pair a, code | pair b, code |"
    body = table[2:]
    assert len(body) == 3  # the tree ran in one pair only: not a row
    assert body[0].startswith("| chain, gamma=auto | 1.10x [1.00, 1.20] |")
    assert body[1].startswith("| chain, γ=3 | 1.00x [0.90, 1.10] |") and body[2].startswith("| router (")
    assert block.startswith(results_page.P_START) and block.endswith(results_page.P_END)


def test_results_index_is_short_and_archives_what_no_longer_describes_the_code(tmp_path):
    assert len((REPO / "docs" / "results.md").read_bytes()) <= 20_000
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import results_page
    finally:
        sys.path.pop(0)
    folder = tmp_path / "decoding" / "x"
    folder.mkdir(parents=True)
    rec = {"draft": "d", "domain": "code", "temperature": 0.0, "gamma": 3, "alpha": 0.5, "tau": 2.0, "speedup": 1.5,
           "target_tok_s": 4.0, "spec_tok_s": 6.0, "n_prompts": 8,
           "speedup_ci": [1.4, 1.6], "split": "test"}
    (folder / "results.json").write_text(json.dumps({"records": [rec], "conditions": {}}))
    meta = {"dir": folder, "topic": "decoding", "title": "t", "date": "2026-12-02", "commit": "abc", "command": "c",
            "files": {"results.json": "speculate"}}
    assert results_page.archived(meta) is None
    assert "**1.50x** [1.40, 1.60]" in results_page.figure(meta, {})
    assert "held-out" in results_page.archived({**meta, "date": "2026-11-30"})  # before the held-out prompt sets
    (folder / "results.json").write_text(json.dumps({"records": [{k: v for k, v in rec.items() if k != "split"}],
                                                   "conditions": {}}))
    assert results_page.archived(meta)  # prompts with no recorded split
    assert results_page.archived({**meta, "archived": "superseded by y"}) == "superseded by y"
    page = "\n".join(results_page.section({**meta, "archived": "superseded by y"}, {}))
    assert "**Archived**: superseded by y" in page and "Reproduce: `c`" in page


def test_a_result_with_tree_rows_says_what_the_width_bought():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import results_page
    finally:
        sys.path.pop(0)
    chain = {"draft": "d", "proposer": "draft", "domain": "code", "temperature": 0.0}
    tree = {**chain, "proposer": "tree", "tree_acceptance": {"steps": 4, "mean_nodes": 7.5, "reached_depth": [0.75, 0.5],
                                                             "rank_share": [0.8, 0.2], "beyond_first_choice": 0.1}}
    assert results_page.tree_lines({"records": [chain]}, {}) == []
    lines = results_page.tree_lines({"records": [chain, tree]}, {})
    assert lines[-1] == "| d, static token tree | code | 0 | 7.5 | 0.75 / 0.50 | 0.80 / 0.20 / 0.00 | 0.100 |"


def test_a_weight_format_result_shows_its_paired_differences_when_it_has_them():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import results_page
    finally:
        sys.path.pop(0)
    record = {"variant": "embedded:d, int4", "agreement": 0.6, "agreement_ci": [0.5, 0.7], "c": 0.2,
              "c_ci": [0.1, 0.3], "expected_speedup": 1.5, "gamma": 3}
    older = results_page.draft_quant_table({"records": [record]}, {})
    assert len(older) == 3 and "paired" not in "".join(older)  # results written before pairing render as before
    paired = {"a": "embedded:d, int4", "b": "embedded:d, float", "difference": -0.026, "stderr": 0.012}
    lines = results_page.draft_quant_table({"records": [record], "paired": [paired]}, {})
    assert lines[:3] == older and lines[-1] == "| embedded:d, int4 | embedded:d, float | -0.026 ± 0.012 |"


def test_an_acceptance_only_result_shows_alpha_and_no_speed(tmp_path):
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import results_page
    finally:
        sys.path.pop(0)
    record = {"draft": "d", "proposer": "draft", "domain": "code", "temperature": 0.0, "gamma": 3, "alpha": 0.41,
              "tau": 2.1, "accepted_per_proposed": 0.3, "greedy_identical": True, "speedup": 9.9, "target_tok_s": 1.0,
              "spec_tok_s": 9.9, "n_prompts": 8, "split": "test"}
    (tmp_path / "results.json").write_text(json.dumps({"records": [record], "conditions": {"repeats": 1}}))
    meta = {"dir": tmp_path, "title": "t", "date": "2026-12-07", "commit": "abc", "command": "run",
            "files": {"results.json": "alpha"}}
    page = "\n".join(results_page.section(meta, {}))
    assert "| d | code | 0 | 3 | 0.410 | 2.10 | 0.300 | True |" in page
    assert "9.9" not in page and "speculative decoding taking turns" not in page and "acceptance only" in page
    figure = results_page.figure(meta, {})
    assert "0.410" in figure and "acceptance only" in figure and "x" not in figure.split("**")[1]


def test_what_training_buys_takes_each_domain_and_temperature_from_the_draft_chosen_for_it(tmp_path, monkeypatch):
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import results_page
    finally:
        sys.path.pop(0)
    monkeypatch.setattr(results_page, "ROOT", tmp_path)

    def result(name, draft, domain, ratios, **meta):
        folder = tmp_path / "bench" / "decoding" / name
        folder.mkdir(parents=True)
        records = []
        for t, ratio in ratios.items():
            base = {"domain": domain, "temperature": t, "gamma": 3, "alpha": 0.7, "speedup": 1.5, "speedup_ci": [1.4, 1.6],
                    "n_prompts": 12, "split": "test"}
            records += [{**base, "draft": "ref"}, {**base, "draft": draft, "alpha": 0.72, "over_reference": {
                "draft": "ref", "speedup_ratio": ratio, "speedup_ratio_ci": [ratio - 0.1, ratio + 0.1], "alpha_diff": 0.02}}]
        (folder / "results.json").write_text(json.dumps({"records": records, "conditions": {}}))
        return {"dir": folder, "date": "2026-12-06", "commit": "abc", "command": f"run {name}", "headline": True,
                "files": {"results.json": "speculate"}, **meta}

    lora = result("lora", "lora", "medical", {0.0: 1.03, 1.0: 0.99}, headline_temperatures=[1.0])
    code = result("code", "code-lora", "code", {0.0: 1.02, 1.0: 1.01})
    cut = result("cut", "cut", "medical", {0.0: 1.08, 1.0: 0.96}, headline_temperatures=[0.0])
    lines = results_page.training_block([lora, code, cut], {})
    rows = [line for line in lines if line.startswith("| medical") or line.startswith("| code")]
    assert [r.split(" | ")[:2] for r in rows] == [["| medical", "0"], ["| medical", "1"], ["| code", "0"], ["| code", "1"]]
    assert "**1.08x**" in rows[0] and "**0.99x**" in rows[1]  # greedy from the cut, T=1 from LoRA; 1.03x and 0.96x left out
    sources = [line for line in lines if line.startswith("- ")]
    assert [s.split(":")[0] for s in sources] == ["- medical (T=0)", "- medical (T=1)", "- code"]
    assert "run cut" in sources[0] and "run lora" in sources[1]
    with pytest.raises(SystemExit, match="headline_temperatures"):  # a temperature the run never measured
        results_page.training_block([{**lora, "headline_temperatures": [0.5]}], {})
