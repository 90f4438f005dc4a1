"""How sure the draft is, against how often the target agrees: the data behind `confidence_threshold`.

Along the target's own greedy continuations of the built-in prompts, the draft (int8, head cut to 8192 ids, as it
decodes on CPU) is run teacher-forced; each position gives the draft's top-1 probability and whether its argmax is the
target's token. For greedy decoding this is exact: the decoder accepts a drafted token iff it is the target's next
greedy token, and after any rejection decoding continues on the target's path. Then every stopping rule is replayed
on those positions (decode/core/replay.py, as `eval/speculate.py gamma=auto` does) and priced with the cost model measured
here (decode/core/costs.py).

    python bench/decoding/confidence-stop/calibration.py draft=outputs/distill/<run>/export

Prints the calibration table and the expected speedups; writes calibration.json next to this file (or out=<file>).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from decode.models.cpu_pair import load_cpu_pair
from data.prompts import encode_prompt, load_prompts
from decode.core.costs import measure_costs
from decode.kernels.fast_linear import fast_cpu_linears
from decode.models.loading import eos_token_ids
from decode.core.metrics import replayed_speedup
from decode.core.replay import draft_positions, replay_steps
from decode.core.speculative import NoProposer, generate

EDGES = (0.0, 0.2, 0.4, 0.6, 0.8, 0.9, 0.95, 1.0001)
MAX_GAMMA = 6


def main(draft_dir: str, out: Path, n_prompts: int = 12, max_new_tokens: int = 128) -> dict:
    tokenizer, target, draft = load_cpu_pair(draft_dir)
    eos = eos_token_ids(tokenizer, target)
    result = {"draft": draft_dir, "n_prompts": n_prompts, "max_new_tokens": max_new_tokens, "domains": {}}
    with fast_cpu_linears([target, draft], MAX_GAMMA + 1, "auto"):
        for domain in ("general", "medical"):
            prompts = [encode_prompt(tokenizer, p) for p in load_prompts(domain, n_prompts)]
            greedy = [generate(target, NoProposer(), p, 0, max_new_tokens, eos_token_ids=eos).tokens for p in prompts]
            paths = draft_positions(draft, prompts, greedy)
            costs = measure_costs(target, draft, prompts[0], MAX_GAMMA + 1)
            flat = [p for path in paths for p in path]
            table = []
            for lo, hi in zip(EDGES, EDGES[1:]):
                inside = [ok for c, ok in flat if lo <= c < hi]
                bucket = f"[{lo:g}, {min(hi, 1):g}{']' if hi > 1 else ')'}"
                table.append({"confidence": bucket, "share": len(inside) / len(flat),
                              "target_agrees": sum(inside) / len(inside) if inside else float("nan")})
            settings = [(g, th) for g in range(1, MAX_GAMMA + 1) for th in (0.0, 0.5, 0.7, 0.8, 0.9, 0.95)
                        if g > 1 or th == 0]  # a threshold cannot shorten a one-token draft
            rules = []
            for g, th in settings:
                steps = replay_steps(paths, g, th)
                expected = replayed_speedup(steps, costs["draft_step_s"], costs["target_pass_s"])
                rules.append({"gamma": g, "threshold": th, "mean_drafted": sum(d for d, _ in steps) / len(steps),
                              "expected_speedup": expected})
            result["domains"][domain] = {"positions": len(flat), "calibration": table, "costs": costs, "rules": rules}
            print(f"\n{domain}: {len(flat)} positions, draft step {costs['draft_step_s'] * 1e3:.2f} ms, target pass "
                  + " / ".join(f"{t * 1e3:.1f}" for t in costs["target_pass_s"]) + " ms (k = 1..)")
            print("| draft top-1 probability | share of positions | target agrees |\n|---|---|---|")
            for row in table:
                print(f"| {row['confidence']} | {row['share']:.3f} | {row['target_agrees']:.3f} |")
            best = sorted(rules, key=lambda r: -r["expected_speedup"])[:5]
            print("best rules (cost model replayed on these positions): " + "; ".join(
                f"gamma<={r['gamma']} stop<{r['threshold']:g}: {r['expected_speedup']:.3f}x" for r in best))
            print("fixed gamma: " + ", ".join(f"{r['gamma']}: {r['expected_speedup']:.3f}x" for r in rules
                                              if r["threshold"] == 0))
    out.write_text(json.dumps(result, indent=1))
    print(f"\nwrote {out}")
    return result


if __name__ == "__main__":
    args = dict(a.split("=", 1) for a in sys.argv[1:])
    main(args["draft"], Path(args.get("out", Path(__file__).with_name("calibration.json"))))
