"""policy=auto (eval/speculate.py): every policy asked for runs on the tune prompts, the best by geometric mean
speedup over domains and temperatures is chosen, and only then measured on the test prompts."""

from __future__ import annotations

import logging
import math
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from decode.proposers.registry import PROPOSERS
from eval.checks import ROUTER
from eval.records import is_ours
from eval.report import write_report

log = logging.getLogger("draftsmith.eval")


def arm_key(arm: list) -> tuple:
    """An arm (proposer, draft, gamma as asked, threshold) as a hashable key, equal across a JSON round trip."""
    return tuple(map(str, arm))


def choose_policy(records: list[dict]) -> tuple[list, float]:
    """The arm (proposer, draft, gamma as asked, threshold) with the highest geometric mean speedup over the
    (domain, temperature) cells these records cover, among arms measured in all of them, and that mean. Pure."""
    cells = {(r["domain"], r["temperature"]) for r in records}
    by_arm: dict[tuple, list[float]] = {}
    for r in records:
        if is_ours(r) and r.get("arm") is not None:
            by_arm.setdefault(arm_key(r["arm"]), []).append(r)
    scored = [(math.exp(sum(math.log(max(r["speedup"], 1e-9)) for r in rs) / len(rs)), rs[0]["arm"])
              for rs in by_arm.values() if len(rs) == len(cells)]
    if not scored:
        raise ValueError("policy=auto found no policy measured in every domain and temperature.")
    score, arm = max(scored, key=lambda x: x[0])
    return arm, score


def auto_policy(cfg: DictConfig, measure, conditions: dict) -> list[dict]:
    """policy=auto: every policy asked for runs on the tune prompts (its report in out/tune); the best by geometric
    mean speedup over the domains and temperatures (`choose_policy`) then runs alone against the target on the test
    prompts, and those are the reported numbers. If the best does not beat the target alone on the tune prompts,
    the policy is "none" (serve the target alone), and the test run shows what the best would have done.
    `measure(cfg, baselines, only)`: eval/speculate.py's measure_all over these models (baselines: transformers'
    arms too; only: just these arms)."""
    tune_cfg = OmegaConf.merge(cfg, {"split": "tune", "out": str(Path(cfg.out) / "tune")})
    tuned = measure(tune_cfg, False, None)
    write_report(tuned, {**conditions, "policy_auto": "tune phase: every policy on the tune prompts"},
                 Path(tune_cfg.out))
    arm, score = choose_policy(tuned)
    log.info("policy=auto: on the tune prompts the best is %s (%.2fx, geometric mean over domains)%s", arm, score,
             "" if score > 1 else ": not above 1, so the policy is none (the target alone)")
    every = cfg.get("policy_test", "chosen") == "all"  # all: the test table holds every policy beside the choice
    records = measure(cfg, True, None if every else [arm])
    records = mark_choice(records, arm)
    kind, name, gamma, threshold = arm
    settings = policy_settings(cfg, kind)
    shapes = [r["tree_choice"]["branching"] for r in records if r.get("policy_auto") and r.get("tree_choice")]
    if shapes:  # tree.branching=auto: the shape chosen on the tune prompts of the first domain
        settings = {**settings, "branching": shapes[0]}
    conditions["policy"] = {
        "proposer": kind if score > 1 else "none", "draft": name, "gamma": gamma, "confidence_threshold": threshold,
        "candidate": {"proposer": kind, "draft": name, "gamma": gamma, "confidence_threshold": threshold},
        "settings": settings, "auto_off": bool(cfg.get("auto_off")) or kind == ROUTER,
        "tune_speedup_geomean": score, "tune_policies": len({arm_key(r["arm"]) for r in tuned if is_ours(r)}),
        "target": str(cfg.target), "threads": conditions["threads"], "device": conditions["device"],
        "max_new_tokens": cfg.max_new_tokens, "n_prompts": cfg.n_prompts,
        "test": [{k: r[k] for k in ("domain", "temperature", "gamma", "alpha", "tau", "speedup", "speedup_ci")}
                 for r in records if r.get("policy_auto")]}
    return records


def mark_choice(records: list[dict], arm: list) -> list[dict]:
    """The records of the arm policy=auto chose on the tune prompts, flagged `policy_auto` (with
    policy_test=all the test run measures every arm, so the choice is one row among the others). Pure."""
    return [{**r, "policy_auto": True} if is_ours(r) and r.get("arm") is not None
            and arm_key(r["arm"]) == arm_key(arm) else r for r in records]


def policy_settings(cfg: DictConfig, kind: str):
    """The config section a policy of this kind runs with (None for plain chains), for the export's record."""
    if kind not in PROPOSERS:  # none: the target alone
        return None
    section = PROPOSERS[kind].section  # decode/proposers/registry.py
    if PROPOSERS[kind].gamma == "ceiling":
        return {"max_auto_gamma": cfg.max_auto_gamma}
    return OmegaConf.to_container(cfg[section]) if section else None

