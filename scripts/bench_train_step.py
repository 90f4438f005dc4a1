"""Benchmark one training step (forward + backward) of the default pair, for each loss path, side by side:
the fused head + loss pass (train/head_loss.py) against checkpointed chunks, glibc keeping freed memory
(decode/kernels/runtime.py) against its default, and the draft's arithmetic in bf16 (what trainer.precision=bf16-mixed
does: autocast around the draft; the target stays in fp32, as in training).

    python scripts/bench_train_step.py --repeats 4

Each (head, allocator) setting runs in its own process (the allocator setting cannot be undone in a process), one
after the other; inside, every step kind is warmed up once and timed `repeats` times, and the median is reported.
Token ids are random: every operation in a step is dense, so timings do not depend on the text. Prints a table and
saves JSON (default bench/training/train-step/).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

KINDS = ("live_jsd", "live_forward_kl", "cached_sparse_kl")
# (LM head pass, glibc keeps freed memory, draft autocast dtype)
SETTINGS = (("fused", True, "bf16"), ("fused", True, "fp32"), ("fused", False, "fp32"), ("checkpointed", True, "fp32"),
            ("checkpointed", False, "fp32"))


def time_steps(head_path: str, keep_memory: bool, precision: str, repeats: int, batch: int, block: int,
               layers: int) -> dict:
    """Median seconds per training step for each kind, in this process."""
    from decode.models.loading import load_frozen
    from decode.kernels.runtime import setup_cpu
    from train.drafts import truncated_draft
    from train.losses import chunked_distill, chunked_sparse_distill, forward_kl, jsd
    from train.module import final_hidden
    from train.teacher_cache import topk_of_target

    setup_cpu(None, keep_memory)
    torch.manual_seed(0)
    target = load_frozen("embedded:smollm2-135m-instruct")
    draft = truncated_draft(target, list(range(layers)))
    draft.get_input_embeddings().requires_grad_(False)  # the default: the tied embeddings/head stay frozen
    head = draft.get_output_embeddings()
    student_head = head if head_path == "fused" else torch.nn.Sequential(head)  # non-Linear: checkpointed path
    ids = torch.randint(0, target.config.vocab_size, (batch, block))
    batch_ = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[:, -1] = False
    cache = topk_of_target(target, ids, 64)

    def draft_precision():
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")

    def live(loss):
        with torch.no_grad():
            teacher = final_hidden(target, batch_)
        with draft_precision():  # chunked_distill runs the target's head outside autocast itself
            return chunked_distill(final_hidden(draft, batch_), teacher, student_head,
                                   target.get_output_embeddings(), mask, loss)["loss"]

    def cached():
        with draft_precision():
            return chunked_sparse_distill(final_hidden(draft, batch_), student_head, mask, cache["teacher_ids"],
                                          cache["teacher_logp"], cache["teacher_tail"])["loss"]

    steps = {"live_jsd": lambda: live(jsd), "live_forward_kl": lambda: live(forward_kl), "cached_sparse_kl": cached}
    result = {}
    for kind in KINDS:
        times = []
        for i in range(repeats + 1):  # the first is a warm-up
            draft.zero_grad(set_to_none=True)
            start = time.perf_counter()
            steps[kind]().backward()
            if i:
                times.append(time.perf_counter() - start)
        result[kind] = statistics.median(times)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--batch", type=int, default=4, help="blocks per step (the default data.batch_size)")
    ap.add_argument("--block", type=int, default=256, help="tokens per block (the default data.block_size)")
    ap.add_argument("--layers", type=int, default=4, help="draft layers (the default truncated draft keeps 4)")
    ap.add_argument("--out", default="bench/training/train-step")
    ap.add_argument("--one", nargs=3, metavar=("HEAD", "KEEP", "PRECISION"), help=argparse.SUPPRESS)  # child mode
    args = ap.parse_args()
    sizes = (args.repeats, args.batch, args.block, args.layers)
    if args.one:
        print(json.dumps(time_steps(args.one[0], args.one[1] == "1", args.one[2], *sizes)))
        return
    rows = []
    for head_path, keep, precision in SETTINGS:
        cmd = [sys.executable, __file__, "--one", head_path, "1" if keep else "0", precision,
               "--repeats", str(args.repeats), "--batch", str(args.batch), "--block", str(args.block), "--layers", str(args.layers)]
        print(f"timing head={head_path} keep_freed_memory={keep} draft={precision} ...", flush=True)
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        rows.append({"head": head_path, "keep_freed_memory": keep, "draft_precision": precision,
                     "seconds": json.loads(out)})
    tokens = args.batch * args.block
    lines = ["| head | keep_freed_memory | draft | " + " | ".join(f"{k} (s/step)" for k in KINDS) + " |",
             "|---|---|---|" + "---|" * len(KINDS)]
    lines += [f"| {r['head']} | {r['keep_freed_memory']} | {r['draft_precision']} | "
              + " | ".join(f"{r['seconds'][k]:.2f}" for k in KINDS) + " |" for r in rows]
    mixed, best, worst = rows[0]["seconds"], rows[1]["seconds"], rows[-1]["seconds"]
    lines.append("\n" + ", ".join(f"{k}: {worst[k] / best[k]:.2f}x faster, {tokens / best[k]:.0f} tokens/s"
                                  for k in KINDS) + f" (fused + kept memory vs checkpointed + glibc default, fp32; "
                 f"{tokens} tokens per step)")
    for name, row in (("fp32", best), ("bf16 draft", mixed)):
        lines.append(f"cache vs live forward KL, fused + kept memory, {name}: "
                     f"{row['live_forward_kl'] / row['cached_sparse_kl']:.2f}x")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    conditions = {"batch": args.batch, "block": args.block, "draft_layers": args.layers, "repeats": args.repeats,
                  "threads": torch.get_num_threads(), "torch": torch.__version__, "cpu": platform.processor()
                  or platform.machine(), "date": time.strftime("%Y-%m-%d")}
    (out / "bench.json").write_text(json.dumps({"conditions": conditions, "rows": rows}, indent=1))
    (out / "bench.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
