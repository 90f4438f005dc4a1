"""Render the results pages from the kept result files: each result's page (bench/<topic>/<name>/result.md), the
index of current results (docs/results.md), the archive (docs/results-archive.md), bench/README.md and the
README's tables (from current results only).

    python scripts/results_page.py            # or: make results
    python scripts/results_page.py --check    # exit 1 if any generated page is out of date (a test runs this)

Every kept result is a folder under bench/<topic>/ with a meta.json: title, date, the commit it landed in, the
command that reproduces it, and which files hold what (`files`: path -> kind: speculate | acceptance |
bench_decoder | draft_quant | files, and `alpha`: a speculate file read for acceptance only). Tables are rendered
from those files, never typed by hand. Results that say
`"headline": true` go into README.md between the results markers (trained drafts against their reference: one table
row per domain and temperature, `"headline_temperatures": [0.0]` keeping only some); results that say
`"policies": "<pair>"` share the policy table of docs/decoder.md (between the policies markers). Drafts are named by
bench/drafts.json (local output paths -> what the draft is). A result is archived when its meta.json says why
(`"archived": "<reason>"`) or when it was measured before the held-out tune / test prompt sets existed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH, DOCS = ROOT / "bench", ROOT / "docs"
TOPICS = {"decoding": "Decoding speed and the cost model (CPU)", "acceptance": "Acceptance of trained drafts",
          "training": "Training recipes and training speed", "gpu": "On a GPU"}
START, END = "<!-- results:start -->", "<!-- results:end -->"


def load_results() -> list[dict]:
    """Every bench/<topic>/<name>/meta.json, with its folder, in topic then date order."""
    out = []
    for meta_path in sorted(BENCH.glob("*/*/meta.json")):
        meta = json.loads(meta_path.read_text())
        meta["dir"] = meta_path.parent
        meta["topic"] = meta_path.parent.parent.name
        if meta["topic"] not in TOPICS:
            raise SystemExit(f"{meta_path}: unknown topic folder '{meta['topic']}' (one of {', '.join(TOPICS)}).")
        for key in ("title", "date", "commit", "command", "files"):
            if key not in meta:
                raise SystemExit(f"{meta_path}: missing '{key}'. Fix: add it (see docs/development.md).")
        out.append(meta)
    return sorted(out, key=lambda m: (list(TOPICS).index(m["topic"]), m["date"], m["title"]))


def draft_label(path: str, labels: dict) -> str:
    for key, label in labels.items():
        if str(path).rstrip("/").endswith(key.rstrip("/")):
            return label
    return "/".join(Path(str(path)).parts[-2:])


def number(v, spec: str) -> str:
    """`v` formatted with `spec` (".3f", ".2f" or ".2f" plus a suffix in the callers), "–" when missing."""
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def f3(v) -> str:
    return number(v, ".3f")


def f2(v) -> str:
    return number(v, ".2f")


def fx(v) -> str:
    return number(v, ".2f") + ("" if v is None or (isinstance(v, float) and math.isnan(v)) else "x")


def interval(ci, fmt) -> str:
    return f" [{fmt(ci[0])}, {fmt(ci[1])}]" if ci else ""


def speculate_table(data: dict, labels: dict) -> list[str]:
    rows = ["| draft | domain | T | γ | α | τ (+1 incl.) | c | tok/s target → speculative | speedup | cost model "
            "| realized / expected | greedy identical |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["records"]:
        gamma = str(r.get("gamma_setting", r["gamma"]))
        if r.get("confidence_threshold") and "stop" not in gamma:  # gamma=auto's label names its stop already
            gamma += f", stop < {r['confidence_threshold']:g}"
        expected = r.get("hardware_expected_speedup")
        ratio = r["speedup"] / expected if expected and not math.isnan(expected) else None
        who = row_label(r, labels) + (" (**policy=auto's choice**, made on the tune prompts)"
                                      if r.get("policy_auto") and len(data["records"]) > 1 else "")
        rows.append(f"| {who} | {r['domain']} | {r['temperature']:g} | {gamma} "
                    f"| {f3(r['alpha'])}{interval(r.get('alpha_ci'), f3)} | {r['tau']:.2f} | {f3(r.get('cost_ratio_c'))} "
                    f"| {r['target_tok_s']:.1f} → {r['spec_tok_s']:.1f} "
                    f"| **{fx(r['speedup'])}**{interval(r.get('speedup_ci'), fx)} | {fx(expected)} "
                    f"| {f3(ratio)} | {'–' if r.get('greedy_identical') is None else r['greedy_identical']} |")
    return rows


def alpha_table(data: dict, labels: dict) -> list[str]:
    """A speculate run read for acceptance only (kind `alpha`: decoded beside other work, so its speeds are not
    results and are left out)."""
    rows = ["| draft | domain | T | γ | α | τ (+1 incl.) | accepted/proposed | greedy identical |",
            "|---|---|---|---|---|---|---|---|"]
    for r in data["records"]:
        rows.append(f"| {row_label(r, labels)} | {r['domain']} | {r['temperature']:g} "
                    f"| {r.get('gamma_setting', r['gamma'])} | {f3(r['alpha'])}{interval(r.get('alpha_ci'), f3)} "
                    f"| {r['tau']:.2f} | {f3(r.get('accepted_per_proposed'))} "
                    f"| {'–' if r.get('greedy_identical') is None else r['greedy_identical']} |")
    return rows


def row_label(r: dict, labels: dict) -> str:
    """Who drafted: the draft's name, with the proposer kind where it is not the draft model alone (transformers'
    own decoders are named as such)."""
    kind = r.get("proposer", "draft")
    if r.get("engine") == "llama.cpp":
        return {"llama.cpp plain": "llama.cpp plain", "llama.cpp ngram": "llama.cpp n-gram drafting"}.get(
            kind, f"llama.cpp with {draft_label(r['draft'], labels)} as draft")
    if kind == "transformers lookup":
        return "transformers prompt lookup"
    if kind == "transformers plain":
        return "transformers plain generate() (the transformers rows' baseline)"
    return draft_label(r["draft"], labels) + {"lookup+draft": ", prompt lookup first",
                                              "heuristic": ", heuristic γ schedule",
                                              "transformers assisted": ", transformers assisted generation",
                                              "tree": ", static token tree",
                                              "dynamic_tree": ", dynamic token tree",
                                              "lookup": "", "router": ""}.get(kind, "")


def acceptance_table(data: dict, labels: dict) -> list[str]:
    paired = any(r.get("over_first_draft") for r in data["records"])  # newer runs: each draft against the first
    rows = ["| draft | domain | T | α_tf ± standard error | positions |" + (" − the first draft, paired |" if paired else ""),
            "|---|---|---|---|---|" + ("---|" if paired else "")]
    for r in data["records"]:
        over = r.get("over_first_draft")
        rows.append(f"| {draft_label(r['draft'], labels)} | {r['domain']} | {r['temperature']:g} "
                    f"| {f3(r['alpha_tf'])} ± {f3(r.get('alpha_tf_stderr'))} | {r.get('positions', '–')} |"
                    + ((f" {over['diff']:+.3f} ± {over['stderr']:.3f} |" if over else " reference |") if paired else ""))
    return rows


def bench_decoder_table(data: dict, labels: dict) -> list[str]:
    rows = ["| method | tok/s (median) | ÷ ours target-only | α | identical to target greedy |", "|---|---|---|---|---|"]
    for r in data["rows"]:
        rows.append(f"| {r['method']} | {r['tok_s']:.1f} | {fx(r.get('speedup'))} | {f3(r.get('alpha'))} "
                    f"| {r.get('identical_to_target_greedy', '–')} |")
    return rows


def draft_quant_table(data: dict, labels: dict) -> list[str]:
    rows = ["| draft | weights | top-1 agreement with the target [CI] | c [CI] | cost model, greedy |",
            "|---|---|---|---|---|"]
    for r in data["records"]:
        name, weights = r["variant"].rsplit(", ", 1)
        rows.append(f"| {draft_label(name, labels)} | {weights} | {f3(r['agreement'])}{interval(r['agreement_ci'], f3)} "
                    f"| {f3(r['c'])}{interval(r['c_ci'], f3)} | {fx(r['expected_speedup'])} at γ={r['gamma']} |")
    if data.get("paired"):  # newer runs: agreement differences paired by prompt
        def both(variant: str) -> str:
            name, weights = variant.rsplit(", ", 1)
            return f"{draft_label(name, labels)}, {weights}"
        rows += ["", "| A | B | agreement A − B, paired by prompt (± standard error) |", "|---|---|---|"]
        rows += [f"| {both(p['a'])} | {both(p['b'])} | {p['difference']:+.3f} ± {p['stderr']:.3f} |"
                 for p in data["paired"]]
    return rows


def llamacpp_table(data: dict, labels: dict) -> list[str]:
    """scripts/bench_llamacpp.py: each setting against llama.cpp plain (one engine); with its cost model, the
    decoding speedup (prefill out) beside the one llama-bench's pass costs predict."""
    costs = any("decode_speedup" in r for r in data["records"])
    rows = ["| engine: setting (draft model) | domain | T | γ | accepted/proposed | tok/s | speedup over llama.cpp plain "
            + ("| decoding alone | cost model's prediction " if costs else "") + "| greedy identical |",
            "|---|---|---|---|---|---|---|---|" + ("---|---|" if costs else "")]
    for r in data["records"]:
        who = r["setting"] if r["draft"] in ("none", None) else "llama.cpp, " + draft_label(r["draft"], labels)
        rows.append(f"| {who} | {r['domain']} | {r['temperature']:g} | {r.get('gamma') or '–'} "
                    f"| {f3(r['accepted'] / r['drafted'] if r.get('drafted') else None)} | {r['tok_s']:.1f} "
                    f"| **{fx(r['speedup'])}**{interval(r.get('speedup_ci'), f2)} "
                    + (f"| {fx(r.get('decode_speedup'))} | {fx(r.get('hardware_expected_speedup'))} " if costs else "")
                    + f"| {'–' if r.get('greedy_identical') is None else r['greedy_identical']} |")
    paying = [r for r in data["records"] if "break_even_accepted_per_proposed" in r]
    if paying:
        rows += ["", "Where a draft can pay at all, from llama.cpp's own pass costs (eval/llamacpp_costs.py):", "",
                 "| draft | γ | accepted/proposed | needed to match plain | speedup if all accepted "
                 "| its 1-token step | the dearest step that would match plain |", "|---|---|---|---|---|---|---|"]
        for r in paying:
            dearest = r.get("break_even_draft_step_s")
            rows.append(f"| {draft_label(r['draft'], labels)} | {r['gamma']} | {f3(r['accepted_per_proposed'])} "
                        f"| {f3(r['break_even_accepted_per_proposed'])} | {fx(r['speedup_if_all_accepted'])} "
                        f"| {r['llamacpp_costs']['draft_step_s'] * 1e3:.1f} ms "
                        f"| {'–' if dearest is None else ('none' if dearest <= 0 else f'{dearest * 1e3:.1f} ms')} |")
    return rows


def vllm_table(data: dict, labels: dict) -> list[str]:
    """scripts/bench_vllm.py: each setting against vLLM plain (one engine), and each draft's acceptance in vLLM
    beside our decoder's on the same prompts."""
    rows = ["| engine: setting | domain | T | γ | α | accepted/proposed | our decoder: α, accepted/proposed | tok/s "
            "| speedup over vLLM plain | greedy identical |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["records"]:
        who = r["setting"] if r["draft"] in ("none", None) else f"vLLM {r['method']}, " + draft_label(r["draft"], labels)
        ours = r.get("ours")
        rows.append(f"| {who} | {r['domain']} | {r['temperature']:g} | {r.get('gamma') or '–'} | {f3(r.get('alpha'))} "
                    f"| {f3(r.get('accepted_per_proposed'))} "
                    f"| {f3(ours['alpha']) + ', ' + f3(ours['accepted_per_proposed']) if ours else '–'} "
                    f"| {r['tok_s']:.1f} | **{fx(r['speedup'])}**{interval(r.get('speedup_ci'), f2)} "
                    f"| {'–' if r.get('greedy_identical') is None else r['greedy_identical']} |")
    return rows


def batches_table(data: dict, labels: dict) -> list[str]:
    """eval/speculate.py batch_size=[...]: speedup over target-only at the same batch size, beside the cost model."""
    rows = ["| draft | domain | T | γ | batch | target-only tok/s | speculative tok/s | speedup at that batch | "
            "cost model | α | greedy identical |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["records"]:
        rows.append(f"| {draft_label(r['draft'], labels)} | {r['domain']} | {r['temperature']:g} | {r['gamma']} "
                    f"| {r['batch_size']} | {r['target_tok_s']:.1f} | {r['tok_s']:.1f} "
                    f"| **{fx(r['speedup'])}**{interval(r.get('speedup_ci'), f2)} "
                    f"| {fx(r.get('hardware_expected_speedup'))} | {f3(r['alpha'])} "
                    f"| {'–' if r.get('greedy_identical') is None else r['greedy_identical']} |")
    return rows


RENDER = {"speculate": speculate_table, "alpha": alpha_table, "acceptance": acceptance_table,
          "bench_decoder": bench_decoder_table,
          "draft_quant": draft_quant_table, "llamacpp": llamacpp_table, "batches": batches_table,
          "vllm": vllm_table}


def conditions_line(data: dict, kind: str) -> str:
    c = data.get("conditions", {})
    prov = c.get("provenance", {})
    parts = [f"target `{c['target']}`" if c.get("target") else None,
             f"device {c['device']}" if c.get("device") else None,
             f"CPU {prov.get('cpu_model') or c.get('cpu')}" if (prov.get("cpu_model") or c.get("cpu")) else None,
             f"GPU {c['gpu']}" if c.get("gpu") else None,
             f"{c['threads']} threads" if c.get("threads") else None,
             f"torch {c['torch']}" if c.get("torch") else None,
             f"transformers {c['transformers']}" if c.get("transformers") else None,
             f"{c['dtype']}" if c.get("dtype") else None,
             f"{c['max_new_tokens']} new tokens" if c.get("max_new_tokens") else None,
             ((f"fastest of {c['repeats']} passes per prompt" if c["repeats"] > 1 else "one pass per prompt")
              if kind in ("speculate", "alpha") and data.get("records") and
              data["records"][0].get("split") else f"median of {c['repeats']} passes") if c.get("repeats") and kind not in ("llamacpp", "vllm")
             else None]
    if kind in ("speculate", "alpha") and data.get("records"):
        split = data["records"][0].get("split")
        parts.append(f"{data['records'][0]['n_prompts']} " + (f"`{split}` prompts per domain (never used for a "
                     "choice)" if split == "test" else f"`{split}` prompts per domain" if split else
                     "prompts per domain (built-in sets of their time)"))
        if kind == "alpha":
            parts.append("acceptance only (decoded beside other work: its speeds are no result)")
        elif data["records"][0].get("split"):
            parts.append("target-only and speculative decoding taking turns prompt by prompt")
        if kind == "speculate" and "speedup_ci" in data["records"][0]:
            parts.append(f"[{data['records'][0].get('ci_level', 0.95):.0%} bootstrap interval across prompts]")
    if kind == "bench_decoder":
        parts += [f"γ={c.get('gamma')}", f"{c.get('n_prompts')} {c.get('domain')} prompts"]
    if kind == "llamacpp":
        parts += [c.get("engine"), c.get("build"), f"target GGUF {c.get('target_gguf')}",
                  f"{data['records'][0]['n_prompts']} `{data['records'][0].get('split')}` prompts per domain",
                  "every setting taking turns prompt by prompt", "tokens/s from the server's own timings"]
    if kind == "vllm":
        parts += [c.get("engine"), f"{data['records'][0]['n_prompts']} `{data['records'][0].get('split')}` prompts "
                  "per domain", "every setting taking turns prompt by prompt (one server each, all up at once)"
                  if (c.get("max_servers") or 0) != 1 else "one server at a time: vLLM plain, each setting, vLLM plain "
                  "again, a block of prompts each, speedups over the mean of the two plain blocks",
                  "tokens/s over each request's wall time", "α and accepted/proposed from vLLM's spec-decode counters",
                  f"our decoder with {', '.join(c['ours_settings'])}" if c.get("ours_settings") else None,
                  f"[{data['records'][0].get('ci_level', 0.95):.0%} bootstrap interval across prompts]"]
    if kind == "batches":
        r = data["records"][0]
        parts += [f"{r['n_prompts']} `{r.get('split')}` prompts per domain, decoded in groups of the batch size",
                  "target-only and speculative decoding at the same batch taking turns group by group",
                  "[95% bootstrap interval across groups]"]
    if kind == "draft_quant":
        parts += [f"{c.get('n_prompts')} `{c.get('split')}` prompts ({', '.join(c.get('domains', []))})",
                  f"target step {c['target_step_s'] * 1e3:.0f} ms" if c.get("target_step_s") else None,
                  "every format taking turns with the target call by call"]
    if prov.get("commit"):
        parts.append(f"run on commit {prov['commit'][:7]}{' with uncommitted changes' if prov.get('dirty') else ''}")
    return "Conditions: " + ", ".join(p for p in parts if p) + "."


def cost_model_lines(data: dict) -> list[str]:
    """What the measured costs of a speculate run imply: the alpha each speedup needs at each gamma."""
    from decode.core.metrics import hardware_speedup

    costs = next(iter(data["conditions"].get("costs", {}).values()), None)
    if not costs:
        return []
    need = []
    for goal in (1.0, 1.5, 2.0):
        best = None
        for g in range(1, len(costs["target_pass_s"])):
            a = next((i / 1000 for i in range(1000)
                      if hardware_speedup(i / 1000, g, costs["draft_step_s"], costs["target_pass_s"]) >= goal), None)
            if a is not None and (best is None or a < best[0]):
                best = (a, g)
        need.append(f"{goal:.1f}x needs α ≥ {best[0]:.2f} (γ={best[1]})" if best else f"{goal:.1f}x is out of reach")
    passes = ", ".join(f"{t * 1e3:.1f}" for t in costs["target_pass_s"][:5])
    return [f"Measured costs: draft step {costs['draft_step_s'] * 1e3:.2f} ms (c = {costs['cost_ratio_c']:.3f}); "
            f"target passes of 1..5 tokens {passes} ms. With these costs the cost model says: " + "; ".join(need) + "."]


def tree_lines(data: dict, labels: dict) -> list[str]:
    """Where the tree rows' accepted tokens came from (records' tree_acceptance, decode/core/metrics.py): how deep
    steps got, which of its siblings each accepted node was, and the share a chain of first choices would not have
    kept."""
    trees = [r for r in data["records"] if r.get("tree_acceptance")]
    if not trees:
        return []
    chosen = []
    for r in data["records"]:
        c = r.get("tree_choice")
        if c and (r["draft"], r["domain"]) not in [x[:2] for x in chosen]:
            chosen.append((r["draft"], r["domain"], c))
    notes = []
    for draft, domain, c in chosen:
        extra = ""
        if c.get("best_branching_tree"):
            extra = (f"; the best shape with any node of two children or more, {c['best_branching_tree']}, "
                     f"{fx(c['best_branching_tree_expected_speedup'])}; the target's token was the draft's first "
                     f"choice at {c['top_k_hits'][0]:.2f} of the positions, among its top 2 / 3 / 4 at "
                     + " / ".join(f"{h:.2f}" for h in c["top_k_hits"][1:]))
        notes.append(f"`tree.branching=auto` for {draft_label(draft, labels)} on {domain}, chosen on the tune "
                     f"prompts' greedy paths: {c['branching']}, expected {fx(c['expected_speedup'])}; the best chain "
                     f"{fx(c['best_chain_expected_speedup'])}{extra}.")
    rows = ["What the trees' width bought (tree steps only): nodes scored per step; the share of steps that kept at "
            "least 1, 2, 3, ... drafted tokens; the share of kept nodes that were the draft's 1st / 2nd / 3rd+ choice "
            "among their siblings; the share of kept tokens a chain of first choices would not have kept.", "",
            "| draft | domain | T | nodes / step | steps keeping ≥ d tokens (d = 1, 2, ...) | 1st / 2nd / 3rd+ choice "
            "| beyond first choice |", "|---|---|---|---|---|---|---|"]
    rows = ([" ".join(notes), ""] if notes else []) + rows
    for r in trees:
        t = r["tree_acceptance"]
        share = t["rank_share"] + [0.0] * max(0, 3 - len(t["rank_share"]))
        rows.append(f"| {row_label(r, labels)} | {r['domain']} | {r['temperature']:g} | {t['mean_nodes']:.1f} "
                    f"| {' / '.join(f'{x:.2f}' for x in t['reached_depth'])} "
                    f"| {share[0]:.2f} / {share[1]:.2f} / {sum(share[2:]):.2f} | {f3(t['beyond_first_choice'])} |")
    return rows


PAGE = "result.md"  # each result's full page, beside its files
ARCHIVE = DOCS / "results-archive.md"
HELD_OUT_SINCE = "2026-12-01"  # the held-out tune / test prompt sets (data/prompts.py) exist from this date


def rendered(meta: dict) -> list[tuple[str, str, dict]]:
    """(file name, kind, parsed data) of every rendered file of a result (kind `files` is only linked)."""
    return [(name, kind, json.loads((meta["dir"] / name).read_text())) for name, kind in meta["files"].items()
            if kind != "files"]


def archived(meta: dict) -> str | None:
    """Why a result no longer describes the code (None: current). Said in its meta.json (`archived`), or: it was
    measured on the built-in prompt sets before the held-out tune / test sets, which the code no longer has."""
    if meta.get("archived"):
        return meta["archived"]
    old = meta["date"] < HELD_OUT_SINCE or any(
        not any("split" in r for r in data.get("records", [])[:1]) and "split" not in data.get("conditions", {})
        for _, kind, data in rendered(meta))
    return ("measured on the built-in prompt sets of its time, before the held-out tune / test prompts "
            f"({HELD_OUT_SINCE}): its command now decodes other prompts") if old else None


def section(meta: dict, labels: dict, level: str = "#") -> list[str]:
    """A result's full page (bench/<topic>/<name>/result.md): what, when, how to reproduce, every table."""
    docs = "../../../docs"
    lines = [f"{level} {meta['title']}", "",
             f"Measured {meta['date']}, commit `{meta['commit']}`"
             + (f" ({meta['commit_note']})" if meta.get("commit_note") else "") + ". "
             f"Reproduce: `{meta['command']}`", ""]
    if archived(meta):
        lines += [f"**Archived**: {archived(meta)}. Index of archived results: [results-archive.md]({docs}/"
                  "results-archive.md).", ""]
    lines += ["Speedups are tokens/s of speculative decoding over target-only decoding with the same decoder; "
              f"metric definitions: [metrics.md]({docs}/metrics.md). Index of current results: "
              f"[results.md]({docs}/results.md).", ""]
    if meta.get("note"):
        lines += [meta["note"], ""]
    for name, kind in meta["files"].items():
        if kind == "files":
            lines += [f"![{name}]({name})" if name.endswith(".png") else f"- [`{name}`]({name})"]
            continue
        data = json.loads((meta["dir"] / name).read_text())
        if len(meta["files"]) > 1:
            lines += [f"`{name}`:", ""]
        lines += RENDER[kind](data, labels) + ["", conditions_line(data, kind), ""]
        if kind == "speculate":
            lines += cost_model_lines(data) + [""]
            lines += (tree_lines(data, labels) + [""]) if tree_lines(data, labels) else []
    return lines + [""]


def figure(meta: dict, labels: dict) -> str:
    """A result's figure in one line, from its files: the fastest of our decoder's settings (with its interval),
    the best acceptance, or the fastest method; `–` for results kept as plain files."""
    files = sorted(rendered(meta), key=lambda f: f[2].get("records", [{}])[0].get("split") != "test")  # test first
    for _, kind, data in files:
        if kind == "speculate":
            ours = [r for r in data["records"] if not str(r.get("proposer", "")).startswith("transformers")]
            r = max(ours or data["records"], key=lambda r: r["speedup"])
            return (f"fastest of {len(data['records'])}: **{fx(r['speedup'])}**{interval(r.get('speedup_ci'), f2)} "
                    f"({row_label(r, labels)}, {r['domain']}, T={r['temperature']:g}, "
                    f"γ={r.get('gamma_setting', r['gamma'])}, α {f3(r['alpha'])})")
        if kind == "alpha":
            r = max(data["records"], key=lambda r: r["alpha"])
            return (f"best α **{f3(r['alpha'])}** ({row_label(r, labels)}, {r['domain']}, T={r['temperature']:g}, "
                    f"γ={r.get('gamma_setting', r['gamma'])}; acceptance only)")
        if kind == "acceptance":
            r = max(data["records"], key=lambda r: r["alpha_tf"])
            return f"best α_tf **{f3(r['alpha_tf'])}** ({draft_label(r['draft'], labels)}, {r['domain']})"
        if kind == "bench_decoder":
            r = max(data["rows"], key=lambda r: r["tok_s"])
            return f"fastest **{r['tok_s']:.1f} tok/s** ({r['method']}, {fx(r.get('speedup'))} of target-only)"
        if kind == "llamacpp":
            spec = [r for r in data["records"] if r.get("proposer") != "plain"] or data["records"]
            r = max(spec, key=lambda r: r["speedup"])
            return (f"fastest of {len(spec)} speculative settings (llama.cpp, over its own plain decoding): "
                    f"**{fx(r['speedup'])}**{interval(r.get('speedup_ci'), f2)} ({r['setting']}, {r['tok_s']:.1f} tok/s)")
        if kind == "vllm":
            spec = [r for r in data["records"] if r.get("method") != "plain"] or data["records"]
            r = max(spec, key=lambda r: r["speedup"])
            return f"best over vLLM plain: **{fx(r['speedup'])}**{interval(r.get('speedup_ci'), f2)} ({r['setting']})"
        if kind == "batches":
            worst = max(data["records"], key=lambda r: r["batch_size"])
            best = max(data["records"], key=lambda r: r["speedup"])
            return (f"**{fx(best['speedup'])}**{interval(best.get('speedup_ci'), f2)} at batch {best['batch_size']}, "
                    f"**{fx(worst['speedup'])}**{interval(worst.get('speedup_ci'), f2)} at batch "
                    f"{worst['batch_size']} (each over target-only at that batch)")
        if kind == "draft_quant":
            r = max(data["records"], key=lambda r: r["expected_speedup"])
            return f"best cost-model speedup **{fx(r['expected_speedup'])}** ({r['variant']}, γ={r['gamma']})"
    return "–"


def index_rows(chosen: list[dict], labels: dict, docs_to_bench: str) -> list[str]:
    rows = ["| result | figure | measured |", "|---|---|---|"]
    for m in chosen:
        rel = m["dir"].relative_to(ROOT)
        rows.append(f"| [{m['title']}]({docs_to_bench}{rel}/{PAGE}) | {figure(m, labels)} "
                    f"| {m['date']}, `{m['commit']}` |")
    return rows


def results_page(results: list[dict], labels: dict) -> str:
    current = [m for m in results if not archived(m)]
    lines = ["# Results", "",
             "Generated by `make results` (`scripts/results_page.py`) from the result files under `bench/`; do not "
             "edit by hand. One line per current result: its figure (the fastest of a grid is optimistic) and a link "
             "to its page: every table, the conditions, the command that reproduces it, its commit. Speedups: "
             "tokens/s of speculative over plain decoding in the same engine, [95% bootstrap interval across "
             "prompts]. Metrics: [metrics.md](metrics.md). No longer current: "
             f"[results-archive.md](results-archive.md) ({len(results) - len(current)}).", ""]
    head = [m for m in current if m.get("headline")]
    if measures_training(head):
        lines += ["## Headline: what training buys", ""] + training_block(head, labels, "../") + [""]
    elif head:
        lines += ["## Headline", ""] + index_rows(head, labels, "../") + [""]
    for topic, title in TOPICS.items():
        chosen = [m for m in current if m["topic"] == topic and not m.get("headline")]
        if chosen:
            lines += [f"## {title}", ""] + index_rows(chosen, labels, "../") + [""]
    return "\n".join(lines).rstrip() + "\n"


def archive_page(results: list[dict], labels: dict) -> str:
    old = [m for m in results if archived(m)]
    lines = ["# Archived results", "",
             "Generated by `make results`. Results kept for their history that no longer describe the code (each "
             "page says why); current results: [results.md](results.md).", ""] + index_rows(old, labels, "../")
    return "\n".join(lines).rstrip() + "\n"


def bench_index(results: list[dict]) -> str:
    lines = ["# bench/: kept results", "",
             "Generated by `make results` (`scripts/results_page.py`); the index of current results is "
             "[docs/results.md](../docs/results.md), of archived ones [docs/results-archive.md]"
             "(../docs/results-archive.md). One folder per result, by topic; each has a `meta.json` (title, date, "
             "commit, command, files), the files the command wrote and `result.md`, its page with every table. Scripts kept beside a result "
             "are the one-off tools that produced it. How to add one: [docs/development.md](../docs/development.md).",
             "", "| topic | result | date | commit | command |", "|---|---|---|---|---|"]
    for m in results:
        rel = m["dir"].relative_to(BENCH)
        lines.append(f"| {m['topic']} | [{m['title']}]({rel}/{PAGE}) | {m['date']} | `{m['commit']}` "
                     f"| `{m['command']}` |")
    return "\n".join(lines) + "\n"


def speculate_data(meta: dict) -> dict:
    name = next(n for n, k in meta["files"].items() if k == "speculate")
    return json.loads((meta["dir"] / name).read_text())


def measures_training(head: list[dict]) -> bool:
    """Every headline result ran a trained draft against an off-the-shelf reference (`reference_draft=`)."""
    return bool(head) and all(any("over_reference" in r for r in speculate_data(m)["records"]) for m in head)


def training_block(head: list[dict], labels: dict, to_root: str = "") -> list[str]:
    """Issue #43's "what training buys" table: per domain and temperature, the off-the-shelf draft and the trained
    one from the same interleaved run, and the paired per-prompt ratio of their speedups; then where each came from.
    A headline result with `headline_temperatures` gives only those rows (a domain whose tune prompts chose one draft
    greedy and another at T=1); rows go by domain, in order of first appearance, then temperature."""
    rows, sources, conditions, domains = [], [], [], []
    for m in head:
        data = speculate_data(m)
        temps = m.get("headline_temperatures")
        keep = [r for r in data["records"] if "over_reference" in r and (temps is None or r["temperature"] in temps)]
        if not keep:
            raise SystemExit(f"error: {m['dir']}/meta.json: no record against a reference at headline_temperatures "
                             f"{temps}. Fix: name temperatures the run measured, or drop the key")
        refs = {(r["domain"], r["temperature"]): r for r in data["records"] if "over_reference" not in r}
        for r in keep:
            over, ref = r["over_reference"], refs[(r["domain"], r["temperature"])]
            domains += [r["domain"]] if r["domain"] not in domains else []
            rows.append(((domains.index(r["domain"]), r["temperature"]),
                         f"| {r['domain']} | {r['temperature']:g} | {f3(ref['alpha'])} → {f3(r['alpha'])} "
                         f"({over['alpha_diff']:+.3f}) | {fx(ref['speedup'])}{interval(ref.get('speedup_ci'), f2)} "
                         f"| {fx(r['speedup'])}{interval(r.get('speedup_ci'), f2)} "
                         f"| **{fx(over['speedup_ratio'])}**{interval(over['speedup_ratio_ci'], f2)} |"))
        trained = keep[0]
        rel = m["dir"].relative_to(ROOT)
        which = trained["domain"] + ("" if temps is None else " (" + ", ".join(f"T={t:g}" for t in temps) + ")")
        sources.append(((domains.index(trained["domain"]), min(r["temperature"] for r in keep)),
                        f"- {which}: {draft_label(trained['draft'], labels)} against "
                        f"{draft_label(trained['over_reference']['draft'], labels)}, γ={trained['gamma']} "
                        f"([{rel.name}]({to_root}{rel}/{PAGE}), measured {m['date']}, commit `{m['commit']}`; `{m['command']}`)"))
        # the commit each run used is on its line above; the rest of the conditions is shared or said per domain
        conditions.append((trained["domain"], conditions_line(data, "speculate").split(", run on commit")[0]
                           .removesuffix(".")))
    header = ["| domain | T | α: off the shelf → trained | speedup over target-only: off the shelf | trained "
              "| trained / off the shelf, paired |", "|---|---|---|---|---|---|"]
    common = {c for _, c in conditions}
    return (header + [row for _, row in sorted(rows, key=lambda x: x[0])] + [""]
            + [line for _, line in sorted(sources, key=lambda x: x[0])] + [""]
            + ([f"{common.pop()}."] if len(common) == 1 else
               [f"{c.replace('Conditions:', f'Conditions ({d}):')}." for d, c in dict.fromkeys(conditions)]))


def readme_block(results: list[dict], labels: dict) -> str:
    head = [m for m in results if m.get("headline")]
    if not head:
        return f"{START}\n(no headline result yet)\n{END}"
    if measures_training(head):
        return "\n".join([START] + training_block(head, labels) + [""] + gpu_lines(results, labels) +
                          ["<!-- generated by scripts/results_page.py -->", END])
    m = head[0]
    data = speculate_data(m)
    several = len({row_label(r, labels) for r in data["records"]}) > 1
    ref = any("over_reference" in r for r in data["records"])  # a run with reference_draft: what training buys
    rows = ["| " + ("drafter | " if several else "") + "domain | T | γ | α | speedup over target-only | cost model "
            + ("| over the off-the-shelf draft " if ref else "") + "| greedy identical |",
            "|---|---|---|---|---|---|---|" + ("---|" if several else "") + ("---|" if ref else "")]
    for r in data["records"]:
        over = r.get("over_reference")
        rows.append("| " + (f"{row_label(r, labels)} | " if several else "")
                    + f"{r['domain']} | {r['temperature']:g} | {r.get('gamma_setting', r['gamma'])} "
                    f"| {f3(r['alpha'])} | **{fx(r['speedup'])}**{interval(r.get('speedup_ci'), fx)} "
                    f"| {fx(r.get('hardware_expected_speedup'))} "
                    + (f"| {'reference' if over is None else fx(over['speedup_ratio'])}"
                       f"{'' if over is None else interval(over['speedup_ratio_ci'], fx)} " if ref else "")
                    + f"| {'–' if r.get('greedy_identical') is None else r['greedy_identical']} |")
    return "\n".join([START, f"{m['title']} (measured {m['date']}, commit `{m['commit']}`; `{m['command']}`):", ""]
                     + rows +
                     ["", conditions_line(data, "speculate"), ""] + gpu_lines(results, labels) +
                     ["<!-- generated by scripts/results_page.py -->", END])


POLICY_ORDER = ["draft", "heuristic", "predicted", "lookup", "lookup+draft", "tree", "dynamic_tree", "router"]
POLICY_NAMES = {"draft": "chain", "heuristic": "heuristic γ", "predicted": "γ predicted per step",
                "lookup": "prompt lookup", "lookup+draft": "lookup, else the draft", "tree": "static tree",
                "dynamic_tree": "dynamic tree", "router": "router (lookup / draft / none, auto-off)"}
P_START, P_END = "<!-- policies:start -->", "<!-- policies:end -->"


def policy_key(arm: list) -> tuple:
    """A decoding policy as asked, whatever draft ran it: (kind, γ as asked where γ is a setting, threshold)."""
    kind, _, gamma, threshold = arm
    return kind, str(gamma) if kind in ("draft", "heuristic", "lookup", "lookup+draft") else "", float(threshold)


def policy_label(key: tuple) -> str:
    kind, gamma, threshold = key
    setting = ("gamma=auto" if gamma == "auto" else
               f"γ≤{gamma}" if kind == "heuristic" else f"γ={gamma}") if gamma else ""
    stop = f"stop < {threshold:g}" if threshold else ""
    return ", ".join(p for p in (POLICY_NAMES[kind], setting, stop) if p)


def policies_block(results: list[dict]) -> str:
    """The README's policy comparison: one row per decoding policy measured in every result whose meta.json names a
    `policies` column prefix (one per target pair), one column per (pair, domain): speedup over target-only with
    its interval. Every row of a column comes from one interleaved run."""
    runs = [m for m in results if m.get("policies")]
    if not runs:
        return f"{P_START}\n(no policy comparison yet)\n{P_END}"
    columns, cells, keys = [], {}, None
    for m in runs:
        data = json.loads((m["dir"] / next(n for n, k in m["files"].items() if k == "speculate")).read_text())
        columns += [(m["policies"], d) for d in dict.fromkeys(r["domain"] for r in data["records"])]
        mine = {(policy_key(r["arm"]), m["policies"], r["domain"]): r for r in data["records"] if r.get("arm")}
        cells.update(mine)
        keys = {k for k, _, _ in mine} if keys is None else keys & {k for k, _, _ in mine}
    ordered = sorted(keys, key=lambda k: (POLICY_ORDER.index(k[0]), k[1] != "auto", k[1], k[2]))
    rows = ["| policy | " + " | ".join(f"{p}, {d}" for p, d in columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for k in ordered:
        row = []
        for p, d in columns:
            r = cells.get((k, p, d))
            row.append("–" if r is None else f"{fx(r['speedup'])}{interval(r.get('speedup_ci'), f2)}")
        rows.append(f"| {policy_label(k)} | " + " | ".join(row) + " |")
    runs_line = "; ".join(f"{m['policies']}: [{m['dir'].name}](../bench/{m['topic']}/{m['dir'].name}/{PAGE}) "
                          f"(commit `{m['commit']}`)" for m in runs)  # links from docs/decoder.md
    return "\n".join([P_START, "Speedup over target-only [95% interval across test prompts], one interleaved run per "
                      "pair: " + runs_line + "; commands, α, τ, tok/s, cost model: [results.md](results.md).",
                      ""] + rows +
                     ["", "<!-- generated by scripts/results_page.py -->", P_END])


def gpu_lines(results: list[dict], labels: dict) -> list[str]:
    """One sentence per GPU result: its best measured speedup over target-only decoding."""
    lines = []
    for m in (m for m in results if m["topic"] == "gpu"):
        name = next((n for n, k in m["files"].items() if k == "speculate"), None)
        if name is None:
            continue
        data = json.loads((m["dir"] / name).read_text())
        best = max(data["records"], key=lambda r: r["speedup"])
        gpu = data["conditions"].get("gpu") or "GPU"
        lines += [f"On a GPU ({gpu}, {m['date']}, draft: {draft_label(best['draft'], labels)}): best measured "
                  f"speedup {fx(best['speedup'])} (γ={best['gamma']}, T={best['temperature']:g}, {best['n_prompts']} "
                  f"{best['domain']} prompts, no interval recorded); [details](bench/gpu/{m['dir'].name}/{PAGE}).", ""]
    return lines


E_START, E_END = "<!-- engines:start -->", "<!-- engines:end -->"


def engines_block(results: list[dict], labels: dict, root: str = "../") -> str:
    """docs/serving.md's engines table, from the current result whose meta.json says `"engines": true`: per engine, its
    plain decoding and each of its speculative settings in absolute tokens/s on the same prompts, each speedup over
    the same engine's plain decoding (across engines compare tokens/s, never speedups)."""
    chosen = [m for m in results if m.get("engines")]
    if not chosen:
        return f"{E_START}\n(no engines comparison yet)\n{E_END}"
    m = chosen[-1]
    data = json.loads((m["dir"] / next(n for n, k in m["files"].items() if k == "speculate")).read_text())
    rows = ["| engine | decoding | tok/s | speedup over the same engine's plain decoding | output = plain's |",
            "|---|---|---|---|---|"]
    plain_done = set()
    for r in data["records"]:
        engine = r.get("engine", "draftsmith")
        if engine == "draftsmith" and engine not in plain_done:  # our target-only decoding is every record's base
            rows.append(f"| {engine} | plain (target-only) | {r['target_tok_s']:.1f} | 1.00x | – |")
            plain_done.add(engine)
        plain = str(r.get("proposer", "")).endswith("plain")
        kind = str(r["proposer"]).replace("transformers ", "").replace("llama.cpp ", "")
        kind = {"draft": "speculative", "assisted": "assisted generation", "ngram": "n-gram drafting",
                "lookup": "prompt lookup"}.get(kind, kind)
        what = "plain" if plain else (kind
                                      + ("" if r.get("draft") in (None, "none") or "plain" in str(r.get("draft"))
                                         or "ngram" in str(r.get("draft")) else
                                         f", draft {draft_label(r['draft'], labels)}")
                                      + (f", γ={r['gamma']}" if isinstance(r.get("gamma"), int) else ""))
        rows.append(f"| {engine} | {what} | {r['tok_s']:.1f} | "
                    + ("1.00x" if plain else f"**{fx(r['speedup'])}**{interval(r.get('speedup_ci'), f2)}")
                    + f" | {'–' if plain or r.get('greedy_identical') is None else r['greedy_identical']} |")
    return "\n".join([E_START, f"[{m['dir'].name}]({root}bench/{m['topic']}/{m['dir'].name}/{PAGE}) (measured {m['date']}, "
                      f"commit `{m['commit']}`; `{m['command']}`):", ""] + rows
                      + ["", conditions_line(data, "speculate"), "", "<!-- generated by scripts/results_page.py -->",
                         E_END])


def replace_block(text: str, start: str, end: str, block: str) -> str:
    """`text` with the span from `start` to `end` (markers included) replaced by `block`; unchanged without them."""
    if start not in text or end not in text:
        return text
    return text[:text.index(start)] + block + text[text.index(end) + len(end):]


def render_all() -> dict[Path, str]:
    labels = json.loads((BENCH / "drafts.json").read_text())
    results = load_results()
    current = [m for m in results if not archived(m)]  # the README quotes current results only
    readme = (ROOT / "README.md").read_text()
    readme = replace_block(readme, START, END, readme_block(current, labels))
    serving = replace_block((DOCS / "serving.md").read_text(), E_START, E_END, engines_block(current, labels))
    decoder = replace_block((DOCS / "decoder.md").read_text(), P_START, P_END, policies_block(current))
    pages = {m["dir"] / PAGE: "\n".join(section(m, labels)).rstrip() + "\n" for m in results}
    return {DOCS / "results.md": results_page(results, labels), ARCHIVE: archive_page(results, labels),
            BENCH / "README.md": bench_index(results), ROOT / "README.md": readme, DOCS / "decoder.md": decoder,
            DOCS / "serving.md": serving,
            **pages}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="fail if a generated file is out of date")
    args = ap.parse_args()
    stale = []
    for path, text in render_all().items():
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path.relative_to(ROOT)))
        else:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print(f"out of date: {', '.join(stale)}. Fix: make results", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
