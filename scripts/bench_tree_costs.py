"""Where a token tree's time goes: the target's pass against the number of nodes it scores, and the tree's own costs
(the draft's pass per level, building the tree mask, compacting the KV cache to the accepted path).

    python scripts/bench_tree_costs.py --target embedded:qwen2.5-coder-1.5b-instruct \
        --draft embedded:qwen2.5-coder-0.5b-instruct --out bench/decoding/tree-costs-qwen

Every cost is the median of --repeats calls after a context of --context tokens is cached (each pass taken back
after the call), passes of different sizes taking turns, with the CPU matmul layout decoding uses (--cpu-matmul).
Writes results.json, results.md and tree_costs.png to --out. The cost model prices a tree step as one draft pass
per level plus one target pass over all nodes (decode/core/metrics.py); this shows how those grow with the tree.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch
from transformers import DynamicCache

from decode.core.trees import full_mask, static_tree
from decode.kernels.fast_linear import fast_cpu_linears
from decode.kernels.runtime import setup_cpu
from decode.kernels.timing import median_seconds_each
from decode.models.loading import load_frozen
from decode.proposers.tree import _tree_pass, compact_cache
from eval.shared.provenance import cpu_model, provenance

NODES = [1, 2, 4, 8, 16, 32, 64]


def cached(model, context: int) -> DynamicCache:
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(input_ids=torch.full((1, context), 100), cache=cache, use_cache=True, logits_to_keep=1)
    return cache


def tree_pass(model, cache, context: int, parents: list[int]):
    """A callable: one pass over the tree `parents` (root included) after the cached context, taken back after."""
    tokens = [100] * len(parents)

    def run():
        with torch.inference_mode():
            _tree_pass(model, cache, tokens, parents, context, slice(0, len(parents)))
            cache.crop(-len(parents))
    return run


def shapes(n: int) -> dict[str, list[int]]:
    """Trees of n drafted nodes: a chain (deep), one level (wide), and binary-ish (2 children a node)."""
    out = {"chain": static_tree([1] * n), "wide": static_tree([n])}
    parents = [-1]
    while len(parents) < n + 1:
        parents.append((len(parents) - 1) // 2)
    out["binary"] = parents
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="embedded:qwen2.5-coder-1.5b-instruct")
    ap.add_argument("--draft", default="embedded:qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--context", type=int, default=160, help="cached tokens before each pass")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cpu-matmul", default="prepacked", choices=["auto", "torch", "rows_first", "prepacked"],
                    help="the linear layout (decode/kernels/fast_linear.py); auto times every row count first")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", default="outputs/tree_costs")
    args = ap.parse_args()
    setup_cpu(args.threads)
    target, draft = load_frozen(args.target), load_frozen(args.draft)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"conditions": {"target": args.target, "draft": args.draft, "context": args.context,
                             "repeats": args.repeats, "cpu_matmul": args.cpu_matmul,
                             "threads": torch.get_num_threads(), "cpu": cpu_model() or platform.machine(),
                             "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
                             "provenance": provenance(args.target, [args.draft])}}
    with fast_cpu_linears([target, draft], max(NODES) + 1, args.cpu_matmul):
        tcache, dcache = cached(target, args.context), cached(draft, args.context)
        verify = {}
        for shape in ("chain", "wide", "binary"):
            fns = [tree_pass(target, tcache, args.context, shapes(n)[shape]) for n in NODES]
            verify[shape] = dict(zip(NODES, median_seconds_each(fns, args.repeats)))
            print(f"target pass, {shape} trees: " + ", ".join(f"{n}: {s * 1e3:.0f} ms" for n, s in
                                                               verify[shape].items()))
        one = median_seconds_each([tree_pass(target, tcache, args.context, [-1])], args.repeats)[0]
        widths = [1, 2, 4, 8, 16]
        level = dict(zip(widths, median_seconds_each(
            [tree_pass(draft, dcache, args.context, static_tree([w])) for w in widths], args.repeats)))
        print("draft pass per level of w nodes: " + ", ".join(f"{w}: {s * 1e3:.1f} ms" for w, s in level.items()))
    masks = {}
    for n in NODES:
        parents = shapes(n)["binary"]
        start = time.perf_counter()
        for _ in range(20):
            full_mask(parents, args.context)
        masks[n] = (time.perf_counter() - start) / 20
    compact = {}
    for depth in (1, 2, 4, 8):
        cache = cached(target, args.context + 64)
        times = []
        for _ in range(args.repeats):
            with torch.inference_mode():
                start = time.perf_counter()
                compact_cache(cache, args.context, [args.context + 2 * i for i in range(depth)])
                times.append(time.perf_counter() - start)
            cache = cached(target, args.context + 64) if _ + 1 < args.repeats else cache
        compact[depth] = statistics.median(times)
    result.update({"target_pass_s": {"pending_only": one, **{k: {str(n): s for n, s in v.items()}
                                                           for k, v in verify.items()}},
                   "draft_level_s": {str(w): s for w, s in level.items()},
                   "mask_build_s": {str(n): s for n, s in masks.items()},
                   "compact_cache_s": {str(d): s for d, s in compact.items()}})
    (out / "results.json").write_text(json.dumps(result, indent=1))
    rows = ["| nodes | target pass, chain | wide | binary | × 1-token pass (binary) | mask build |",
            "|---|---|---|---|---|---|"]
    for n in NODES:
        rows.append(f"| {n} | {verify['chain'][n] * 1e3:.0f} ms | {verify['wide'][n] * 1e3:.0f} ms | "
                    f"{verify['binary'][n] * 1e3:.0f} ms | {verify['binary'][n] / one:.2f} | {masks[n] * 1e3:.2f} ms |")
    table = "\n".join(rows)
    extra = ("Draft pass per level (w nodes): " + ", ".join(f"{w}: {s * 1e3:.1f} ms" for w, s in level.items())
             + ". Cache compaction to a path of d tokens: " + ", ".join(f"{d}: {s * 1e3:.2f} ms" for d, s in
                                                                     compact.items())
             + f". A 1-token target pass (the pending token alone): {one * 1e3:.0f} ms.")
    (out / "results.md").write_text(f"# Tree costs\n\n{table}\n\n{extra}\n\nConditions: "
                                    f"{json.dumps({k: v for k, v in result['conditions'].items() if k != 'provenance'})}\n")
    plot(verify, one, out)
    print(table + "\n" + extra + f"\nwrote {out}")


def plot(verify: dict, one: float, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for shape, costs in verify.items():
        ax.plot(list(costs), [s / one for s in costs.values()], marker="o", label=f"{shape} tree")
    ax.plot(NODES, [1 + n for n in NODES], ls=":", color="grey", label="n+1 single-token passes")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set(xlabel="drafted nodes scored in one target pass", ylabel="pass time / one 1-token pass",
           title="Verifying a tree: cost against node count")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "tree_costs.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
