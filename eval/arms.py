"""The settings eval/speculate.py times against target-only decoding: which arms a config asks for
(`proposer_arms`), the proposer each runs (`make_proposer`), what gamma=auto, tree.branching=auto and predicted gamma
choose on the tune prompts (never the reported ones), and transformers' own decoders as baselines (`hf_arms`)."""

from __future__ import annotations

import logging

from omegaconf import DictConfig

from data.prompts import encode_prompt, load_prompts
from decode.core.metrics import acceptance, best_gamma
from decode.core.replay import best_rule, best_tree, draft_positions, draft_ranks
from decode.core.speculative import DraftModelProposer, NoProposer, SamplingParams, generate_all
from decode.core.trees import static_tree
from decode.drafts.feature_drafts import is_feature_draft
from decode.proposers.eagle_tree import EagleTreeProposer
from decode.proposers.feature_decoding import MedusaTreeProposer, draft_proposer
from decode.proposers.ngram import LookupThenDraftProposer, PromptLookupProposer
from decode.proposers.predict_gamma import SurvivalStop, fit_calibration
from decode.proposers.router import Option, RouterProposer
from decode.proposers.schedule import HeuristicGammaProposer
from decode.proposers.tree import TreeProposer
from eval.checks import ROUTER, TREES, thresholds_of
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
    """(proposer kind, draft name or None, gamma, threshold) for every speculative run of one (domain, temperature):
    prompt lookup alone once per fixed gamma (it needs no draft), then each draft with each other kind (a tree once,
    its depth as gamma; predicted gamma once, max_auto_gamma its ceiling), then the router once (over lookup and
    every draft). gamma=auto and confidence thresholds apply to a draft model's own drafts only."""
    arms = []
    if "lookup" in proposers:
        arms += [("lookup", None, g, 0.0) for g in dict.fromkeys(g for g, _ in settings if g != "auto")]
    for name in drafts:
        for kind in (k for k in proposers if k not in ("lookup", ROUTER)):
            if kind in TREES:
                arms.append((kind, name, (tree_depths or {})[kind], 0.0))
            elif kind == "predicted":
                arms.append((kind, name, max_auto_gamma, 0.0))
            else:
                arms += [(kind, name, g, th) for g, th in settings  # a heuristic schedule under a ceiling of 1
                         if kind == "draft" or g != "auto" and (kind != "heuristic" or g != 1)]  # is a chain of 1
    if ROUTER in proposers:
        arms.append((ROUTER, None, router_gamma, 0.0))
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


def router_step_s(drafts: dict, costs: dict) -> dict:
    """Each router option's draft pass time, by the source name its steps record."""
    return {"lookup": 0.0, **{name: costs[name]["draft_step_s"] for name in drafts}}


def make_proposer(kind: str, draft, threshold: float, target, cfg: DictConfig, drafts: dict | None = None,
                  costs: dict | None = None, branching: list[int] | None = None):
    """The proposer of one arm: the draft model; the draft model with transformers' heuristic schedule (gamma is the
    ceiling); prompt lookup; lookup with the draft model where none matches; a static or dynamic token tree; or the
    router over prompt lookup and every draft (`drafts`, priced by their measured `costs`)."""
    if kind == "draft":  # a feature draft (Medusa, EAGLE-style) brings its own proposer and verifier
        return draft_proposer(draft, threshold)
    if kind == "heuristic":
        return HeuristicGammaProposer(DraftModelProposer(draft, threshold))
    if kind in TREES:  # feature drafts grow their own trees (decode/proposers/feature_decoding.py, decode/proposers/eagle_tree.py)
        make = {"medusa": MedusaTreeProposer, "eagle": EagleTreeProposer, "eagle3": EagleTreeProposer}.get(
            getattr(draft, "draft_kind", None), TreeProposer)
        if kind == "tree":  # `branching`: the shape tree.branching=auto chose
            return make(draft, branching=branching or list(cfg.tree.branching))
        return make(draft, depth=int(cfg.tree.depth), width=int(cfg.tree.width), top_k=int(cfg.tree.top_k))
    vocab = target.get_output_embeddings().weight.shape[0]
    lookup = PromptLookupProposer(vocab, int(cfg.lookup.min_n), int(cfg.lookup.max_n), target.device)
    if kind == ROUTER:
        r, gammas = cfg.router, list(range(1, int(cfg.router.max_gamma) + 1))
        step_s = router_step_s(drafts, costs)
        options = [Option("lookup", lookup, 0.0, gammas)] if r.lookup else []
        options += [Option(name, DraftModelProposer(d), step_s[name], gammas) for name, d in drafts.items()]
        return RouterProposer(options, costs[next(iter(drafts))]["target_pass_s"], float(r.memory),
                              probe_every=int(r.probe_every), max_probe_every=int(r.max_probe_every),
                              timing_window=int(r.timing_window))
    return lookup if kind == "lookup" else LookupThenDraftProposer(lookup, DraftModelProposer(draft, threshold))


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

