"""Speculation at batch sizes above 1 (eval/speculate.py `batch_size=[1,2,4,8]`): where does it stop paying?

Per batch size B the test prompts are decoded in groups of B (decode/core/batched.py): target-only decoding at batch
B, and each draft at each fixed gamma at batch B, taking turns group by group (the order rotating), each group's time
its fastest of `repeats` passes. A record's speedup divides its tokens/s by target-only decoding's at the SAME batch
size, with an interval across groups; the cost model, timed at each batch size (decode/core/costs.py
`measure_batch_costs`), gives the speedup it expects beside it. Greedy output is checked per sequence against batch
1's target-only output.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from omegaconf import DictConfig

from data.prompts import encode_prompt, load_prompts
from decode.core.batched import generate_batch
from decode.core.costs import decoding_context, measure_batch_costs
from decode.core.metrics import acceptance, hardware_speedup
from decode.core.speculative import SamplingParams
from decode.core.stats import bootstrap_speedup_ci, ratio_alpha_ci, ratio_of_sums_speedup
from eval.report import grid_progress
from eval.timing import rotated

log = logging.getLogger("draftsmith.eval")


def groups_of(prompts: list, size: int) -> list[list]:
    """Consecutive full groups of `size` prompts (a last, smaller group is left out: every group is a batch of B)."""
    return [prompts[i:i + size] for i in range(0, len(prompts) - size + 1, size)]


def timed_groups(target, arms: list[tuple], groups: list[list[list[int]]], max_new_tokens: int, params, eos,
                 seed: int, repeats: int, on_group=None) -> dict:
    """{arm key: {"tokens": per prompt, "steps": per prompt, "group_s": fastest seconds per group, "group_tokens"}}.
    arms: (key, draft or None, gamma). Every arm decodes group i with the same seed; the order rotates."""
    out = {key: {"tokens": [], "steps": [], "group_s": [float("inf")] * len(groups), "group_tokens": [0] * len(groups)}
           for key, _, _ in arms}
    for key, draft, gamma in arms:  # warm-up, untimed
        generate_batch(target, draft, groups[0], gamma, min(8, max_new_tokens), params, eos,
                       torch.Generator().manual_seed(seed))
    for r in range(repeats):
        for i, group in enumerate(groups):
            for key, draft, gamma in rotated(arms, r + i):
                res = generate_batch(target, draft, group, gamma, max_new_tokens, params, eos,
                                     torch.Generator().manual_seed(seed + i))
                seconds = res.prefill_s + res.decode_s
                if seconds < out[key]["group_s"][i]:
                    out[key]["group_s"][i] = seconds
                if r == 0:
                    out[key]["tokens"] += res.tokens
                    out[key]["steps"] += res.steps
                    out[key]["group_tokens"][i] = sum(map(len, res.tokens))
            if on_group is not None:
                on_group()
    return out


def batch_record(name: str, domain: str, batch: int, gamma: int, temperature: float, run: dict, base: dict,
                 costs: dict, level: float, reference: list | None) -> dict:
    steps = [s for seq in run["steps"] for s in seq]
    stats = acceptance(steps)
    per_group_accepted, per_group_judged = [], []
    for g in range(len(run["group_s"])):
        seqs = run["steps"][g * batch:(g + 1) * batch]
        st = acceptance([s for seq in seqs for s in seq])
        per_group_accepted.append(st["accepted"])
        per_group_judged.append(st["accepted"] + st["rejected"])
    args = (base["group_s"], run["group_s"], base["group_tokens"], run["group_tokens"])
    expected = hardware_speedup(stats["alpha"], gamma, costs["draft_step_s"], costs["target_pass_s"]) \
        if stats["alpha"] == stats["alpha"] else float("nan")
    tok_s = sum(run["group_tokens"]) / sum(run["group_s"])
    return {"engine": "draftsmith", "speedup_over": f"draftsmith target-only at batch {batch}", "draft": name,
            "proposer": "draft", "domain": domain, "batch_size": batch, "gamma": gamma, "temperature": temperature,
            "n_prompts": len(run["tokens"]), "groups": len(run["group_s"]), "alpha": stats["alpha"],
            "tau": stats["tau"], "alpha_ci": list(ratio_alpha_ci(per_group_accepted, per_group_judged, level)),
            "tok_s": tok_s, "spec_tok_s": tok_s, "target_tok_s": sum(base["group_tokens"]) / sum(base["group_s"]),
            "speedup": ratio_of_sums_speedup(*args), "speedup_ci": list(bootstrap_speedup_ci(*args, level=level)),
            "hardware_expected_speedup": expected, "cost_ratio_c": costs["cost_ratio_c"],
            "greedy_identical": (run["tokens"] == reference) if temperature == 0 and reference is not None else None,
            "per_group": {"target_s": base["group_s"], "spec_s": run["group_s"], "target_tokens": base["group_tokens"],
                          "spec_tokens": run["group_tokens"]}}


def measure_batches(cfg: DictConfig, tokenizer, target, drafts: dict, gammas: list[int], eos, conditions: dict
                    ) -> list[dict]:
    """Every (domain, temperature, batch size): target-only and each draft x gamma at that batch, interleaved group
    by group. The cost model per batch size goes into conditions["batch_costs"]."""
    records, batches = [], sorted({int(b) for b in cfg.batch_size})
    conditions["batch_costs"] = {}
    with grid_progress() as progress:
        total = sum(len(cfg.temperature) * cfg.repeats * (cfg.n_prompts // b) for b in batches) * len(cfg.domains)
        task = progress.add_task("decoding batches", total=total)
        for domain in cfg.domains:
            prompts = [encode_prompt(tokenizer, p) for p in load_prompts(domain, cfg.n_prompts, cfg.prompts_file,
                                                                         cfg.split)]
            context = decoding_context(prompts[0], cfg.max_new_tokens)
            for temperature in cfg.temperature:
                params = SamplingParams(float(temperature), cfg.top_k, cfg.top_p)
                reference = None  # batch 1 target-only greedy output, per prompt
                for batch in batches:
                    groups = groups_of(prompts, batch)
                    for name, draft in drafts.items():
                        key = f"{name}@{batch}"
                        if key not in conditions["batch_costs"]:
                            progress.update(task, description=f"cost model at batch {batch}")
                            conditions["batch_costs"][key] = measure_batch_costs(target, draft, context, batch,
                                                                                 max(gammas) + 1)
                    arms = [("target", None, 0)] + [((n, g), d, g) for n, d in drafts.items() for g in gammas]
                    progress.update(task, description=f"{domain} T={temperature:g} batch {batch}: "
                                                      f"{len(groups)} groups, {len(arms)} settings interleaved")
                    runs = timed_groups(target, arms, groups, cfg.max_new_tokens, params, eos, cfg.seed, cfg.repeats,
                                        on_group=lambda: progress.advance(task))
                    base = runs["target"]
                    if batch == 1 and temperature == 0:
                        reference = base["tokens"]
                    for (key, draft, gamma) in arms[1:]:
                        name = key[0]
                        rec = batch_record(name, domain, batch, gamma, float(temperature), runs[key], base,
                                           conditions["batch_costs"][f"{name}@{batch}"], float(cfg.ci_level),
                                           None if reference is None else reference[:len(runs[key]["tokens"])])
                        rec["split"] = cfg.split
                        records.append(rec)
                        log.info("batch %d %s g=%d T=%s: target %.1f tok/s, speculative %.1f tok/s, %.2fx [%.2f, "
                                 "%.2f] (cost model %.2fx), alpha %.3f", batch, name, gamma, temperature,
                                 rec["target_tok_s"], rec["tok_s"], rec["speedup"], *rec["speedup_ci"],
                                 rec["hardware_expected_speedup"], rec["alpha"])
    return records


def batch_table(records: list[dict]) -> str:
    """Markdown: speedup against batch size, measured beside the cost model's expectation."""
    lines = ["| domain | T | draft | γ | batch | target tok/s | speculative tok/s | speedup [95% CI] | cost model | α | "
             "greedy identical |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        lo, hi = r["speedup_ci"]
        lines.append(f"| {r['domain']} | {r['temperature']:g} | {r['draft']} | {r['gamma']} | {r['batch_size']} | "
                     f"{r['target_tok_s']:.1f} | {r['tok_s']:.1f} | **{r['speedup']:.2f}x** [{lo:.2f}, {hi:.2f}] | "
                     f"{r['hardware_expected_speedup']:.2f}x | {r['alpha']:.3f} | {r['greedy_identical']} |")
    return "\n".join(lines)


def pays_until(records: list[dict]) -> dict:
    """Per (domain, temperature, draft, gamma): the largest batch size measured whose interval's lower end is above
    1 (None: at no batch size), and the smallest at which the cost model expects no gain."""
    out = {}
    for r in records:
        key = f"{r['domain']} T={r['temperature']:g} {r['draft']} γ={r['gamma']}"
        entry = out.setdefault(key, {"pays_up_to_batch": None, "cost_model_stops_at_batch": None})
        if r["speedup_ci"][0] > 1 and (entry["pays_up_to_batch"] or 0) < r["batch_size"]:
            entry["pays_up_to_batch"] = r["batch_size"]
        if r["hardware_expected_speedup"] <= 1 and (entry["cost_model_stops_at_batch"] is None
                                                    or r["batch_size"] < entry["cost_model_stops_at_batch"]):
            entry["cost_model_stops_at_batch"] = r["batch_size"]
    return out


def batch_plot(records: list[dict], out: Path) -> Path:
    """Speedup against batch size per draft, gamma and temperature: measured (with its interval) and the cost model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    series = {}
    for r in records:
        series.setdefault((r["domain"], r["temperature"], r["draft"], r["gamma"]), []).append(r)
    for i, ((domain, t, draft, gamma), rows) in enumerate(series.items()):
        rows = sorted(rows, key=lambda r: r["batch_size"])
        x = [r["batch_size"] for r in rows]
        y = [r["speedup"] for r in rows]
        err = [[r["speedup"] - r["speedup_ci"][0] for r in rows], [r["speedup_ci"][1] - r["speedup"] for r in rows]]
        label = f"{domain} T={t:g} {str(draft).split('/')[-1]} γ={gamma}"
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, color=f"C{i % 10}", label=f"measured, {label}")
        ax.plot(x, [r["hardware_expected_speedup"] for r in rows], ls="--", color=f"C{i % 10}",
                label=f"cost model, {label}")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set(xlabel="batch size (sequences decoded at once)", ylabel="speedup over target-only at that batch",
           title="Where speculation stops paying")
    ax.legend(fontsize=6)
    fig.tight_layout()
    path = out / "speedup_vs_batch.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_batch_report(records: list[dict], conditions: dict, out: Path) -> dict:
    import json

    out.mkdir(parents=True, exist_ok=True)
    conditions["pays_until"] = pays_until(records)
    files = {"json": out / "results.json", "markdown": out / "results.md", "plot": batch_plot(records, out)}
    files["json"].write_text(json.dumps({"conditions": conditions, "records": records}, indent=1))
    conds = ", ".join(f"{k}={v}" for k, v in conditions.items() if k not in ("batch_costs", "costs", "pays_until"))
    files["markdown"].write_text(
        "# Speculative decoding at batch sizes above 1\n\nConditions: " + conds + "\n\nEach speedup divides by "
        "target-only decoding at the same batch size, in the same interleaved run; interval across groups of "
        "prompts.\n\n" + batch_table(records) + "\n\nWhere it pays: " + json.dumps(conditions["pays_until"]) + "\n")
    return files
