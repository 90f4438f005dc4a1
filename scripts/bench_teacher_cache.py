"""Benchmark the teacher-logit cache: draft-training throughput and resulting acceptance, live target vs cache.

    python scripts/bench_teacher_cache.py --max-train-tokens 100000 --steps 80 --precisions 32-true,bf16-mixed

Runs, one after the other on an otherwise idle machine: (1) forward-KL training with the live target, once per
draft precision (trainer.precision), (2) scripts/cache_teacher.py over the same data (a fresh build, timed),
(3) the same trainings from the cache (teacher=cache), (4) eval/acceptance.py on all exports: alpha_tf on the same
target continuations (greedy and T=1), with paired differences (cached - live at each precision, and each live
precision - the first) and their standard errors. Prints a table, saves JSON + markdown.

The target always runs in its own dtype (float32 for the default), live and when building the cache, so both
teachers give the same logits; bf16-mixed makes only the draft's matmuls bfloat16 (autocast).
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import shutil
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


def tag(precision: str) -> str:
    return "fp32" if precision == "32-true" else precision.replace("-mixed", "").replace("-true", "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default="outputs/bench-teacher-cache")
    ap.add_argument("--out", default="bench/training/teacher-cache")
    ap.add_argument("--max-train-tokens", type=int, default=100_000, help="data size (the cache covers all of it)")
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--top-k", type=int, default=64)
    ap.add_argument("--precisions", default="32-true,bf16-mixed",
                    help="trainer.precision values, each run live and cached (the draft's arithmetic; the target "
                         "always runs in its own dtype, float32 here, live and when building the cache)")
    ap.add_argument("--n-prompts", type=int, default=12, help="per domain, for alpha_tf")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--domains", default="general,medical")
    args = ap.parse_args()
    runs, out = Path(args.runs), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    precisions = args.precisions.split(",")
    common = ["data=general", "loss=forward_kl", f"data.max_train_tokens={args.max_train_tokens}", f"trainer.max_steps={args.steps}",
              f"trainer.val_check_interval={args.steps}", "spec_eval.enabled=false", "progress_bar=none",
              "export.overwrite=true", "ckpt_path=null", "trainer.log_every_n_steps=1"]
    names = [f"{teacher}-{tag(p)}" for p in precisions for teacher in ("live", "cached")]
    seconds = {}
    for p in precisions:
        seconds[f"live-{tag(p)}"] = run([PYTHON, "train/distill.py", *common, f"trainer.precision={p}",
                                         f"paths.output_dir={runs / f'live-{tag(p)}'}"])
    shutil.rmtree(runs / "teacher-cache", ignore_errors=True)  # a finished cache would resume instantly: time a build
    seconds["cache_build"] = run([PYTHON, "scripts/cache_teacher.py", "data=general", f"top_k={args.top_k}",
                                  f"data.max_train_tokens={args.max_train_tokens}", f"out={runs / 'teacher-cache'}"])
    for p in precisions:
        seconds[f"cached-{tag(p)}"] = run([PYTHON, "train/distill.py", *common, f"trainer.precision={p}", "teacher=cache",
                                           f"teacher_cache={runs / 'teacher-cache'}",
                                           f"paths.output_dir={runs / f'cached-{tag(p)}'}"])
    rates = {name: train_tokens_per_s(runs / name) for name in names}
    summaries = {name: json.loads((runs / name / "summary.json").read_text()) for name in names}
    evaluation = out / "acceptance"
    run([PYTHON, "eval/acceptance.py", "drafts=[" + ",".join(str(runs / n / "export") for n in names) + "]",
         f"domains=[{args.domains}]", "temperature=[0,1]", f"n_prompts={args.n_prompts}",
         f"max_new_tokens={args.max_new_tokens}", f"out={evaluation}"])
    records = json.loads((evaluation / "results.json").read_text())["records"]
    # paired differences over the same continuations: the cache against the live target at each precision, and
    # each precision's live run against the first one's (what the draft's precision alone changes)
    pairs = [(f"cached-{tag(p)}", f"live-{tag(p)}") for p in precisions]
    pairs += [(f"live-{tag(p)}", f"live-{tag(precisions[0])}") for p in precisions[1:]]
    alpha = []
    for key in dict.fromkeys((r["domain"], r["temperature"]) for r in records):
        by = {Path(r["draft"]).parent.name: r for r in records if (r["domain"], r["temperature"]) == key}
        for a, b in pairs:
            diff, stderr = paired_difference(by[a]["beta_sums"], by[b]["beta_sums"], by[b]["lengths"])
            alpha.append({"prompts": f"{key[0]} T={key[1]:g}", "a": a, "b": b, "alpha_a": by[a]["alpha_tf"],
                          "alpha_b": by[b]["alpha_tf"], "a_minus_b": diff, "stderr": stderr,
                          "positions": by[b]["positions"]})
    speedup = {tag(p): rates[f"cached-{tag(p)}"] / rates[f"live-{tag(p)}"] for p in precisions}
    result = {"conditions": {**vars(args), "threads": torch.get_num_threads(), "torch": torch.__version__,
                             "cpu": platform.processor() or platform.machine(), "date": time.strftime("%Y-%m-%d")},
              "train_tokens_per_s_median": rates, "speedup_train_tokens_per_s": speedup, "seconds": seconds,
              "val_top1_agree": {n: s["after"]["val/top1_agree"] for n, s in summaries.items()}, "alpha_tf": alpha}
    (out / "bench.json").write_text(json.dumps(result, indent=1))
    lines = ["| run | train tokens/s (median step) | run seconds | val/top1_agree |", "|---|---|---|---|"]
    lines += [f"| {n} | {rates[n]:.0f} | {seconds[n]:.0f} | {result['val_top1_agree'][n]:.4f} |" for n in names]
    lines += [f"\ncache build: {seconds['cache_build']:.0f} s (top-{args.top_k}). Training throughput from the cache, "
              "against the live target at the same precision: "
              + ", ".join(f"{t} {x:.2f}x" for t, x in speedup.items()) + "\n",
              "| prompts | A | B | α_tf A | α_tf B | A − B (paired ± s.e.) | positions |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {a['prompts']} | {a['a']} | {a['b']} | {a['alpha_a']:.3f} | {a['alpha_b']:.3f} | "
              f"{a['a_minus_b']:+.3f} ± {a['stderr']:.3f} | {a['positions']} |" for a in alpha]
    (out / "bench.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
