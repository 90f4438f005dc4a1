"""Benchmark the teacher-logit cache: draft-training throughput and resulting acceptance, live target vs cache.

    python scripts/bench_teacher_cache.py --max-train-tokens 100000 --steps 80

Runs, one after the other on an otherwise idle machine: (1) forward-KL training with the live target,
(2) scripts/cache_teacher.py over the same data, (3) the same training from the cache (teacher=cache),
(4) eval/acceptance.py on both exports: alpha_tf on the same target continuations (greedy and T=1), with the
paired difference cached - live and its standard error. Prints a table, saves JSON + markdown.
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from eval.acceptance import paired_difference

PYTHON = sys.executable


def run(cmd: list[str]) -> float:
    print("\n$ " + " ".join(cmd), flush=True)
    start = time.perf_counter()
    subprocess.run(cmd, check=True)
    return time.perf_counter() - start


def train_tokens_per_s(run_dir: Path) -> float:
    with open(run_dir / "csv" / "metrics.csv") as f:
        rates = [float(r["train/tokens_per_s"]) for r in csv.DictReader(f) if r.get("train/tokens_per_s")]
    return statistics.median(rates)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default="outputs/bench-teacher-cache")
    ap.add_argument("--out", default="bench/teacher-cache")
    ap.add_argument("--max-train-tokens", type=int, default=100_000, help="data size (the cache covers all of it)")
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--top-k", type=int, default=64)
    ap.add_argument("--n-prompts", type=int, default=12, help="per domain, for alpha_tf")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--domains", default="general,medical")
    args = ap.parse_args()
    runs, out = Path(args.runs), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    common = ["data=general", "loss=forward_kl", f"data.max_train_tokens={args.max_train_tokens}", f"trainer.max_steps={args.steps}",
              f"trainer.val_check_interval={args.steps}", "spec_eval.enabled=false", "progress_bar=none",
              "export.overwrite=true", "ckpt_path=null", "trainer.log_every_n_steps=1"]
    seconds = {"live": run([PYTHON, "train/distill.py", *common, f"paths.output_dir={runs / 'live'}"])}
    seconds["cache_build"] = run([PYTHON, "scripts/cache_teacher.py", "data=general", f"top_k={args.top_k}",
                                  f"data.max_train_tokens={args.max_train_tokens}", f"out={runs / 'teacher-cache'}"])
    seconds["cached"] = run([PYTHON, "train/distill.py", *common, "teacher=cache",
                             f"teacher_cache={runs / 'teacher-cache'}", f"paths.output_dir={runs / 'cached'}"])
    rates = {name: train_tokens_per_s(runs / name) for name in ("live", "cached")}
    summaries = {name: json.loads((runs / name / "summary.json").read_text()) for name in ("live", "cached")}
    evaluation = out / "acceptance"
    run([PYTHON, "eval/acceptance.py", f"drafts=[{runs / 'live' / 'export'},{runs / 'cached' / 'export'}]",
         f"domains=[{args.domains}]", "temperature=[0,1]", f"n_prompts={args.n_prompts}",
         f"max_new_tokens={args.max_new_tokens}", f"out={evaluation}"])
    records = json.loads((evaluation / "results.json").read_text())["records"]
    alpha = {}
    for key in dict.fromkeys((r["domain"], r["temperature"]) for r in records):
        pair = {Path(r["draft"]).parent.name: r for r in records if (r["domain"], r["temperature"]) == key}
        diff, stderr = paired_difference(pair["cached"]["beta_sums"], pair["live"]["beta_sums"], pair["live"]["lengths"])
        alpha[f"{key[0]} T={key[1]:g}"] = {"live": pair["live"]["alpha_tf"], "cached": pair["cached"]["alpha_tf"],
                                           "cached_minus_live": diff, "stderr": stderr,
                                           "positions": pair["live"]["positions"]}
    result = {"conditions": {**vars(args), "threads": torch.get_num_threads(), "torch": torch.__version__,
                             "cpu": platform.processor() or platform.machine()},
              "train_tokens_per_s_median": rates, "speedup_train_tokens_per_s": rates["cached"] / rates["live"],
              "seconds": seconds, "val_top1_agree": {n: s["after"]["val/top1_agree"] for n, s in summaries.items()},
              "alpha_tf": alpha}
    (out / "bench.json").write_text(json.dumps(result, indent=1))
    lines = ["| teacher | train tokens/s (median) | run seconds |", "|---|---|---|"]
    lines += [f"| {name} | {rates[name]:.0f} | {seconds[name]:.0f} |" for name in ("live", "cached")]
    lines += [f"\ncache build: {seconds['cache_build']:.0f} s (top-{args.top_k}); training throughput from the cache: "
              f"{result['speedup_train_tokens_per_s']:.2f}x the live target's\n",
              "| prompts | α_tf live | α_tf cached | cached − live (paired ± s.e.) | positions |", "|---|---|---|---|---|"]
    lines += [f"| {k} | {a['live']:.3f} | {a['cached']:.3f} | {a['cached_minus_live']:+.3f} ± {a['stderr']:.3f} | "
              f"{a['positions']} |" for k, a in alpha.items()]
    (out / "bench.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))

if __name__ == "__main__":
    main()
