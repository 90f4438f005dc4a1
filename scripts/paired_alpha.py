"""Paired alpha_tf differences between two drafts of one eval/acceptance.py run (same target continuations).

    python scripts/paired_alpha.py bench/training/study-160/results.json study160/generated_mix study160/ce

A and B name drafts by the end of their export path, without the trailing /export (any unique suffix works).
Prints A - B and its standard error over sequences for every (domain, temperature) in the file.
"""

from __future__ import annotations

import argparse
import json

from eval.acceptance import paired_difference


def pick(records: list[dict], name: str) -> dict:
    found = {r["draft"] for r in records if r["draft"].rstrip("/").removesuffix("/export").endswith(name)}
    if len(found) != 1:
        raise SystemExit(f"'{name}' matches {len(found)} drafts in this file ({sorted(found)}): give a unique suffix.")
    return {(r["domain"], r["temperature"]): r for r in records if r["draft"] in found}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("a")
    ap.add_argument("b")
    args = ap.parse_args()
    records = json.loads(open(args.results).read())["records"]
    a, b = pick(records, args.a), pick(records, args.b)
    for (domain, t), ra in a.items():
        rb = b[(domain, t)]
        diff, se = paired_difference(ra["beta_sums"], rb["beta_sums"], rb["lengths"])
        print(f"{domain} T={t:g}: {args.a} {ra['alpha_tf']:.3f} - {args.b} {rb['alpha_tf']:.3f} = {diff:+.3f} ± {se:.3f}")


if __name__ == "__main__":
    main()
