"""Write evaluation results: results.json, a markdown table, and plots."""

from __future__ import annotations

import json
import logging
import math
import os
from contextlib import contextmanager
from pathlib import Path

from data.progress import progress_bar

log = logging.getLogger("draftsmith.eval")

COLUMNS = ["engine", "draft", "proposer", "auto_off", "domain", "gamma", "confidence_threshold", "temperature", "alpha", "tau",
           "mean_drafted", "accepted_per_proposed", "target_tok_s", "spec_tok_s", "speedup_over", "speedup",
           "speedup_ci",
           "decode_speedup", "cost_ratio_c", "theoretical_speedup", "hardware_expected_speedup", "greedy_identical"]


def _fmt(v):
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.3f}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def markdown_table(records: list[dict]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in records:
        lines.append("| " + " | ".join(_fmt(r.get(c, "")) for c in COLUMNS) + " |")
    return "\n".join(lines)


def short(draft: str) -> str:
    """`run/export` for a draft folder (every export folder is named export)."""
    return "/".join(Path(draft).parts[-2:])


def cost_model_plot(records: list[dict], costs: dict, out: Path) -> Path:
    """Expected speedup against alpha, one curve per gamma, from the measured costs of the first draft, with the
    measured (alpha, speedup) of every record on top, in its gamma's colour: where the drafts are, and what alpha a
    goal would need."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from decode.core.metrics import hardware_speedup

    c = next(iter(costs.values()))
    alphas = [i / 100 for i in range(100)]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for g in range(1, min(len(c["target_pass_s"]), 9)):
        ax.plot(alphas, [hardware_speedup(a, g, c["draft_step_s"], c["target_pass_s"]) for a in alphas],
                lw=1, color=f"C{(g - 1) % 10}", label=f"cost model, gamma={g}")
    for g, stops in sorted({(r["gamma"], bool(r.get("confidence_threshold"))) for r in records}):
        pts = [r for r in records if r["gamma"] == g and bool(r.get("confidence_threshold")) == stops
               and not math.isnan(r["alpha"])]  # drafts stopped by a threshold: triangles, gamma their longest
        ax.scatter([r["alpha"] for r in pts], [r["speedup"] for r in pts], marker="^" if stops else "x", zorder=3,
                   color=f"C{(g - 1) % 10}", label=f"measured, gamma<={g}, stopped when unsure" if stops
                   else f"measured, gamma={g}")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.axhline(1.5, color="grey", lw=0.8, ls=":")
    ax.set(xlabel="alpha (acceptance rate)", ylabel="speedup vs target-only", xlim=(0, 1),
           title=f"draft step {c['draft_step_s'] * 1e3:.1f} ms, target pass of 1 / 2 tokens "
                 f"{c['target_pass_s'][0] * 1e3:.1f} / {c['target_pass_s'][1] * 1e3:.1f} ms")
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path = out / "cost_model.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plots(records: list[dict], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    series = {}
    for r in records:
        series.setdefault((r["draft"], r["domain"], r["temperature"], r.get("confidence_threshold", 0.0)),
                          []).append(r)
    fig, axes = plt.subplots(1, 2, figsize=(13, 4))
    for (draft, domain, temp, threshold), rows in series.items():
        rows = sorted(rows, key=lambda r: r["gamma"])
        label = f"{short(draft)}/{domain}/T={temp}" + (f"/stop<{threshold:g}" if threshold else "")
        axes[0].plot([r["gamma"] for r in rows], [r["alpha"] for r in rows], marker="o", label=label)
        axes[1].plot([r["gamma"] for r in rows], [r["speedup"] for r in rows], marker="o", label=label)
        axes[1].plot([r["gamma"] for r in rows], [r["hardware_expected_speedup"] for r in rows], ls="--", alpha=0.5)
    axes[0].set(xlabel="gamma (drafted tokens per step)", ylabel="alpha (acceptance rate)", ylim=(0, 1.05))
    axes[1].axhline(1.0, color="grey", lw=0.8)
    axes[1].set(xlabel="gamma", ylabel="speedup vs target-only (dashed: cost model)")
    axes[1].legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    written.append(out / "acceptance_speedup_vs_gamma.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(13, 4))
    top = max(r["gamma"] for r in records)  # one curve per series, at the largest gamma (most positions)
    for r in (r for r in records if r["gamma"] == top):
        label = f"{short(r['draft'])}/{r['domain']}/T={r['temperature']}"
        label += f"/stop<{r['confidence_threshold']:g}" if r.get("confidence_threshold") else ""
        pp = r["per_position_accept"]
        axes[0].plot(range(1, len(pp) + 1), pp, marker=".", label=label)
        buckets = r.get("accept_by_entropy") or []
        axes[1].plot([b["bucket"] for b in buckets], [b["accept_rate"] for b in buckets], marker="o", label=label)
    axes[0].set(xlabel=f"draft position i (gamma={top})", ylabel="P(accept i | accepted < i)", ylim=(0, 1.05))
    axes[1].set(xlabel="target entropy at the position (nats)", ylabel="acceptance", ylim=(0, 1.05))
    axes[1].legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    written.append(out / "per_position_and_entropy.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)
    return written


def policy_label(r: dict, name_draft: bool = True) -> str:
    """A record's decoding policy in a few words: who drafts (when the run has several drafts), how, at what gamma."""
    kind = r.get("proposer", "draft")
    who = "" if not name_draft or kind in ("lookup", "router", "transformers lookup",
                                                                   "transformers plain") else short(r["draft"]) + " "
    gamma = str(r.get("gamma_setting", r["gamma"]))
    gamma = gamma[len("predicted"):] if gamma.startswith("predicted") else f"={gamma}"  # predicted: "≤<ceiling>"
    stop = f",stop<{r['confidence_threshold']:g}" if r.get("confidence_threshold") else ""
    off = "+auto-off" if r.get("auto_off") and kind != "router" else ""  # the router always has it
    return f"{who}{kind}{off} γ{gamma}{stop}"


def policy_plot(records: list[dict], out: Path) -> Path:
    """Speedup over target-only with its interval, one bar per decoding policy, one panel per (domain, T): which
    policy to deploy for this draft on this machine."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys((r["domain"], r["temperature"]) for r in records))
    no_model = ("lookup", "router", "transformers lookup", "transformers plain")
    several = len({r["draft"] for r in records if r.get("proposer") not in no_model}) > 1
    height = max(2.5, 0.32 * max(sum((r["domain"], r["temperature"]) == p for r in records) for p in panels) + 1)
    fig, axes = plt.subplots(1, len(panels), figsize=(max(6.5 * len(panels), 9), height), squeeze=False)
    for ax, (domain, temp) in zip(axes[0], panels):
        rows = [r for r in records if (r["domain"], r["temperature"]) == (domain, temp)]
        rows.sort(key=lambda r: r["speedup"])
        ys = range(len(rows))
        lo = [r["speedup"] - r.get("speedup_ci", [r["speedup"]] * 2)[0] for r in rows]
        hi = [r.get("speedup_ci", [r["speedup"]] * 2)[1] - r["speedup"] for r in rows]
        ax.barh(ys, [r["speedup"] for r in rows], xerr=[lo, hi], color=[
            "C7" if str(r.get("proposer")).startswith("transformers") else "C0" for r in rows], alpha=0.8)
        ax.set_yticks(list(ys), [policy_label(r, several) for r in rows], fontsize=7)
        ax.axvline(1.0, color="grey", lw=0.8)
        ax.set(xlabel="speedup vs the same engine's plain decoding (bars: interval across prompts)",
               title=f"{domain}, T={temp:g}")
    fig.tight_layout()
    path = out / "policies.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def grid_progress():
    """The progress bar of an evaluation grid: what runs now, done / total, time spent and time left (in a log file:
    a line a minute, data/progress.py)."""
    return progress_bar()


PARTIAL = "results.partial.json"


def write_partial(records: list[dict], conditions: dict, out: Path) -> Path:
    """The records measured so far, rewritten atomically after each one, so a crash or Ctrl-C keeps them.
    write_report removes the file once the full report is written."""
    out.mkdir(parents=True, exist_ok=True)
    path, tmp = out / PARTIAL, out / f".{PARTIAL}.tmp"
    tmp.write_text(json.dumps({"conditions": conditions, "records": records, "complete": False}, indent=1,
                              default=str))
    os.replace(tmp, path)
    return path


@contextmanager
def partial_on_error(out: Path):
    """Around a measuring loop that calls write_partial: if it stops early (crash, Ctrl-C), say where the records
    measured so far are, then let the error through."""
    try:
        yield
    except BaseException:
        if (out / PARTIAL).is_file():
            log.error("stopped early: the records measured so far are in %s", out / PARTIAL)
        raise


def reference_section(records: list[dict]) -> str:
    """results.md's "what training buys" table when the run named a reference draft (eval/reference.py)."""
    from eval.reference import reference_table

    table = reference_table(records)
    return ("\n## Against the reference draft\n\nEach draft's speed divided by the reference draft's, prompt by prompt "
            "paired (both took turns with the same target-only decoding), with its 95% interval: above 1, training "
            "paid.\n\n" + table + "\n") if table else ""


def write_report(records: list[dict], conditions: dict, out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = {"json": out / "results.json", "markdown": out / "results.md"}
    files["json"].write_text(json.dumps({"conditions": conditions, "records": records}, indent=1))
    conds = ", ".join(f"{k}={v}" for k, v in conditions.items() if k != "costs")
    files["markdown"].write_text(f"# Speculative decoding results\n\nConditions: {conds}\n\n"
                                 "tau counts the bonus/correction token (+1 included). speedup: wall time, each "
                                 "prompt's prefill included; decode_speedup: prefill taken out of both times (nan "
                                 "for transformers' rows, whose generate() does not split it).\n\n"
                                 + markdown_table(records) + "\n" + reference_section(records))
    ours = [r for r in records if r.get("engine", "draftsmith") == "draftsmith"  # other engines: table only
            and not str(r.get("proposer", "")).startswith("transformers")]
    chains = [r for r in ours if r.get("proposer", "draft") == "draft"]  # the per-gamma plots: one draft's chains
    for i, path in enumerate(plots(chains, out) if chains else []):
        files[f"plot{i}"] = path
    if len({r.get("proposer", "draft") for r in records}) > 1:
        files["policies"] = policy_plot(records, out)
    if conditions.get("costs") and ours:
        files["cost_model"] = cost_model_plot(ours, conditions["costs"], out)
    (out / PARTIAL).unlink(missing_ok=True)
    return files
