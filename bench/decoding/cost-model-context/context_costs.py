"""What a k-token target pass costs after 42 cached tokens (the first general prompt) and after 42 + 128, as
decode/costs.measure_costs times it (int8 draft, head cut to 8192 ids, the CPU layouts of decode/kernels/fast_linear.py).

    python bench/decoding/cost-model-context/context_costs.py draft=outputs/distill/<run>/export

Prints two rounds of both and writes context_costs.json next to this file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


from decode.models.cpu_pair import load_cpu_pair
from data.prompts import encode_prompt, load_prompts
from decode.core.costs import measure_costs
from decode.kernels.fast_linear import fast_cpu_linears


def main(draft_dir: str) -> list[dict]:
    tokenizer, target, draft = load_cpu_pair(draft_dir)
    prompt = encode_prompt(tokenizer, load_prompts("general", 1)[0])
    rows = []
    with fast_cpu_linears([target, draft], 9, "auto"):
        for round_ in (1, 2):
            for context in (prompt, prompt + prompt[-1:] * 128):
                costs = measure_costs(target, draft, context, 6, repeats=9)
                rows.append({"round": round_, "context_tokens": len(context),
                             "target_pass_ms": [round(t * 1e3, 2) for t in costs["target_pass_s"]],
                             "draft_step_ms": round(costs["draft_step_s"] * 1e3, 2)})
                print(f"round {round_}, {len(context)} cached tokens: target pass k=1..6 "
                      + " / ".join(f"{t:.1f}" for t in rows[-1]["target_pass_ms"])
                      + f" ms, draft step {rows[-1]['draft_step_ms']:.2f} ms")
    out = Path(__file__).with_name("context_costs.json")
    out.write_text(json.dumps(rows, indent=1))
    print(f"wrote {out}")
    return rows


if __name__ == "__main__":
    main(dict(a.split("=", 1) for a in sys.argv[1:])["draft"])
