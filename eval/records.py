"""The records eval/speculate.py writes (one results.json row per setting measured): our decoder's, with its
acceptance, cost model and intervals across prompts; transformers' arms over transformers' plain generate(); served
engines' arms over the same engine's plain decoding (eval/engines.py); and the verdict an interval gives."""

from __future__ import annotations

import math

from decode.core.metrics import (acceptance, by_entropy, hardware_speedup, per_position_accept, replayed_speedup,
                                 theoretical_speedup, tree_acceptance)
from decode.core.stats import bootstrap_speedup_ci, ratio_alpha_ci, ratio_of_sums_speedup
from eval.hf_arms import PLAIN as HF_PLAIN
from eval.shared.server_process import first_difference


def intervals(spec: dict, base: dict, level: float) -> dict:
    """95% (or `level`) bootstrap intervals across prompts of the speedup (each prompt's target-only and speculative
    times paired) and of alpha, plus the per-prompt figures they come from."""
    spec_tokens, base_tokens = [len(t) for t in spec["tokens"]], [len(t) for t in base["tokens"]]
    accepted, judged, start = [], [], 0
    for n in spec["prompt_steps"]:
        stats = acceptance(spec["steps"][start:start + n])
        accepted.append(stats["accepted"])
        judged.append(stats["accepted"] + stats["rejected"])
        start += n
    return {"speedup_ci": list(bootstrap_speedup_ci(base["prompt_seconds"], spec["prompt_seconds"], base_tokens,
                                                    spec_tokens, level)),
            "alpha_ci": list(ratio_alpha_ci(accepted, judged, level)), "ci_level": level,
            **decode_speedup(spec, base, level),
            "per_prompt": {"target_s": base["prompt_seconds"], "spec_s": spec["prompt_seconds"],
                           "target_prefill_s": base.get("prompt_prefill_seconds"),
                           "spec_prefill_s": spec.get("prompt_prefill_seconds"),
                           "target_tokens": base_tokens, "spec_tokens": spec_tokens,
                           "accepted": accepted, "judged": judged}}


def decode_speedup(spec: dict, base: dict, level: float) -> dict:
    """The speedup of the decoding phase alone (each prompt's prefill taken out of both times: the target's, and the
    draft's own pass over the prompt where the proposer reads it up front; the router reads it lazily, inside
    decoding) with its interval across prompts: what a longer answer tends to, since prefill is paid once per
    prompt. nan where a run does not split its prefill out (transformers' generate)."""
    base_pre, spec_pre = base.get("prompt_prefill_seconds"), spec.get("prompt_prefill_seconds")
    if not base_pre or not spec_pre:
        return {"decode_speedup": float("nan"), "decode_speedup_ci": [float("nan")] * 2}
    base_s = [t - p for t, p in zip(base["prompt_seconds"], base_pre)]
    spec_s = [t - p for t, p in zip(spec["prompt_seconds"], spec_pre)]
    base_tokens, spec_tokens = [len(t) for t in base["tokens"]], [len(t) for t in spec["tokens"]]
    return {"decode_speedup": ratio_of_sums_speedup(base_s, spec_s, base_tokens, spec_tokens),
            "decode_speedup_ci": list(bootstrap_speedup_ci(base_s, spec_s, base_tokens, spec_tokens, level))}


def accept_by_entropy(steps) -> list[dict]:
    """Acceptance events of the judged positions, bucketed by the target's entropy there."""
    entropies, accepted = [], []
    for s in steps:
        entropies += s.entropies
        accepted += [float(i < s.accepted) for i in range(len(s.entropies))]
    return by_entropy(entropies, accepted)


def expected_speedups(steps, alpha: float, gamma: int, threshold: float, costs: dict,
                      proposer: str = "draft") -> tuple[float, float]:
    """(Leviathan's theoretical, hardware-aware expected) speedup. Fixed-length drafts: from alpha (i.i.d.) and
    gamma. Drafts of varying length (stopped by a confidence threshold, or from prompt lookup, which drafts only
    where it finds a match and costs no model step) are priced by the cost model replayed on the steps that ran
    (decode/core/metrics.py replayed_speedup): flat target passes and c for the first, measured ones."""
    if math.isnan(alpha):
        return float("nan"), float("nan")
    if threshold > 0 or proposer != "draft":
        flat = [1.0] * len(costs["target_pass_s"])
        c, step_s = costs["cost_ratio_c"], costs["draft_step_s"]
        if proposer == "router":  # each step priced by the proposer that drafted it
            c = {k: v / costs["target_pass_s"][0] for k, v in costs["router_step_s"].items()}
            step_s = costs["router_step_s"]
        return (replayed_speedup(steps, c, flat), replayed_speedup(steps, step_s, costs["target_pass_s"]))
    return (theoretical_speedup(alpha, gamma, costs["cost_ratio_c"]),
            hardware_speedup(alpha, gamma, costs["draft_step_s"], costs["target_pass_s"]))


def make_record(draft: str, domain: str, gamma: int, label, temperature: float, n_prompts: int, spec: dict,
                base: dict, costs: dict, threshold: float = 0.0, level: float = 0.95, proposer: str = "draft",
                auto_off: bool = False) -> dict:
    """One results.json record from a speculative pass, its target-only baseline and the measured costs (with
    `auto_off`, steps that drafted nothing are priced as such: the cost model replays the steps)."""
    stats = acceptance(spec["steps"])
    alpha = stats["alpha"]
    theoretical, expected = expected_speedups(spec["steps"], alpha, gamma, threshold, costs,
                                              "auto-off" if auto_off else proposer)
    lookup_steps = sum(s.source == "lookup" and s.drafted > 0 for s in spec["steps"])  # steps lookup found a match
    return {"engine": "draftsmith", "speedup_over": "draftsmith target-only", "tok_s": spec["tok_s"],
            "draft": draft, "proposer": proposer, "domain": domain, "gamma": gamma, "gamma_setting": label,
            "temperature": temperature, "confidence_threshold": threshold,
            "lookup_step_fraction": lookup_steps / len(spec["steps"]) if spec["steps"] else float("nan"),
            "n_prompts": n_prompts, "new_tokens": spec["new_tokens"], "alpha": alpha, "tau": stats["tau"],
            "accepted_per_proposed": stats["accepted_per_proposed"],
            "mean_drafted": stats["drafted"] / stats["verify_calls"] if stats["verify_calls"] else float("nan"),
            "per_position_accept": per_position_accept(spec["steps"], gamma),
            "target_tok_s": base["tok_s"], "spec_tok_s": spec["tok_s"], "speedup": spec["tok_s"] / base["tok_s"],
            "cost_ratio_c": costs["cost_ratio_c"],
            "theoretical_speedup": theoretical, "hardware_expected_speedup": expected,
            "accept_by_entropy": accept_by_entropy(spec["steps"]),
            "tree_acceptance": tree_acceptance(spec["steps"]),
            "greedy_identical": spec["tokens"] == base["tokens"] if temperature == 0 else None,
            **intervals(spec, base, level)}


def make_hf_record(draft: str, proposer: str, domain: str, gamma, temperature: float, n_prompts: int, run: dict,
                   base: dict, level: float) -> dict:
    """One results.json record for a transformers arm (eval/hf_arms.py): its speedup (and interval) over `base`,
    transformers' own plain generate() on the same prompts (one engine); tau is tokens per target forward pass
    (counted); alpha is not reported by transformers (nan). Compare engines by their tok_s."""
    passes = sum(p for p in run["target_passes"] if p)
    tokens = [len(t) for t in run["tokens"]]
    return {"engine": "transformers", "tok_s": run["tok_s"], "speedup_over": HF_PLAIN,
            "draft": draft, "proposer": proposer, "domain": domain, "gamma": gamma if gamma else "default",
            "gamma_setting": gamma if gamma else "transformers default", "temperature": temperature,
            "confidence_threshold": 0.0, "n_prompts": n_prompts, "new_tokens": run["new_tokens"],
            "alpha": float("nan"), "tau": run["new_tokens"] / passes if passes else float("nan"),
            "target_passes": passes, "target_tok_s": base["tok_s"], "spec_tok_s": run["tok_s"],
            "speedup": run["tok_s"] / base["tok_s"], "cost_ratio_c": float("nan"),
            "theoretical_speedup": float("nan"), "hardware_expected_speedup": float("nan"),
            "greedy_identical": run["tokens"] == base["tokens"] if temperature == 0 else None,
            "speedup_ci": list(bootstrap_speedup_ci(base["prompt_seconds"], run["prompt_seconds"],
                                                    [len(t) for t in base["tokens"]], tokens, level)),
            "decode_speedup": float("nan"), "decode_speedup_ci": [float("nan")] * 2,  # generate() keeps prefill in
            "ci_level": level, "per_prompt": {"target_s": base["prompt_seconds"], "spec_s": run["prompt_seconds"],
                                              "target_tokens": [len(t) for t in base["tokens"]], "spec_tokens": tokens}}


def make_engine_record(setting, domain: str, temperature: float, n_prompts: int, run: dict, base: dict,
                       level: float) -> dict:
    """One results.json record for a served engine's arm (eval/engines.py): its speedup (and interval) over the
    same engine's plain decoding on the same prompts (`base`), its tok/s, and the server's own drafted / accepted
    counts (accepted/proposed); α where the engine also counts rejections (vLLM), else nan (llama.cpp)."""
    tokens, base_tokens = [len(t) for t in run["tokens"]], [len(t) for t in base["tokens"]]
    drafted, accepted = sum(d or 0 for d in run["drafted"]), sum(a or 0 for a in run["accepted"])
    rejected = [r for r in run.get("rejected") or [] if r is not None]
    alpha = accepted / (accepted + sum(rejected)) if rejected and accepted + sum(rejected) else float("nan")
    return {"engine": setting.engine, "speedup_over": f"{setting.engine} plain", "tok_s": run["tok_s"],
            "draft": setting.name, "proposer": setting.proposer, "domain": domain,
            "gamma": setting.gamma or "default", "gamma_setting": setting.gamma or f"{setting.engine} default",
            "temperature": temperature, "confidence_threshold": 0.0, "n_prompts": n_prompts,
            "new_tokens": run["new_tokens"], "alpha": alpha, "tau": float("nan"),
            "accepted_per_proposed": accepted / drafted if drafted else float("nan"), "drafted": drafted,
            "target_tok_s": base["tok_s"], "spec_tok_s": run["tok_s"], "speedup": run["tok_s"] / base["tok_s"],
            "speedup_ci": list(bootstrap_speedup_ci(base["prompt_seconds"], run["prompt_seconds"], base_tokens, tokens,
                                                    level)),
            "cost_ratio_c": float("nan"), "theoretical_speedup": float("nan"),
            "hardware_expected_speedup": float("nan"), "decode_speedup": float("nan"),
            "decode_speedup_ci": [float("nan")] * 2, "ci_level": level,
            "greedy_identical": run["tokens"] == base["tokens"] if temperature == 0 else None,
            "first_difference": ([first_difference(a, b) for a, b in zip(run["tokens"], base["tokens"])]
                                 if temperature == 0 else None),
            "per_prompt": {"target_s": base["prompt_seconds"], "spec_s": run["prompt_seconds"],
                           "target_tokens": base_tokens, "spec_tokens": tokens}}


def is_ours(record: dict) -> bool:
    """Our decoder's records (not a transformers baseline arm)."""
    return record.get("engine", "draftsmith") == "draftsmith" and not str(record.get("proposer", "")).startswith(
        "transformers")


VERDICTS = {"pays": "pays", "loses": "does NOT pay", "inconclusive": "is inconclusive (the interval spans 1x)"}


def verdict(record: dict) -> str:
    """'pays' when the speedup's whole interval is above 1, 'loses' when it is below, else 'inconclusive'."""
    lo, hi = record["speedup_ci"]
    return "pays" if lo > 1.0 else "loses" if hi < 1.0 else "inconclusive"

