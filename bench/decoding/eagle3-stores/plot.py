"""The learning curve of the stores' EAGLE-3 run: what it agrees with and accepts against the tokens it trained on.

    .venv/bin/python bench/decoding/eagle3-stores/plot.py bench/decoding/eagle3-stores-curve

Lines: the run's teacher-forced validation (val/expected_accept, val/top1_agree) at every validation step, from its
csv/metrics.csv. Points: greedy α in our decoder of each kept checkpoint's export on the test prompts, per domain
(measure.sh curve's results.json in the given folder), beside the off-the-shelf 0.5B's α on the same prompts
(dashed) and the issue's goal (dotted). x: tokens trained on = step x blocks per step x tokens per block (the run's
own config). Writes learning_curve.png into the folder.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path

RUN = Path("outputs/qwen-coder-eagle3-stores")
GOAL = 0.60  # issue #63: EAGLE-3 α on both domains
VAL = ("val/expected_accept", "val/top1_agree")


def tokens_per_step(run: Path) -> int:
    import yaml

    data = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())["data"]
    return int(data["batch_size"]) * int(data["block_size"])


def validation(run: Path) -> dict[str, list[tuple[int, float]]]:
    """Each val metric's (step, value) points, in step order (a resumed run logs each step once)."""
    curves = {k: {} for k in VAL}
    with open(run / "csv" / "metrics.csv") as f:
        for row in csv.DictReader(f):
            for k in VAL:
                if row.get(k):
                    curves[k][int(row["step"])] = float(row[k])
    return {k: sorted(v.items()) for k, v in curves.items()}


def decoding(folder: Path) -> tuple[dict[str, list[tuple[int, float]]], dict[str, float]]:
    """Greedy α per domain: the exports' (step, α) and the reference draft's α."""
    points, reference = {}, {}
    for r in json.loads((folder / "results.json").read_text())["records"]:
        if r.get("proposer") != "draft" or r.get("temperature") != 0:
            continue
        step = re.search(r"export-step(\d+)$", str(r["draft"]))
        if step:
            points.setdefault(r["domain"], []).append((int(step.group(1)), r["alpha"]))
        else:
            reference[r["domain"]] = r["alpha"]
    return {d: sorted(p) for d, p in points.items()}, reference


def plot(folder: Path, run: Path = RUN) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per_step = tokens_per_step(run)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    curves = validation(run)
    for key, style in zip(VAL, ("-", "--")):
        steps = [(s, v) for s, v in curves[key] if s > 0]
        ax.plot([s * per_step for s, _ in steps], [v for _, v in steps], style, color="grey", label=f"{key} (val blocks)")
    points, reference = decoding(folder)
    for (domain, pts), color in zip(sorted(points.items()), ("tab:blue", "tab:orange", "tab:green")):
        ax.plot([s * per_step for s, _ in pts], [a for _, a in pts], "o-", color=color, label=f"EAGLE-3 α, {domain}")
        if domain in reference:
            ax.axhline(reference[domain], color=color, ls="--", lw=1, label=f"0.5B off the shelf α, {domain}")
    ax.axhline(GOAL, color="black", ls=":", lw=1, label=f"goal α {GOAL}")
    ax.set_xscale("log")
    ax.set_xlabel("tokens trained on")
    ax.set_ylabel("acceptance / agreement")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", ncol=2)
    ax.set_title("EAGLE-3 on Qwen2.5-Coder-1.5B: test-prompt α (greedy, γ=3) against training tokens", fontsize=9)
    fig.tight_layout()
    out = folder / "learning_curve.png"
    fig.savefig(out, dpi=120)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2 or not (Path(sys.argv[1]) / "results.json").is_file():
        sys.exit("usage: plot.py <folder with measure.sh curve's results.json>")
    print(plot(Path(sys.argv[1])))
