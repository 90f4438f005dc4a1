"""Paired differences in top-1 agreement between two weight formats or drafts, prompt by prompt, from run.log
(scripts/bench_draft_quant.py prints each prompt's agreed/judged counts per variant), with a 95% bootstrap interval
across prompts.
    python bench/decoding/draft-quant-qwen-medical/paired.py"""
import random
import re
from pathlib import Path

NAMES = ["0.5B float", "0.5B int8", "0.5B int4", "LoRA float", "LoRA int8", "LoRA int4"]
PAIRS = [(3, 0), (4, 1), (5, 2), (1, 0), (2, 0), (4, 3), (5, 3)]

lines = [line for line in (Path(__file__).parent / "run.log").read_text().splitlines() if line.startswith("prompt ")]
agreed = [[int(a) for a in re.findall(r"agree=(\d+)/", line)] for line in lines]
judged = sum(int(re.search(r"agree=\d+/(\d+)", line).group(1)) for line in lines)  # the same path for every variant
for i, j in PAIRS:
    diffs = [row[i] - row[j] for row in agreed]
    rng = random.Random(0)
    boot = sorted(sum(rng.choice(diffs) for _ in diffs) / judged for _ in range(4000))
    print(f"{NAMES[i]} - {NAMES[j]}: {sum(diffs) / judged:+.3f} [{boot[100]:+.3f}, {boot[3899]:+.3f}] ({len(lines)} prompts)")
