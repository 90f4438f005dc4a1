"""Judge drafts by deployment: acceptance, tau, measured speedup and the cost model, per domain, gamma, temperature.

    python eval/speculate.py drafts=[outputs/distill/<run>/export] domains=[general,medical] gamma=[1,2,4] \
        temperature=[0,1.0] max_new_tokens=128 n_prompts=16 out=outputs/speculate/mine
    python eval/speculate.py drafts=[...] gamma=auto     # gamma chosen by the measured cost model, on tune prompts
    python eval/speculate.py drafts=[...] gamma=auto confidence_threshold=[0,0.5,0.8]  # greedy: gamma and threshold
    python eval/speculate.py drafts=[...] compile=true   # static KV caches + torch.compile (CUDA graphs on GPUs)
    python eval/speculate.py drafts=[...] draft_vocab=null  # the draft's full LM head (default on CPU: first 8192 ids)
    python eval/speculate.py drafts=[...] gamma=[4] confidence_threshold=[0,0.4,0.7]  # stop drafting when unsure
    python eval/speculate.py drafts=[...] proposers=[draft,lookup,lookup+draft,heuristic,tree,dynamic_tree,router]

Measures the `test` prompts of each domain (data/prompts.py; choices such as gamma=auto read `tune` only), with
target-only decoding and every setting taking turns prompt by prompt (eval/timing.py). Writes results.json (one
record per draft x domain x gamma x confidence_threshold x temperature), results.md and plots to `out`.
"""

from __future__ import annotations

if __name__ == "__main__":  # bad input ends here in about a second (one line, exit 2), before torch loads
    from eval.checks import check_speculate
    from eval.preflight import preflight

    preflight("speculate", check_speculate)

import contextlib
import logging
import math
import platform
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from eval.preflight import usage_errors
from decode.kernels.compiled import compile_mode, compiled_decoding, run_length
from decode.core.costs import decoding_context, measure_costs
from data.token_ranking import head_ranking, rank_source, saved_ranking
from decode.drafts.draft_vocab import restrict_vocab
from decode.proposers.eagle_tree import EagleTreeProposer
from decode.proposers.feature_decoding import MedusaTreeProposer, draft_proposer
from decode.drafts.feature_drafts import is_feature_draft
from decode.drafts.kinds import feature_kind_of
from decode.kernels.fast_linear import fast_cpu_linears
from decode.drafts.quantize import quantize_draft, weights_label
from decode.core.replay import best_rule, best_tree, draft_positions, draft_ranks
from eval.card import best_by_domain, write_card, write_policy
from eval.checks import LOOKUP, ROUTER, TREES, check_eval_config, check_prompt_lengths, thresholds_of
from eval.tracking import log_eval_to_wandb
from decode.models.loading import (eos_token_ids, load_drafts, load_frozen, load_tokenizer, model_vocab_size, resolve,
                                   special_token_ids)
from decode.core.metrics import (acceptance, best_gamma, by_entropy, hardware_speedup, per_position_accept,
                            replayed_speedup, theoretical_speedup, tree_acceptance)
from decode.proposers.ngram import LookupThenDraftProposer, PromptLookupProposer
from decode.proposers.predict_gamma import SurvivalStop, fit_calibration
from decode.proposers.router import Option, RouterProposer, with_auto_off
from decode.proposers.schedule import HeuristicGammaProposer
from decode.core.trees import static_tree
from decode.proposers.tree import TreeProposer
from decode.core.speculative import DraftModelProposer, NoProposer, SamplingParams, generate, generate_all
from decode.core.stats import bootstrap_speedup_ci, ratio_alpha_ci, ratio_of_sums_speedup
from eval.hf_arms import ASSISTED, LOOKUP as HF_LOOKUP, PLAIN as HF_PLAIN, hf_assisted, hf_lookup, hf_plain
from eval.provenance import provenance
from eval.reference import add_reference, reference_table
from eval.timing import Arm, timed_interleaved
from decode.kernels.runtime import setup_cpu
from data.prompts import encode_prompt, load_prompts
from eval.report import grid_progress, markdown_table, partial_on_error, short, write_partial, write_report

log = logging.getLogger("draftsmith.eval")


def gpu_name(device: torch.device) -> str | None:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


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


def make_engine_record(setting: tuple, domain: str, temperature: float, n_prompts: int, run: dict, base: dict,
                       level: float) -> dict:
    """One results.json record for a llama.cpp arm: its speedup (and interval) over llama.cpp plain on the same
    prompts (`base`; one engine), its tok/s, and the server's accepted / drafted tokens (accepted/proposed; it reports
    no rejections, so no α)."""
    name, proposer, gamma = setting
    tokens, base_tokens = [len(t) for t in run["tokens"]], [len(t) for t in base["tokens"]]
    drafted, accepted = sum(d or 0 for d in run["drafted"]), sum(a or 0 for a in run["accepted"])
    return {"engine": "llama.cpp", "speedup_over": "llama.cpp plain", "tok_s": run["tok_s"], "draft": name,
            "proposer": proposer, "domain": domain, "gamma": gamma or "default", "gamma_setting": gamma or
            "llama.cpp default", "temperature": temperature, "confidence_threshold": 0.0, "n_prompts": n_prompts,
            "new_tokens": run["new_tokens"], "alpha": float("nan"), "tau": float("nan"),
            "accepted_per_proposed": accepted / drafted if drafted else float("nan"), "drafted": drafted,
            "target_tok_s": base["tok_s"], "spec_tok_s": run["tok_s"], "speedup": run["tok_s"] / base["tok_s"],
            "speedup_ci": list(bootstrap_speedup_ci(base["prompt_seconds"], run["prompt_seconds"], base_tokens, tokens,
                                                    level)),
            "cost_ratio_c": float("nan"), "theoretical_speedup": float("nan"),
            "hardware_expected_speedup": float("nan"), "decode_speedup": float("nan"),
            "decode_speedup_ci": [float("nan")] * 2, "ci_level": level,
            "greedy_identical": run["tokens"] == base["tokens"] if temperature == 0 else None,
            "per_prompt": {"target_s": base["prompt_seconds"], "spec_s": run["prompt_seconds"],
                           "target_tokens": base_tokens, "spec_tokens": tokens}}


def llamacpp_servers(cfg: DictConfig, stack, out: Path) -> list[tuple]:
    """(setting, run) for each llama.cpp arm asked for (`llamacpp`), llama.cpp plain first (their baseline): one
    llama-server each, started now, stopped when `stack` closes. setting = (draft name, proposer, gamma)."""
    from eval.llamacpp import LlamaServer, gguf_of, spec_type_of

    if not cfg.get("llamacpp"):
        return []
    target = gguf_of(cfg.llamacpp_target or str(cfg.target), cfg.llamacpp_gguf, cfg.cache_dir)
    wanted = [(None, "llama.cpp plain", 0, None, None)]
    gammas = [g for g in ([cfg.gamma] if isinstance(cfg.gamma, (int, str)) else cfg.gamma) if g != "auto"]
    if "speculative" in cfg.llamacpp:
        wanted += [(str(d), "llama.cpp draft", int(g), spec_type_of(str(d)), gguf_of(str(d), cfg.llamacpp_gguf,
                                                                                  cfg.cache_dir))
                   for d in cfg.drafts if feature_kind_of(d) in (None, "eagle3") for g in gammas]
    if "ngram" in cfg.llamacpp:
        wanted.append((None, "llama.cpp ngram", 0, "ngram-simple", None))
    out.mkdir(parents=True, exist_ok=True)
    arms = []
    for k, (name, proposer, gamma, spec_type, draft) in enumerate(wanted):
        server = stack.enter_context(LlamaServer(target, draft_gguf=draft, draft_max=gamma or 4, spec_type=spec_type,
                                                 threads=cfg.threads, log=out / f"llama-server-{k}.log",
                                                 cache_dir=cfg.cache_dir))

        def run(prompt, max_new_tokens, params, eos, generator, server=server):
            return server.completion(prompt, max_new_tokens, params.temperature if params else 0.0,
                                     seed=int(generator.initial_seed()))
        arms.append(((name or proposer, proposer, gamma), run))
    return arms


def is_ours(record: dict) -> bool:
    """Our decoder's records (not a transformers baseline arm)."""
    return record.get("engine", "draftsmith") == "draftsmith" and not str(record.get("proposer", "")).startswith(
        "transformers")


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


def measure_all(cfg: DictConfig, tokenizer, target, drafts: dict, gammas: list, max_gamma: int, eos,
                conditions: dict, hf_drafts: dict | None = None, only: list | None = None,
                engines: list | None = None) -> list[dict]:
    """Every (domain, temperature): target-only decoding and every speculative setting, interleaved prompt by prompt
    on the `split` prompts (eval/timing.py); gamma=auto chooses on the tune prompts first. The cost model is
    measured once per draft (into conditions["costs"]). `only`: run just these arms (records' "arm" values)."""
    records, trees = [], {}  # trees: tree.branching=auto's choice per (draft, domain)
    arms = proposer_arms(list(drafts), draft_settings(gammas, thresholds_of(cfg)), list(cfg.proposers),
                         tree_depths(cfg), int(cfg.router.max_gamma), int(cfg.max_auto_gamma))
    if only is not None:
        arms = [a for a in arms if list(a) in [list(o) for o in only]]
    with grid_progress() as progress:  # one tick per prompt decoded by every setting
        task = progress.add_task("decoding", total=len(cfg.domains) * len(cfg.temperature) * cfg.repeats
                                 * cfg.n_prompts)
        for domain in cfg.domains:
            prompts = [encode_prompt(tokenizer, p) for p in load_prompts(domain, cfg.n_prompts, cfg.prompts_file,
                                                                         cfg.split)]
            tune = None  # tune prompts and the target's greedy path on them, for gamma=auto (made when needed)
            for name, draft in drafts.items():  # warm-up and cost model, once per draft
                first = name not in conditions["costs"]
                progress.update(task, description=f"{domain}: warm-up" + (", cost model" if first else ""))
                generate(target, draft_proposer(draft, max(thresholds_of(cfg))), prompts[0], 2, 8)
                if first:  # the target's passes are timed once, with the first draft: every draft shares them
                    shared = next(iter(conditions["costs"].values()), {}).get("target_pass_s")
                    conditions["costs"][name] = measure_costs(
                        target, draft, decoding_context(prompts[0], cfg.max_new_tokens), max_gamma + 1,
                        target_pass_s=shared)
            for temperature in cfg.temperature:
                params = SamplingParams(float(temperature), cfg.top_k, cfg.top_p)
                settings = []  # (arm, gamma, threshold, label, what gamma=auto expected, proposer)
                for arm in arms:
                    kind, name, gamma, threshold = arm
                    draft, costs = drafts.get(name), conditions["costs"][name or next(iter(drafts))]
                    label, predicted, shape = gamma, None, None
                    if gamma == "auto":
                        progress.update(task, description=f"{domain} T={temperature:g} gamma=auto on tune prompts")
                        tune = tune_set(cfg, tokenizer, target, domain, eos, tune,
                                        greedy=temperature == 0 and not is_feature_draft(draft))
                        gamma, threshold, label, predicted = choose_auto(cfg, target, draft, tune, params, eos, costs)
                    if kind == "predicted":  # the stop rule's calibration is fitted on the tune prompts only
                        tune = tune_set(cfg, tokenizer, target, domain, eos, tune)
                        proposer = DraftModelProposer(draft, stop_rule=predicted_stop(draft, tune, costs))
                        label = f"predicted≤{gamma}"
                    else:
                        if kind == "tree" and auto_tree(cfg):  # one shape per draft and domain, from greedy paths
                            progress.update(task, description=f"{domain}: tree shape on tune prompts")
                            tune = tune_set(cfg, tokenizer, target, domain, eos, tune)
                            if (name, domain) not in trees:
                                trees[(name, domain)] = choose_tree(cfg, draft, tune, costs)
                            shape = trees[(name, domain)]
                            gamma, predicted = len(shape["branching"]), shape["expected_speedup"]
                            label = "auto:" + "-".join(map(str, shape["branching"]))
                        proposer = make_proposer(kind, draft, threshold, target, cfg, drafts, conditions["costs"],
                                                 shape and shape["branching"])
                    if cfg.get("auto_off") and kind != ROUTER:  # the router has its own
                        proposer = with_auto_off(proposer, kind if name is None else name,
                                                 0.0 if kind == "lookup" else costs["draft_step_s"], gamma,
                                                 costs["target_pass_s"], tree_size(cfg, kind),
                                                 probe_every=int(cfg.router.probe_every),
                                                 max_probe_every=int(cfg.router.max_probe_every),
                                                 timing_window=int(cfg.router.timing_window))
                    settings.append(((kind, name), gamma, threshold, label, predicted, proposer, list(arm), shape))
                timing = [Arm("target", NoProposer(), 0)] + [Arm(j, st[5], st[1], True) for j, st in enumerate(settings)]
                baselines = hf_arms(cfg, target, hf_drafts or {})
                timing += [Arm(("hf", k), None, 0, run=run) for k, (_, _, run) in enumerate(baselines)]
                timing += [Arm(("engine", k), None, 0, run=run) for k, (_, run) in enumerate(engines or [])]
                progress.update(task, description=f"{domain} T={temperature:g}: {len(timing)} settings interleaved")
                runs = timed_interleaved(target, timing, prompts, cfg.max_new_tokens, params, eos, cfg.seed,
                                         cfg.repeats, on_prompt=lambda r, i: progress.advance(task))
                base = runs["target"]
                log.info("%s T=%s target-only: %.1f tok/s", domain, temperature, base["tok_s"])
                for j, ((kind, name), gamma, threshold, label, predicted, _, arm, shape) in enumerate(settings):
                    costs = conditions["costs"][name or next(iter(drafts))]
                    if kind == ROUTER:
                        costs = {**costs, "router_step_s": router_step_s(drafts, conditions["costs"])}
                    wrapped = bool(cfg.get("auto_off")) and kind != ROUTER
                    rec = make_record(name or (ROUTER if kind == ROUTER else LOOKUP), domain, gamma, label,
                                      float(temperature), len(prompts), runs[j], base, costs, threshold,
                                      float(cfg.ci_level), kind, wrapped)
                    rec["auto_off"] = wrapped or kind == ROUTER
                    rec["split"] = cfg.split if not cfg.prompts_file else f"{cfg.split} ({cfg.prompts_file})"
                    rec["arm"] = arm  # (proposer, draft, gamma as asked, threshold): what policy=auto chooses among
                    if predicted is not None:  # what gamma=auto expected of its choice (on tune prompts)
                        rec["auto_expected_speedup"] = predicted
                    if shape:  # tree.branching=auto's choice, and what the best chain was expected to do there
                        rec["tree_choice"] = shape
                    records.append(rec)
                    who = rec["draft"] if name is None else short(name) + ("" if kind == "draft" else f" ({kind})")
                    setting = label if str(label).startswith("auto") else (
                        f"{gamma}" + (f",stop<{threshold:g}" if threshold else ""))
                    log.info("%s %s g=%s T=%s: alpha %.3f tau %.2f speedup %.2fx [%.2f, %.2f] (cost model %.2fx)",
                             who, domain, setting, temperature, rec["alpha"], rec["tau"], rec["speedup"],
                             *rec["speedup_ci"], rec["hardware_expected_speedup"])
                for k, (name, proposer, _) in enumerate(baselines):  # over transformers' plain generate(): k = 0
                    rec = make_hf_record(name or proposer, proposer, domain, cfg.get("transformers_gamma"),
                                         float(temperature), len(prompts), runs[("hf", k)], runs[("hf", 0)],
                                         float(cfg.ci_level))
                    records.append(rec)
                    log.info("%s %s T=%s: %.2f tokens per target pass, speedup %.2fx [%.2f, %.2f]%s", proposer,
                             short(name) if name else "", temperature, rec["tau"], rec["speedup"], *rec["speedup_ci"],
                             "" if rec["greedy_identical"] in (None, True) else " (output differs from the target's)")
                for k, (setting, _) in enumerate(engines or []):  # over llama.cpp plain: k = 0
                    rec = make_engine_record(setting, domain, float(temperature), len(prompts), runs[("engine", k)],
                                             runs[("engine", 0)], float(cfg.ci_level))
                    records.append(rec)
                    log.info("%s %s T=%s: %.1f tok/s, %.2fx [%.2f, %.2f] over llama.cpp plain%s", rec["proposer"],
                             short(rec["draft"]), temperature, rec["tok_s"], rec["speedup"], *rec["speedup_ci"],
                             "" if rec["greedy_identical"] in (None, True) else " (output differs from plain's)")
                write_partial(records, conditions, Path(cfg.out))  # a crash keeps what was measured
    return records


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


def auto_policy(cfg: DictConfig, tokenizer, target, drafts: dict, gammas: list, rows: int, eos, conditions: dict,
                hf_drafts: dict) -> list[dict]:
    """policy=auto: every policy asked for runs on the tune prompts (its report in out/tune); the best by geometric
    mean speedup over the domains and temperatures (`choose_policy`) then runs alone against the target on the test
    prompts, and those are the reported numbers. If the best does not beat the target alone on the tune prompts,
    the policy is "none" (serve the target alone), and the test run shows what the best would have done."""
    tune_cfg = OmegaConf.merge(cfg, {"split": "tune", "out": str(Path(cfg.out) / "tune")})
    tuned = measure_all(tune_cfg, tokenizer, target, drafts, gammas, rows, eos, conditions)
    write_report(tuned, {**conditions, "policy_auto": "tune phase: every policy on the tune prompts"},
                 Path(tune_cfg.out))
    arm, score = choose_policy(tuned)
    log.info("policy=auto: on the tune prompts the best is %s (%.2fx, geometric mean over domains)%s", arm, score,
             "" if score > 1 else ": not above 1, so the policy is none (the target alone)")
    every = cfg.get("policy_test", "chosen") == "all"  # all: the test table holds every policy beside the choice
    records = measure_all(cfg, tokenizer, target, drafts, gammas, rows, eos, conditions, hf_drafts,
                          only=None if every else [arm])
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
    section = {"tree": "tree", "dynamic_tree": "tree", ROUTER: "router", "lookup": "lookup",
               "lookup+draft": "lookup"}.get(kind)
    if kind == "predicted":
        return {"max_auto_gamma": cfg.max_auto_gamma}
    return OmegaConf.to_container(cfg[section]) if section else None


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


VERDICTS = {"pays": "pays", "loses": "does NOT pay", "inconclusive": "is inconclusive (the interval spans 1x)"}


def verdict(record: dict) -> str:
    """'pays' when the speedup's whole interval is above 1, 'loses' when it is below, else 'inconclusive'."""
    lo, hi = record["speedup_ci"]
    return "pays" if lo > 1.0 else "loses" if hi < 1.0 else "inconclusive"


def draft_settings(gammas: list, thresholds: list[float]) -> list[tuple]:
    """The (gamma, confidence_threshold) pairs to run. gamma=1 runs once, without one: a threshold acts only after a
    drafted token that is not the last, so it cannot change a one-token draft. gamma=auto runs once and chooses its
    threshold among those given (choose_auto)."""
    return [(g, th) for g in gammas for th in ([0.0] if g in ("auto", 1) else thresholds)]


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


def draft_vocab_ranking(source, tokenizer, vocab_size: int) -> list[int] | None:
    """draft_vocab_from: the token ids of a data source, most frequent first, for the cut draft head to keep
    (data/token_ranking.py)."""
    ranked = rank_source(source, tokenizer, vocab_size)
    if ranked is not None:
        log.info("draft_vocab_from: %d distinct ids of %s ranked by frequency", len(ranked), source)
    return ranked


def batched(cfg: DictConfig) -> bool:
    return any(int(b) != 1 for b in cfg.get("batch_size") or [1])


def evaluate(cfg: DictConfig) -> list[dict]:
    check_eval_config(cfg)
    setup_cpu(cfg.threads, cfg.get("keep_freed_memory", True))
    torch.manual_seed(cfg.seed)
    tokenizer = load_tokenizer(cfg.target, cache_dir=cfg.cache_dir)
    gammas = [cfg.gamma] if isinstance(cfg.gamma, (int, str)) else list(cfg.gamma)
    drafted = max([g for g in gammas if g != "auto"] + [int(cfg.max_auto_gamma), int(cfg.router.max_gamma),
                                                         tree_rows(cfg)]) + 1
    check_prompt_lengths(cfg, tokenizer, resolve(cfg.target, cfg.cache_dir), drafted)  # before the weights load
    target = load_frozen(cfg.target, dtype=cfg.dtype, cache_dir=cfg.cache_dir, device=cfg.device)
    eos = eos_token_ids(tokenizer, target)
    drafts = load_drafts(cfg.drafts, tokenizer, target, cfg.target, dtype=cfg.draft_dtype or cfg.dtype,
                         cache_dir=cfg.cache_dir, device=cfg.device)
    # transformers' assisted generation gets float copies with full heads, as a user runs it
    standalone = [d for d in cfg.drafts if not feature_kind_of(d)  # transformers cannot run feature drafts
                  and (cfg.get("transformers_drafts") is None or d in cfg.transformers_drafts)]
    hf_drafts = load_drafts(standalone, tokenizer, target, cfg.target, dtype=cfg.draft_dtype or cfg.dtype,
                            cache_dir=cfg.cache_dir, device=cfg.device) if "assisted" in cfg.transformers else {}
    special = special_token_ids(tokenizer, target)
    ranking = draft_vocab_ranking(cfg.get("draft_vocab_from"), tokenizer, model_vocab_size(target))
    vocab = {}
    for name, draft in drafts.items():
        ranked, origin = head_ranking(saved_ranking(name), ranking)
        vocab[name] = restrict_vocab(draft, cfg.draft_vocab, special, ranking=ranked)[1]
        if vocab[name]["restricted"] and ranked:
            vocab[name]["ranked_by"] = origin
    quant = {name: quantize_draft(draft, cfg.draft_quant)[1] for name, draft in drafts.items()}
    # The cost model spans gamma = 1..max_auto_gamma, so its verdict can name a gamma not asked for; compiled,
    # every pass shape compiles first, so it spans the gammas asked for (and max_auto_gamma with gamma=auto).
    asked = [g for g in gammas if g != "auto"] + ([cfg.max_auto_gamma] if "auto" in gammas else [])
    max_gamma = max(asked) if cfg.compile else max(asked + [cfg.max_auto_gamma])
    if ROUTER in cfg.proposers:
        max_gamma = max(max_gamma, int(cfg.router.max_gamma))
    if "predicted" in cfg.proposers:
        max_gamma = max(max_gamma, int(cfg.max_auto_gamma))
    rows = max(max_gamma, tree_rows(cfg))  # the most tokens beyond the pending one in a target pass (trees: nodes)
    if batched(cfg):  # a batched pass feeds every sequence's tokens
        rows = max(int(b) for b in cfg.batch_size) * (max(asked) + 1) - 1
    conditions = {"target": str(cfg.target), "threads": torch.get_num_threads(), "device": str(target.device),
                  "dtype": cfg.dtype, "draft_dtype": cfg.draft_dtype or cfg.dtype,
                  "max_new_tokens": cfg.max_new_tokens, "repeats": cfg.repeats,
                  "torch": torch.__version__, "transformers": __import__("transformers").__version__,
                  "cpu": platform.processor() or platform.machine(), "gpu": gpu_name(target.device),
                  "top_k": cfg.top_k, "top_p": cfg.top_p, "draft_quant": quant, "draft_vocab": vocab,
                  "draft_vocab_from": OmegaConf.to_container(cfg.draft_vocab_from) if isinstance(
                      cfg.get("draft_vocab_from"), DictConfig) else cfg.get("draft_vocab_from"),
                  "costs": {}, "provenance": provenance(str(cfg.target), [str(d) for d in cfg.drafts])}
    models = [target, *drafts.values()]
    max_len = run_length([encode_prompt(tokenizer, p) for d in cfg.domains
                          for split in (cfg.split, "tune") for p in load_prompts(d, cfg.n_prompts, cfg.prompts_file,
                                                                                   split)],
                         cfg.max_new_tokens, max_gamma) if cfg.compile else None  # static caches sized to the run
    conditions["compile"] = {"enabled": bool(cfg.compile), "max_len": max_len,
                             "mode": compile_mode(target.device) if cfg.compile else None}
    with fast_cpu_linears(models, rows + 1, cfg.cpu_matmul) as plans, \
            compiled_decoding(models, max_len, max_gamma + 1, enabled=cfg.compile):
        conditions["cpu_matmul"] = dict(zip(["target", *drafts], plans))
        with partial_on_error(Path(cfg.out)), contextlib.ExitStack() as servers:
            engines = llamacpp_servers(cfg, servers, Path(cfg.out))
            if engines:
                from eval.llamacpp import llamacpp_dir

                conditions["llamacpp"] = (llamacpp_dir(cfg.cache_dir) / "BUILD.txt").read_text().strip() if (
                    llamacpp_dir(cfg.cache_dir) / "BUILD.txt").is_file() else "llama.cpp"
            if batched(cfg):  # batch_size above 1: its own grid, table and plot (eval/batches.py)
                from eval.batches import measure_batches, batch_table, write_batch_report

                records = measure_batches(cfg, tokenizer, target, drafts, gammas, eos, conditions)
                files = write_batch_report(records, conditions, Path(cfg.out))
                print(batch_table(records) + f"\nwrote {', '.join(str(p) for p in files.values())}")
                if cfg.update_card:  # each local draft's card says where speculation stops paying
                    keep = ("domain", "temperature", "gamma", "batch_size", "speedup", "speedup_ci",
                            "hardware_expected_speedup", "tok_s", "target_tok_s", "greedy_identical")
                    for name in (n for n in drafts if Path(n).is_dir()):
                        rows = [{**{k: r[k] for k in keep}, "device": conditions["device"],
                                 "threads": conditions["threads"], "target": cfg.target}
                                for r in records if r["draft"] == name]
                        print(f"model card updated: {write_card(name, batches=rows)}")
                return records
            if cfg.get("policy") == "auto":
                records = auto_policy(cfg, tokenizer, target, drafts, gammas, rows, eos, conditions, hf_drafts)
            else:
                records = measure_all(cfg, tokenizer, target, drafts, gammas, rows, eos, conditions, hf_drafts,
                                      engines=engines)
    if cfg.get("reference_draft"):  # each draft against the one its user already has (eval/reference.py)
        add_reference(records, cfg.reference_draft, cfg.ci_level)
    ours = [r for r in records if is_ours(r)]  # the verdicts judge our decoder; transformers' rows are baselines
    costs = next(iter(conditions["costs"].values()))  # the verdict uses the first draft's costs
    best = best_gamma(max((r["alpha"] for r in ours), default=0.0), costs["draft_step_s"],
                      costs["target_pass_s"][: max_gamma + 1])
    fastest = max(ours, key=lambda r: r["speedup"])
    conditions["best_measured_speedup"] = fastest["speedup"]
    conditions["best_measured_speedup_ci"] = fastest["speedup_ci"]
    # measured, not predicted, and decided by the interval: "pays" only where its lower end is above 1
    conditions["speculation_pays"] = verdict(fastest) == "pays"
    by_domain = best_by_domain(ours)
    conditions["speculation_pays_by_domain"] = {d: verdict(r) for d, r in by_domain.items()}
    conditions["cost_model_best"] = {"gamma": best[0], "expected_speedup": best[1]}
    files = write_report(records, conditions, Path(cfg.out))
    if cfg.wandb.enabled:
        log_eval_to_wandb(records, conditions, files, OmegaConf.to_container(cfg.wandb, resolve=True), Path(cfg.out))
    if conditions.get("policy"):  # policy=auto: the chosen policy and its test numbers go into each local draft
        for name in (n for n in drafts if Path(n).is_dir()):
            print(f"serving policy written: {write_policy(name, conditions['policy'])}")
    if cfg.update_card:  # append these measurements to each local draft folder's model card
        keep = ("domain", "gamma", "confidence_threshold", "temperature", "alpha", "tau", "speedup", "speedup_ci",
                "n_prompts", "split")
        for name in drafts:
            if Path(name).is_dir():
                evals = [{**{k: r[k] for k in keep}, "max_new_tokens": cfg.max_new_tokens,
                          "threads": conditions["threads"], "device": conditions["device"],
                          "cpu_matmul": cfg.cpu_matmul, "draft_weights": weights_label(quant[name]),
                          "draft_vocab": vocab[name]["size"] if vocab[name]["restricted"] else None,
                          "draft_vocab_order": vocab[name].get("order"),
                          "draft_vocab_ranked_by": vocab[name].get("ranked_by"),
                          "compiled": bool(cfg.compile), "provenance": conditions["provenance"],
                          "source": "eval/speculate.py"} for r in records
                         if r["draft"] == name and r["proposer"] == "draft"]
                print(f"model card updated: {write_card(name, evals)}")
    print(markdown_table(records))
    weights = weights_label(next(iter(quant.values())))
    head = next(iter(vocab.values()))
    draft_form = (f" ({weights} weights)" if weights else "") + (
        f" (head: {head['size']} of {head['vocab_size']} ids)" if head["restricted"] else "")
    print(f"\ncost model: draft step {costs['draft_step_s'] * 1e3:.1f} ms{draft_form}, target k-token pass "
          + ", ".join(f"k={k + 1}: {t * 1e3:.1f} ms" for k, t in enumerate(costs["target_pass_s"]))
          + f"; c = {costs['cost_ratio_c']:.3f}. At the best measured alpha the cost model's best gamma is {best[0]} "
          f"({best[1]:.2f}x expected).\nBest measured speedup: {fastest['speedup']:.2f}x "
          f"[{fastest['speedup_ci'][0]:.2f}, {fastest['speedup_ci'][1]:.2f}] ({fastest['domain']}, "
          f"gamma={fastest['gamma']}, T={fastest['temperature']:g}, proposer {fastest['proposer']}): speculation "
          f"{VERDICTS[verdict(fastest)]} on this hardware ({cfg.ci_level:.0%} interval across prompts; the best of a "
          "grid is optimistic: confirm it on other prompts).")
    if len(by_domain) > 1:
        print("Per domain, best measured: " + "; ".join(
            f"{d} {r['speedup']:.2f}x [{r['speedup_ci'][0]:.2f}, {r['speedup_ci'][1]:.2f}] (gamma={r['gamma']}, "
            f"T={r['temperature']:g}, {VERDICTS[verdict(r)]})" for d, r in by_domain.items()) + ".")
    if cfg.get("reference_draft"):
        print("\nAgainst the reference draft (speed ratio, prompts paired):\n" + reference_table(records))
    print(f"wrote {', '.join(str(p) for p in files.values())}")
    return records


@hydra.main(config_path="../conf", config_name="speculate", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with usage_errors():  # a usage error found on the way: one line, exit 2
        evaluate(cfg)


if __name__ == "__main__":
    main()
