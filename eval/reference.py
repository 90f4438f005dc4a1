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


def choose(records: list[dict], reference: str, level: float = 0.95) -> dict:
    """The rule `choose.sh` applies on tune prompts: among the drafts other than `reference`, in the reference's one
    setting, the highest speedup over target-only wins. Each candidate is also set against the winner, prompts paired
    (`over_winner`), and `tie` says whether the runner-up's interval against the winner contains 1: the rule still
    names a winner, but the margin is not resolved by these prompts."""
    refs = [r for r in records if r.get("draft") == reference and "per_prompt" in r]
    if len(refs) != 1:
        raise ValueError(f"choose needs the reference {reference!r} measured in exactly one setting, found {len(refs)}.")
    candidates = [r for r in records if r.get("draft") != reference and "per_prompt" in r
                  and setting_of(r) == setting_of(refs[0])]
    if not candidates:
        raise ValueError("choose needs at least one draft besides the reference, in the reference's setting.")
    ranked = sorted(candidates, key=lambda r: r["speedup"], reverse=True)
    winner = ranked[0]
    rows = [{"draft": r["draft"], "alpha": r["alpha"], "cost_ratio_c": r.get("cost_ratio_c"), "speedup": r["speedup"],
             "speedup_ci": r.get("speedup_ci"), "over_reference": over_reference(r, refs[0], level),
             "over_winner": None if r is winner else over_reference(r, winner, level)} for r in ranked]
    lo, hi = rows[1]["over_winner"]["speedup_ratio_ci"] if len(rows) > 1 else (None, None)
    tie = lo is not None and lo <= 1.0 <= hi
    return {"rule": "the highest speedup over target-only wins", "reference": reference, "winner": winner["draft"],
            "tie": tie, "ranked": rows}


def _ratio(o: dict) -> str:
    lo, hi = o["speedup_ratio_ci"]
    return f"{o['speedup_ratio']:.2f}x [{lo:.2f}, {hi:.2f}]"


def choice_table(choice: dict) -> str:
    """Markdown: the candidates, fastest first, each against the reference and against the winner (paired)."""
    lines = ["| draft | α | c | speedup over target-only | ÷ reference [95% CI] | ÷ winner [95% CI] |",
             "|---|---|---|---|---|---|"]
    for r in choice["ranked"]:
        ci = r["speedup_ci"] or [float("nan")] * 2
        c = "–" if r["cost_ratio_c"] is None else f"{r['cost_ratio_c']:.3f}"
        win = "winner" if r["over_winner"] is None else _ratio(r["over_winner"])
        lines.append(f"| {r['draft']} | {r['alpha']:.3f} | {c} | {r['speedup']:.3f}x [{ci[0]:.2f}, {ci[1]:.2f}] "
                     f"| {_ratio(r['over_reference'])} | {win} |")
    verdict = (f"Chosen: {choice['winner']} ({choice['rule']})" +
               ("; a tie: the runner-up's paired interval against it contains 1, so these prompts do not resolve "
                "the margin." if choice["tie"] else "; the runner-up's paired interval against it lies below 1."))
    return "\n".join(lines + ["", verdict])
