"""Is training worth it? Each draft measured against a reference draft (the off-the-shelf one a user already has)
in the same interleaved run: the paired per-prompt ratio of their speeds with its interval, and the difference in
alpha. Pure functions over speculate records (eval/speculate.py `reference_draft=`).

The two drafts decoded the same prompts, each taking turns with the same target-only decoding, so the ratio of their
speeds is a speedup of one over the other: `bootstrap_speedup_ci` with the reference as the baseline, prompts
resampled with each prompt's two timings kept together."""

from __future__ import annotations

from decode.core.stats import bootstrap_speedup_ci, ratio_of_sums_speedup

# what makes two records the same setting, apart from the draft (gamma=auto may pick another gamma for each draft:
# its setting, not its pick, is compared)
SETTING = ("engine", "proposer", "domain", "temperature", "confidence_threshold", "auto_off")


def setting_of(record: dict) -> tuple:
    gamma = str(record.get("gamma_setting", record.get("gamma"))).split(":")[0]
    return tuple(record.get(k) for k in SETTING) + (gamma,)


def over_reference(record: dict, reference: dict, level: float = 0.95) -> dict:
    """`record`'s draft against `reference`'s on the same prompts: speed ratio (ratio of sums of tokens over seconds,
    per prompt paired) with its bootstrap interval, and alpha difference."""
    ref, mine = reference["per_prompt"], record["per_prompt"]
    if len(ref["spec_s"]) != len(mine["spec_s"]):
        raise ValueError("a draft and its reference must have decoded the same prompts.")
    args = (ref["spec_s"], mine["spec_s"], ref["spec_tokens"], mine["spec_tokens"])
    return {"draft": reference["draft"], "speedup_ratio": ratio_of_sums_speedup(*args),
            "speedup_ratio_ci": list(bootstrap_speedup_ci(*args, level=level)),
            "alpha_diff": record["alpha"] - reference["alpha"]}


def add_reference(records: list[dict], reference: str, level: float = 0.95) -> int:
    """Give every record of another draft `over_reference` against the reference draft's record of the same setting
    (our decoder's rows; transformers' and llama.cpp's have no per-prompt split). Returns how many were given one."""
    refs = {setting_of(r): r for r in records if r.get("draft") == reference and "per_prompt" in r}
    n = 0
    for r in records:
        ref = refs.get(setting_of(r))
        if ref is not None and r is not ref and "per_prompt" in r:
            r["over_reference"] = over_reference(r, ref, level)
            n += 1
    return n


def reference_table(records: list[dict]) -> str:
    """Markdown: per setting, each draft beside the reference (alpha, speedup over target-only, ratio over the
    reference with its interval)."""
    rows = [r for r in records if "over_reference" in r]
    if not rows:
        return ""
    lines = ["| domain | T | proposer | draft | reference | α (ref) | speedup (ref) | ÷ reference [95% CI] | Δα |",
             "|---|---|---|---|---|---|---|---|---|"]
    by_setting = {setting_of(r): r for r in records if r.get("draft") == rows[0]["over_reference"]["draft"]}
    for r in rows:
        o, ref = r["over_reference"], by_setting.get(setting_of(r), {})
        lo, hi = o["speedup_ratio_ci"]
        lines.append(f"| {r['domain']} | {r['temperature']:g} | {r['proposer']} | {r['draft']} | {o['draft']} | "
                     f"{r['alpha']:.3f} ({ref.get('alpha', float('nan')):.3f}) | {r['speedup']:.2f}x "
                     f"({ref.get('speedup', float('nan')):.2f}x) | **{o['speedup_ratio']:.2f}x** [{lo:.2f}, {hi:.2f}] | "
                     f"{o['alpha_diff']:+.3f} |")
    return "\n".join(lines)
