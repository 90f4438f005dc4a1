"""The settings eval/speculate.py times against target-only decoding: which arms a config asks for
(`proposer_arms`), the proposer each runs (`make_proposer`), what gamma=auto, tree.branching=auto and predicted gamma
choose on the tune prompts (never the reported ones), and transformers' own decoders as baselines (`hf_arms`)."""

from __future__ import annotations

import logging

from omegaconf import DictConfig

from data.prompts import encode_prompt, load_prompts
from decode.core.metrics import acceptance, best_gamma
from decode.core.replay import best_rule, best_tree, draft_positions, draft_ranks
from decode.core.speculative import NoProposer, SamplingParams, generate_all
from decode.core.trees import static_tree
from decode.drafts.feature_drafts import is_feature_draft
from decode.proposers.feature_decoding import draft_proposer
from decode.proposers.predict_gamma import SurvivalStop, fit_calibration
from decode.proposers.registry import PROPOSERS, TREES, Request, build_proposer
from eval.checks import thresholds_of
from eval.hf_arms import ASSISTED, LOOKUP as HF_LOOKUP, PLAIN as HF_PLAIN, hf_assisted, hf_lookup, hf_plain

log = logging.getLogger("draftsmith.eval")


def hf_arms(cfg: DictConfig, target, hf_drafts: dict) -> list[tuple]:
    """(draft name or None, proposer name, run) for each transformers arm asked for (`transformers`), after
    transformers' plain generate(), their baseline."""
    gamma = cfg.get("transformers_gamma")
    arms = [(None, HF_PLAIN, hf_plain(target))] if cfg.get("transformers") else []  # their baseline comes first
    if "lookup" in cfg.get("transformers", []):
        arms.append((None, HF_LOOKUP, hf_lookup(target, gamma, int(cfg.lookup.max_n))))
    for name, draft in hf_drafts.items():
        arms.append((name, ASSISTED, hf_assisted(target, draft, gamma)))
    return arms


def proposer_arms(drafts: list[str], settings: list[tuple], proposers: list[str], tree_depths: dict | None = None,
                  router_gamma: int = 0, max_auto_gamma: int = 8) -> list[tuple]:
    """(proposer kind, draft name or None, gamma, threshold) for every speculative run of one (domain, temperature),
    as each proposer's registry entry says (decode/proposers/registry.py): one without a draft model runs once per
    fixed gamma; then each draft with each kind that drafts with one (a tree once, its depth as gamma; a stop rule
    once, max_auto_gamma its ceiling; chains at every gamma asked, or every fixed one); then each kind over every
    draft once (the router). gamma=auto and confidence thresholds apply to a draft model's own chains only."""
    kinds = [PROPOSERS[k] for k in proposers]
    fixed = list(dict.fromkeys(g for g, _ in settings if g != "auto"))
    arms = [(k.name, None, g, 0.0) for k in kinds if k.drafts_with == "none" for g in fixed]
    for name in drafts:
        for k in (k for k in kinds if k.drafts_with == "draft"):
            if k.gamma == "depth":
                arms.append((k.name, name, (tree_depths or {})[k.name], 0.0))
            elif k.gamma == "ceiling":
                arms.append((k.name, name, max_auto_gamma, 0.0))
            else:
                arms += [(k.name, name, g, th) for g, th in settings
                         if k.gamma == "asked" or g != "auto" and g >= k.min_gamma]
    arms += [(k.name, None, router_gamma, 0.0) for k in kinds if k.drafts_with == "every"]
    return arms


def auto_tree(cfg: DictConfig) -> bool:
    return cfg.tree.branching == "auto"


def tree_depths(cfg: DictConfig) -> dict:
    return {"tree": int(cfg.tree.max_depth) if auto_tree(cfg) else len(cfg.tree.branching),
            "dynamic_tree": int(cfg.tree.depth)}


def tree_rows(cfg: DictConfig) -> int:
    """The most tokens a tree asked for puts in one target pass beyond the pending one (0 without trees)."""
    return max([0] + [tree_size(cfg, k) for k in TREES if k in cfg.proposers])


def tree_size(cfg: DictConfig, kind: str) -> int | None:
    """Tokens a tree proposer's target pass verifies beyond the pending one (None for chains)."""
    if kind == "tree":
        return int(cfg.tree.max_nodes) if auto_tree(cfg) else len(static_tree(list(cfg.tree.branching))) - 1
    if kind == "dynamic_tree":
        return min(int(cfg.tree.top_k), int(cfg.tree.width)) + int(cfg.tree.width) * (int(cfg.tree.depth) - 1)
    return None


def make_proposer(kind: str, draft, threshold: float, target, cfg: DictConfig, drafts: dict | None = None,
                  costs: dict | None = None, branching: list[int] | None = None, stop_rule=None):
    """The proposer of one arm, built by name from decode/proposers/registry.py (`cfg` gives the tree, lookup and
    router settings; `drafts` and their measured `costs` the router's options; `branching` the shape
    tree.branching=auto chose; `stop_rule` the one fitted for predicted gamma)."""
    return build_proposer(kind, Request(draft=draft, threshold=threshold, target=target, settings=cfg, drafts=drafts,
                                        costs=costs, branching=branching, stop_rule=stop_rule))


def draft_settings(gammas: list, thresholds: list[float]) -> list[tuple]:
    """The (gamma, confidence_threshold) pairs to run. gamma=1 runs once, without one: a threshold acts only after a
    drafted token that is not the last, so it cannot change a one-token draft. gamma=auto runs once and chooses its
    threshold among those given (choose_auto)."""
    return [(g, th) for g in gammas for th in ([0.0] if g in ("auto", 1) else thresholds)]


def tune_set(cfg: DictConfig, tokenizer, target, domain: str, eos, tune: dict | None = None,
             greedy: bool = True) -> dict:
    """The tune prompts of `domain` (never the reported ones) and, with `greedy`, the target's greedy continuations
    of them; `tune` (made earlier for this domain) is reused and completed."""
    if tune is None:
        tune = {"prompts": [encode_prompt(tokenizer, p) for p in load_prompts(domain, cfg.n_prompts, cfg.prompts_file,
                                                                               "tune")]}
    if greedy and "greedy" not in tune:
        tune["greedy"] = generate_all(target, NoProposer(), tune["prompts"], 0, cfg.max_new_tokens, SamplingParams(0.0),
                                      eos, cfg.seed)["tokens"]
    return tune


def choose_tree(cfg: DictConfig, draft, tune: dict, costs: dict) -> dict:
    """tree.branching=auto: the static tree the measured cost model expects fastest on the tune prompts' greedy paths
    (decode/core/replay.py best_tree, an exact replay of greedy tree decoding), within auto_tolerance."""
    ranks = draft_ranks(draft, tune["prompts"], tune["greedy"])
    best = best_tree(ranks, costs["draft_step_s"], costs["target_pass_s"], int(cfg.tree.max_depth),
                     int(cfg.tree.max_nodes), float(cfg.auto_tolerance))
    log.info("tree.branching=auto: %s (expected %.2fx on the tune prompts; the best chain %.2fx)", best["branching"],
             best["expected_speedup"], best["best_chain_expected_speedup"])
    return best


def predicted_stop(draft, tune: dict, costs: dict) -> SurvivalStop:
    """Per-step gamma predicted from the draft's confidence (decode/proposers/predict_gamma.py): the calibration of its
    confidence against the target's acceptance, fitted on the tune prompts' greedy paths, and the measured costs."""
    calibration = fit_calibration(draft_positions(draft, tune["prompts"], tune["greedy"]))
    return SurvivalStop(calibration, costs["draft_step_s"], costs["target_pass_s"])


def choose_auto(cfg: DictConfig, target, draft, tune: dict, params, eos, costs: dict) -> tuple:
    """gamma=auto: (gamma, confidence_threshold, label, expected speedup), chosen on the tune prompts (`tune_set`)
    only. Greedy: every gamma in 1..max_auto_gamma and every threshold asked for, replayed on the target's greedy
    path (decode/core/replay.py: exact acceptance, one teacher-forced draft pass per prompt). Sampling: a gamma=4 pilot
    for alpha, then the cost model's expected speedup per gamma for i.i.d. acceptance. Either way the simplest rule
    within `auto_tolerance` of the best expected one. A feature draft (Medusa, EAGLE-style) always takes the pilot
    route (its replay is not built), so no threshold is chosen for it."""
    passes, tolerance = costs["target_pass_s"][: cfg.max_auto_gamma + 1], float(cfg.auto_tolerance)
    prompts = tune["prompts"]
    if params.temperature == 0 and not is_feature_draft(draft):
        best = best_rule(draft_positions(draft, prompts, tune["greedy"]), costs["draft_step_s"], passes,
                         len(passes) - 1, thresholds_of(cfg), tolerance)
        gamma, threshold, expected = best["gamma"], best["confidence_threshold"], best["expected_speedup"]
    else:
        pilot = generate_all(target, draft_proposer(draft), prompts, 4, cfg.max_new_tokens, params, eos, cfg.seed)
        alpha = acceptance(pilot["steps"])["alpha"]
        (gamma, expected), threshold = best_gamma(alpha, costs["draft_step_s"], passes, tolerance), 0.0
    return gamma, threshold, f"auto:{gamma}" + (f",stop<{threshold:g}" if threshold else ""), expected

