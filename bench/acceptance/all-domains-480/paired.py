"""Paired alpha_tf differences against the default draft on the same target continuations (results.json here).

    python bench/acceptance/all-domains-480/paired.py

alpha_tf is sum(beta) / sum(length) over continuations; the difference of two drafts is the same ratio of their
beta sums' difference, and its standard error treats continuations as the unit (ratio estimator)."""
import json
import math
from pathlib import Path

records = json.loads((Path(__file__).parent / "results.json").read_text())["records"]
by = {(r["draft"].split("/")[-2], r["domain"], r["temperature"]): r for r in records}
base = "2026-11-30_23-00-35"  # the default draft (the demo's export)
for other, label in (("2026-11-30_23-54-58", "all_domains, 160 steps"), ("steps480", "all_domains, 480 steps")):
    for domain in ("general", "medical", "code"):
        for t in (0, 1):
            a, b = by[(base, domain, t)], by[(other, domain, t)]
            n, total = len(a["lengths"]), sum(a["lengths"])
            diff = (sum(b["beta_sums"]) - sum(a["beta_sums"])) / total
            resid = [(sb - sa) - diff * length for sa, sb, length in zip(a["beta_sums"], b["beta_sums"], a["lengths"])]
            stderr = math.sqrt(sum(x * x for x in resid) / (n * (n - 1))) / (total / n)
            print(f"{label:24s} {domain:8s} T={t}: {diff:+.3f} ± {stderr:.3f}")
