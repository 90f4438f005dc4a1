"""Drawing one token from a vocabulary-sized distribution: torch.multinomial against decode/sampling.sample
(inverse CDF, one uniform per row). Sampled speculative decoding draws once per drafted token and once per step.

    python bench/decoding/sampling/bench_sample.py            # writes bench/decoding/sampling/bench_sample.json

Both take turns call by call (decode/costs.fastest_ms), fastest of `repeats` after a warm-up, so load from elsewhere
on a shared machine slows one call of each instead of one method.
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # a bench script run from anywhere: the repository

from decode.kernels.timing import fastest_ms  # noqa: E402
from decode.kernels.runtime import setup_cpu  # noqa: E402
from decode.core.sampling import sample  # noqa: E402


def main(repeats: int = 200) -> dict:
    setup_cpu(None, True)  # as the decoders run: freed buffers reused, not unmapped (decode/kernels/runtime.py)
    g = torch.Generator().manual_seed(0)
    rows = {}
    # the cut draft head, SmolLM2's vocabulary, Qwen's; and 8 rows at once (on-policy training draws a batch)
    for rows_, vocab in ((1, 8192), (1, 49152), (1, 151936), (8, 49152)):
        probs = torch.softmax(torch.randn(rows_, vocab, generator=g) * 3, -1)
        methods = {"torch.multinomial": lambda p=probs: torch.multinomial(p, 1, generator=g),
                   "decode.core.sampling.sample": lambda p=probs: sample(p, g)}
        rows[f"{rows_} x {vocab}"] = fastest_ms(methods, repeats)
    result = {"threads": torch.get_num_threads(), "torch": torch.__version__, "cpu": platform.processor() or platform.machine(),
              "repeats": repeats, "ms_per_draw": rows}
    print("| rows x vocabulary | torch.multinomial (ms) | decode.core.sampling.sample (ms) |\n|---|---|---|")
    for vocab, r in rows.items():
        print(f"| {vocab} | {r['torch.multinomial']:.3f} | {r['decode.core.sampling.sample']:.3f} |")
    out = Path(__file__).with_name("bench_sample.json")
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
