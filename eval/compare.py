"""Compare training runs from their local folders, for users without W&B access: one table (markdown and HTML)
and plots of the validation curves and final metrics.

    python eval/compare.py runs=[outputs/study/ce,outputs/study/forward_kl] out=outputs/compare/mine
    python eval/compare.py 'runs=[outputs/distill/*]'          # globs work

Each run folder needs summary.json (written at the end of train/distill.py) and, for the curves, csv/metrics.csv.
"""

from __future__ import annotations

if __name__ == "__main__":  # bad input ends here in about a second (one line, exit 2), before torch loads
    from eval.checks import check_compare
    from eval.shared.preflight import preflight

    preflight("compare", check_compare)

import base64
import csv
import glob
import html
import json
import math
from pathlib import Path

import hydra
from omegaconf import DictConfig

from eval.shared.preflight import usage_errors

# val/*: teacher-forced, and speculative decoding on the tune prompts during fit (curves); test/*: the final
# speculative figures on the test prompts (train/callbacks.py)
METRICS = ["val/expected_accept", "val/top1_agree", "val/kl", "val/alpha", "test/alpha", "test/tau", "test/speedup"]


def find_runs(patterns: list[str]) -> list[Path]:
    runs = []
    for pattern in patterns:
        matches = sorted(Path(p) for p in glob.glob(str(pattern))) or [Path(pattern)]
        for path in matches:
            if not (path / "summary.json").is_file():
                raise FileNotFoundError(f"{path} has no summary.json: not a finished training run. Fix: pass run "
                                        "folders of train/distill.py (outputs/<task>/<time>), or wait for the run.")
            runs.append(path)
    if not runs:
        raise ValueError("runs=[...] is empty. Fix: list run folders, e.g. runs=[outputs/distill/*].")
    return runs


def load_run(path: Path) -> dict:
    summary = json.loads((path / "summary.json").read_text())
    curves: dict[str, list[tuple[int, float]]] = {}
    metrics_csv = path / "csv" / "metrics.csv"
    if metrics_csv.is_file():
        with open(metrics_csv) as f:
            for row in csv.DictReader(f):
                for key in METRICS:
                    if row.get(key):
                        curves.setdefault(key, []).append((int(row["step"]), float(row[key])))
    name = summary.get("run_name") or path.name
    return {"name": name, "path": str(path), "summary": summary, "curves": curves}


def reference_rows(runs: list[dict]) -> list[list]:
    """One row per off-the-shelf draft and domain that runs started from (a pretrained draft, whole): its metrics
    before training (each run validates its draft first), the reference a trained draft has to beat."""
    table, seen = [], set()
    for r in runs:
        s, setup = r["summary"], r["summary"].get("setup", {})
        key = (setup.get("draft_from"), setup.get("domain"))
        if setup.get("draft") != "pretrained" or not s.get("before") or key in seen:
            continue
        seen.add(key)
        name = setup.get("draft_from") or "pretrained draft"
        table.append([f"{name} off the shelf (reference)", setup.get("domain", "?"), "–",
                      f"pretrained {setup.get('draft_layers', '?')}L", 0, None]
                     + [s["before"].get(m, float("nan")) for m in METRICS])
    return table


def rows(runs: list[dict]) -> tuple[list[str], list[list]]:
    """The table: the off-the-shelf references first (reference_rows), then every run's final metrics."""
    columns = ["run", "domain", "loss", "draft", "steps", "train s"] + [f"{m} (final)" for m in METRICS]
    table = reference_rows(runs)
    for r in runs:
        s, setup = r["summary"], r["summary"].get("setup", {})
        draft = f"{setup.get('draft', '?')} {setup.get('draft_layers', '?')}L" + (" +LoRA" if setup.get("lora") else "")
        table.append([r["name"], setup.get("domain", "?"), setup.get("loss", "?"), draft, s.get("steps"),
                      s.get("seconds")] + [s.get("after", {}).get(m, float("nan")) for m in METRICS])
    return columns, table


def _fmt(v) -> str:
    if isinstance(v, float):
        return "–" if math.isnan(v) else f"{v:.3f}"
    return "–" if v is None else str(v)


def to_markdown(columns, table) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in table]
    return "\n".join(lines) + "\n"


def plot(runs: list[dict], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for r in runs:
        for ax, key in zip(axes, ("val/expected_accept", "val/kl")):
            points = r["curves"].get(key)
            if points:
                ax.plot(*zip(*points), marker="o", label=r["name"])
    for ax, key in zip(axes, ("val/expected_accept", "val/kl")):
        ax.set_xlabel("step")
        ax.set_title(key)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    files.append(out / "curves.png")
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)

    refs = reference_rows(runs)  # the off-the-shelf drafts first, as in the table
    names = [row[0] for row in refs] + [r["name"] for r in runs]
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(names)), 4))
    for i, key in enumerate(("val/expected_accept", "val/top1_agree", "test/alpha")):
        col = 6 + METRICS.index(key)
        values = [row[col] for row in refs] + [r["summary"].get("after", {}).get(key, float("nan")) for r in runs]
        ax.bar([x + 0.27 * (i - 1) for x in range(len(names))], values, width=0.27, label=key)
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=7)
    ax.set_title("final metrics")
    ax.legend(fontsize=8)
    fig.tight_layout()
    files.append(out / "final.png")
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)
    return files


def to_html(columns, table, images: list[Path]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row) + "</tr>" for row in table)
    pictures = "".join(f'<p><img src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}"></p>'
                       for p in images)
    return ("<!doctype html><meta charset='utf-8'><title>Draftsmith run comparison</title>"
            "<style>body{font-family:sans-serif}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
            "padding:4px 8px;text-align:right}td:first-child{text-align:left}</style>"
            f"<h1>Run comparison</h1><table><tr>{head}</tr>{body}</table>{pictures}")


def compare(patterns: list[str], out: Path) -> dict[str, Path]:
    runs = [load_run(p) for p in find_runs(patterns)]
    out.mkdir(parents=True, exist_ok=True)
    columns, table = rows(runs)
    images = plot(runs, out)
    files = {"markdown": out / "compare.md", "html": out / "compare.html", "json": out / "compare.json"}
    files["markdown"].write_text(to_markdown(columns, table))
    files["html"].write_text(to_html(columns, table, images))
    files["json"].write_text(json.dumps({"columns": columns, "rows": table,
                                         "runs": [{k: r[k] for k in ("name", "path", "summary")} for r in runs]},
                                        indent=1, default=str))
    return {**files, **{p.stem: p for p in images}}


@hydra.main(config_path="../conf", config_name="compare", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with usage_errors():  # a usage error found on the way: one line, exit 2
        files = compare(list(cfg.runs), Path(cfg.out))
        print(files["markdown"].read_text())
        print("wrote " + ", ".join(str(p) for p in files.values()))


if __name__ == "__main__":
    main()
