"""Join, check and convert embedded models once (what their first use would do), printing time and peak memory.

    python scripts/prepare_embedded.py qwen2.5-coder-1.5b-instruct qwen2.5-coder-0.5b-instruct   # make setup-qwen

Each model's GGUF (or its chunks, joined) is sha256-checked against the pin in decode/models/embedded.py and dequantized
to a float32 safetensors folder under $DRAFTSMITH_CACHE (default ~/.cache/draftsmith)/models/<name>; a model
already converted is skipped. Peak memory is this process's maximum resident set size.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from decode.models.embedded import REGISTRY, embedded_model_dir  # noqa: E402
from decode.kernels.runtime import peak_rss_gb  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="+", help=f"embedded model names: {', '.join(sorted(REGISTRY))}")
    ap.add_argument("--cache-dir", default=None, help="default: $DRAFTSMITH_CACHE or ~/.cache/draftsmith")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for name in args.names:
        key = name.removeprefix("embedded:")
        if key not in REGISTRY:  # argparse's error: one line, exit status 2
            ap.error(f"unknown embedded model '{name}'. Fix: one of {', '.join(sorted(REGISTRY))}.")
        start = time.time()
        try:
            folder = embedded_model_dir(key, args.cache_dir)
        except FileNotFoundError as e:  # its wheels are not installed (the message names the command)
            ap.error(str(e))
        size = sum(f.stat().st_size for f in folder.iterdir()) / 1024**3
        print(f"embedded:{key} -> {folder} ({size:.1f} GB on disk, {time.time() - start:.0f} s, "
              f"peak RSS of this process so far {peak_rss_gb():.1f} GB)")


if __name__ == "__main__":
    main()
