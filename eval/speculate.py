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
    from eval.shared.preflight import preflight

    preflight("speculate", check_speculate)

import contextlib
import logging
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from data.prompts import encode_prompt, load_prompts
from decode.core.costs import decoding_context, measure_costs
from decode.core.metrics import best_gamma
from decode.core.speculative import NoProposer, SamplingParams, generate
from decode.drafts.feature_drafts import is_feature_draft
from decode.drafts.quantize import weights_label
from decode.kernels.compiled import compile_mode, compiled_decoding, run_length
from decode.kernels.fast_linear import fast_cpu_linears
from decode.kernels.runtime import setup_cpu
from decode.proposers.feature_decoding import draft_proposer
from decode.proposers.registry import PROPOSERS
from decode.proposers.router import router_step_s, with_auto_off
from eval.arms import (auto_tree, choose_auto, choose_tree, draft_settings, hf_arms, make_proposer, predicted_stop,
                       proposer_arms, tree_depths, tree_size, tune_set)
from eval.shared.card import best_by_domain, write_card, write_policy
from eval.checks import LOOKUP, ROUTER, check_eval_config, thresholds_of
from eval.engines import asked as asked_engines, plain_of, served_arms
from eval.eval_models import Models, batched, load_models, run_conditions
from eval.policy import auto_policy
from eval.shared.preflight import usage_errors
from eval.records import (VERDICTS, is_ours, make_engine_record, make_hf_record, make_record, verdict)
from eval.reference import add_reference, reference_table
from eval.report import grid_progress, markdown_table, partial_on_error, short, write_partial, write_report
from eval.timing import Arm, timed_interleaved
from eval.shared.tracking import log_eval_to_wandb

log = logging.getLogger("draftsmith.eval")


def warm_up_and_costs(cfg: DictConfig, m: Models, prompt: list[int], conditions: dict, say) -> None:
    """Each draft decodes a few tokens (warm-up); the first time a draft is seen its cost model is measured (the
    target's passes once, with the first draft: every draft shares them)."""
    for name, draft in m.drafts.items():
        first = name not in conditions["costs"]
        say("warm-up" + (", cost model" if first else ""))
        generate(m.target, draft_proposer(draft, max(thresholds_of(cfg))), prompt, 2, 8)
        if first:
            shared = next(iter(conditions["costs"].values()), {}).get("target_pass_s")
            conditions["costs"][name] = measure_costs(m.target, draft, decoding_context(prompt, cfg.max_new_tokens),
                                                      m.max_gamma + 1, target_pass_s=shared)


def speculative_setting(cfg: DictConfig, m: Models, arm: tuple, domain: str, params, conditions: dict,
                        state: dict, say) -> tuple:
    """One arm's proposer, with what gamma=auto, predicted gamma or tree.branching=auto chose for it on the tune
    prompts (`state` keeps the tune set and chosen tree shapes per domain): ((kind, name), gamma, threshold, label,
    expected speedup, proposer, arm, tree shape)."""
    kind, name, gamma, threshold = arm
    draft, costs = m.drafts.get(name), conditions["costs"][name or next(iter(m.drafts))]
    label, predicted, shape = gamma, None, None
    if gamma == "auto":
        say(f"T={params.temperature:g} gamma=auto on tune prompts")
        state["tune"] = tune_set(cfg, m.tokenizer, m.target, domain, m.eos, state["tune"],
                                 greedy=params.temperature == 0 and not is_feature_draft(draft))
        gamma, threshold, label, predicted = choose_auto(cfg, m.target, draft, state["tune"], params, m.eos, costs)
    if PROPOSERS[kind].tuned:  # predicted gamma: its stop rule's calibration is fitted on the tune prompts only
        state["tune"] = tune_set(cfg, m.tokenizer, m.target, domain, m.eos, state["tune"])
        proposer = make_proposer(kind, draft, threshold, m.target, cfg,
                                 stop_rule=predicted_stop(draft, state["tune"], costs))
        label = f"{kind}≤{gamma}"
    else:
        if kind == "tree" and auto_tree(cfg):  # one shape per draft and domain, from greedy paths
            say("tree shape on tune prompts")
            state["tune"] = tune_set(cfg, m.tokenizer, m.target, domain, m.eos, state["tune"])
            if (name, domain) not in state["trees"]:
                state["trees"][(name, domain)] = choose_tree(cfg, draft, state["tune"], costs)
            shape = state["trees"][(name, domain)]
            gamma, predicted = len(shape["branching"]), shape["expected_speedup"]
            label = "auto:" + "-".join(map(str, shape["branching"]))
        proposer = make_proposer(kind, draft, threshold, m.target, cfg, m.drafts, conditions["costs"],
                                 shape and shape["branching"])
    if cfg.get("auto_off") and kind != ROUTER:  # the router has its own
        proposer = with_auto_off(proposer, kind if name is None else name,
                                 0.0 if PROPOSERS[kind].drafts_with == "none" else costs["draft_step_s"], gamma, costs["target_pass_s"],
                                 tree_size(cfg, kind), probe_every=int(cfg.router.probe_every),
                                 max_probe_every=int(cfg.router.max_probe_every),
                                 timing_window=int(cfg.router.timing_window))
    return (kind, name), gamma, threshold, label, predicted, proposer, list(arm), shape


def our_record(cfg: DictConfig, m: Models, setting: tuple, domain: str, temperature: float, n_prompts: int, run: dict,
               base: dict, conditions: dict) -> dict:
    """The record of one of our arms, logged as it comes."""
    (kind, name), gamma, threshold, label, predicted, _, arm, shape = setting
    costs = conditions["costs"][name or next(iter(m.drafts))]
    if kind == ROUTER:
        costs = {**costs, "router_step_s": router_step_s(m.drafts, conditions["costs"])}
    wrapped = bool(cfg.get("auto_off")) and kind != ROUTER
    rec = make_record(name or (LOOKUP if kind == "lookup" else kind), domain, gamma, label, temperature, n_prompts,
                      run, base, costs, threshold, float(cfg.ci_level), kind, wrapped)
    rec["auto_off"] = wrapped or kind == ROUTER
    rec["split"] = cfg.split if not cfg.prompts_file else f"{cfg.split} ({cfg.prompts_file})"
    rec["arm"] = arm  # (proposer, draft, gamma as asked, threshold): what policy=auto chooses among
    if predicted is not None:  # what gamma=auto expected of its choice (on tune prompts)
        rec["auto_expected_speedup"] = predicted
    if shape:  # tree.branching=auto's choice, and what the best chain was expected to do there
        rec["tree_choice"] = shape
    who = rec["draft"] if name is None else short(name) + ("" if kind == "draft" else f" ({kind})")
    shown = label if str(label).startswith("auto") else f"{gamma}" + (f",stop<{threshold:g}" if threshold else "")
    log.info("%s %s g=%s T=%s: alpha %.3f tau %.2f speedup %.2fx [%.2f, %.2f] (cost model %.2fx)", who, domain, shown,
             temperature, rec["alpha"], rec["tau"], rec["speedup"], *rec["speedup_ci"], rec["hardware_expected_speedup"])
    return rec


def baseline_records(cfg: DictConfig, baselines: list, engines: list, domain: str, temperature: float,
                     n_prompts: int, runs: dict) -> list[dict]:
    """transformers' arms over transformers' plain generate() (k = 0), served engines' over their own plain."""
    records = []
    for k, (name, proposer, _) in enumerate(baselines):
        rec = make_hf_record(name or proposer, proposer, domain, cfg.get("transformers_gamma"), temperature,
                             n_prompts, runs[("hf", k)], runs[("hf", 0)], float(cfg.ci_level))
        records.append(rec)
        log.info("%s %s T=%s: %.2f tokens per target pass, speedup %.2fx [%.2f, %.2f]%s", proposer,
                 short(name) if name else "", temperature, rec["tau"], rec["speedup"], *rec["speedup_ci"],
                 "" if rec["greedy_identical"] in (None, True) else " (output differs from the target's)")
    for k, (setting, _) in enumerate(engines):
        rec = make_engine_record(setting, domain, temperature, n_prompts, runs[("engine", k)],
                                 runs[("engine", plain_of(engines, setting))], float(cfg.ci_level))
        records.append(rec)
        log.info("%s %s T=%s: %.1f tok/s, %.2fx [%.2f, %.2f] over %s plain%s", rec["proposer"], short(rec["draft"]),
                 temperature, rec["tok_s"], rec["speedup"], *rec["speedup_ci"], setting.engine,
                 "" if rec["greedy_identical"] in (None, True) else " (output differs from plain's)")
    return records


def measure_all(cfg: DictConfig, m: Models, conditions: dict, hf_drafts: dict | None = None,
                only: list | None = None, engines: list | None = None) -> list[dict]:
    """Every (domain, temperature): target-only decoding and every speculative setting, interleaved prompt by prompt
    on the `split` prompts (eval/timing.py); gamma=auto chooses on the tune prompts first. The cost model is
    measured once per draft (into conditions["costs"]). `only`: run just these arms (records' "arm" values)."""
    records, engines = [], engines or []
    arms = proposer_arms(list(m.drafts), draft_settings(m.gammas, thresholds_of(cfg)), list(cfg.proposers),
                         tree_depths(cfg), int(cfg.router.max_gamma), int(cfg.max_auto_gamma))
    if only is not None:
        arms = [a for a in arms if list(a) in [list(o) for o in only]]
    trees = {}  # tree.branching=auto's choice per (draft, domain)
    with grid_progress() as progress:  # one tick per prompt decoded by every setting
        task = progress.add_task("decoding", total=len(cfg.domains) * len(cfg.temperature) * cfg.repeats
                                 * cfg.n_prompts)
        for domain in cfg.domains:
            def say(what: str, domain=domain) -> None:
                progress.update(task, description=f"{domain}: {what}")

            prompts = [encode_prompt(m.tokenizer, p)
                       for p in load_prompts(domain, cfg.n_prompts, cfg.prompts_file, cfg.split)]
            state = {"tune": None, "trees": trees}  # the tune prompts and greedy paths, made when a choice needs them
            warm_up_and_costs(cfg, m, prompts[0], conditions, say)
            for temperature in map(float, cfg.temperature):
                params = SamplingParams(temperature, cfg.top_k, cfg.top_p)
                settings = [speculative_setting(cfg, m, arm, domain, params, conditions, state, say) for arm in arms]
                baselines = hf_arms(cfg, m.target, hf_drafts or {})
                timing = [Arm("target", NoProposer(), 0)] + [Arm(j, st[5], st[1], True) for j, st in enumerate(settings)]
                timing += [Arm(("hf", k), None, 0, run=run) for k, (_, _, run) in enumerate(baselines)]
                timing += [Arm(("engine", k), None, 0, run=run) for k, (_, run) in enumerate(engines)]
                say(f"T={temperature:g}: {len(timing)} settings interleaved")
                runs = timed_interleaved(m.target, timing, prompts, cfg.max_new_tokens, params, m.eos, cfg.seed,
                                         cfg.repeats, on_prompt=lambda r, i: progress.advance(task))
                log.info("%s T=%s target-only: %.1f tok/s", domain, temperature, runs["target"]["tok_s"])
                records += [our_record(cfg, m, st, domain, temperature, len(prompts), runs[j], runs["target"],
                                       conditions) for j, st in enumerate(settings)]
                records += baseline_records(cfg, baselines, engines, domain, temperature, len(prompts), runs)
                write_partial(records, conditions, Path(cfg.out))  # a crash keeps what was measured
    return records


def measure_batched(cfg: DictConfig, m: Models, conditions: dict) -> list[dict]:
    """batch_size above 1: its own grid, table and plot (eval/batches.py); each local draft's card says where
    speculation stops paying."""
    from eval.batches import batch_table, measure_batches, write_batch_report

    records = measure_batches(cfg, m.tokenizer, m.target, m.drafts, m.gammas, m.eos, conditions)
    files = write_batch_report(records, conditions, Path(cfg.out))
    print(batch_table(records) + f"\nwrote {', '.join(str(p) for p in files.values())}")
    if cfg.update_card:
        keep = ("domain", "temperature", "gamma", "batch_size", "speedup", "speedup_ci", "hardware_expected_speedup",
                "tok_s", "target_tok_s", "greedy_identical")
        for name in (n for n in m.drafts if Path(n).is_dir()):
            rows = [{**{k: r[k] for k in keep}, "device": conditions["device"], "threads": conditions["threads"],
                     "target": cfg.target} for r in records if r["draft"] == name]
            print(f"model card updated: {write_card(name, batches=rows)}")
    return records


def measure(cfg: DictConfig, m: Models, conditions: dict) -> tuple[list[dict], bool]:
    """Every arm asked for, served engines started beside our decoder (kernels and compiled shapes set up for the
    run): (records, whether they are reported already: a batched run writes its own report)."""
    max_len = run_length([encode_prompt(m.tokenizer, p) for d in cfg.domains for split in (cfg.split, "tune")
                          for p in load_prompts(d, cfg.n_prompts, cfg.prompts_file, split)],
                         cfg.max_new_tokens, m.max_gamma) if cfg.compile else None  # static caches sized to the run
    conditions["compile"] = {"enabled": bool(cfg.compile), "max_len": max_len,
                             "mode": compile_mode(m.target.device) if cfg.compile else None}
    models = [m.target, *m.drafts.values()]
    with fast_cpu_linears(models, m.rows + 1, cfg.cpu_matmul) as plans, \
            compiled_decoding(models, max_len, m.max_gamma + 1, enabled=cfg.compile):
        conditions["cpu_matmul"] = dict(zip(["target", *m.drafts], plans))
        with partial_on_error(Path(cfg.out)), contextlib.ExitStack() as servers:
            engines = served_arms(cfg, servers, Path(cfg.out))
            conditions["engines"] = {e.name: e.describe(cfg) for e in asked_engines(cfg)}
            if "llama.cpp" in conditions["engines"]:
                conditions["llamacpp"] = conditions["engines"]["llama.cpp"]
            if batched(cfg):
                return measure_batched(cfg, m, conditions), True
            if cfg.get("policy") == "auto":
                return auto_policy(cfg, lambda c, baselines, only: measure_all(
                    c, m, conditions, m.hf_drafts if baselines else None, only), conditions), False
            return measure_all(cfg, m, conditions, m.hf_drafts, engines=engines), False


def verdicts(records: list[dict], conditions: dict, max_gamma: int) -> tuple[dict, dict, tuple]:
    """Our decoder's fastest record, the fastest per domain and the cost model's best gamma at the best measured
    alpha, written into `conditions` (the verdict: measured, decided by the interval's lower end)."""
    ours = [r for r in records if is_ours(r)]  # transformers' and served engines' rows are baselines
    costs = next(iter(conditions["costs"].values()))  # the verdict uses the first draft's costs
    best = best_gamma(max((r["alpha"] for r in ours), default=0.0), costs["draft_step_s"],
                      costs["target_pass_s"][: max_gamma + 1])
    fastest = max(ours, key=lambda r: r["speedup"])
    by_domain = best_by_domain(ours)
    conditions.update({"best_measured_speedup": fastest["speedup"], "best_measured_speedup_ci": fastest["speedup_ci"],
                       "speculation_pays": verdict(fastest) == "pays",
                       "speculation_pays_by_domain": {d: verdict(r) for d, r in by_domain.items()},
                       "cost_model_best": {"gamma": best[0], "expected_speedup": best[1]}})
    return fastest, by_domain, best


def update_cards(cfg: DictConfig, m: Models, records: list[dict], conditions: dict) -> None:
    """policy=auto's choice, and with update_card these measurements, into each local draft folder."""
    if conditions.get("policy"):
        for name in (n for n in m.drafts if Path(n).is_dir()):
            print(f"serving policy written: {write_policy(name, conditions['policy'])}")
    if not cfg.update_card:
        return
    keep = ("domain", "gamma", "confidence_threshold", "temperature", "alpha", "tau", "speedup", "speedup_ci",
            "n_prompts", "split")
    for name in (n for n in m.drafts if Path(n).is_dir()):
        vocab = m.vocab[name]
        evals = [{**{k: r[k] for k in keep}, "max_new_tokens": cfg.max_new_tokens, "threads": conditions["threads"],
                  "device": conditions["device"], "cpu_matmul": cfg.cpu_matmul,
                  "draft_weights": weights_label(m.quant[name]),
                  "draft_vocab": vocab["size"] if vocab["restricted"] else None,
                  "draft_vocab_order": vocab.get("order"), "draft_vocab_ranked_by": vocab.get("ranked_by"),
                  "compiled": bool(cfg.compile), "provenance": conditions["provenance"],
                  "source": "eval/speculate.py"} for r in records if r["draft"] == name and r["proposer"] == "draft"]
        print(f"model card updated: {write_card(name, evals)}")


def print_summary(cfg: DictConfig, m: Models, records: list[dict], conditions: dict, fastest: dict, by_domain: dict,
                  best: tuple) -> None:
    costs = next(iter(conditions["costs"].values()))
    print(markdown_table(records))
    weights, head = weights_label(next(iter(m.quant.values()))), next(iter(m.vocab.values()))
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


def evaluate(cfg: DictConfig) -> list[dict]:
    """Load, measure every arm, judge, write the report (and the cards), print the summary."""
    check_eval_config(cfg)
    setup_cpu(cfg.threads, cfg.get("keep_freed_memory", True))
    torch.manual_seed(cfg.seed)
    m = load_models(cfg)
    conditions = run_conditions(cfg, m)
    records, reported = measure(cfg, m, conditions)
    if reported:  # batched: its own report
        return records
    if cfg.get("reference_draft"):  # each draft against the one its user already has (eval/reference.py)
        add_reference(records, cfg.reference_draft, cfg.ci_level)
    fastest, by_domain, best = verdicts(records, conditions, m.max_gamma)
    files = write_report(records, conditions, Path(cfg.out))
    if cfg.wandb.enabled:
        log_eval_to_wandb(records, conditions, files, OmegaConf.to_container(cfg.wandb, resolve=True), Path(cfg.out))
    update_cards(cfg, m, records, conditions)
    print_summary(cfg, m, records, conditions, fastest, by_domain, best)
    print(f"wrote {', '.join(str(p) for p in files.values())}")
    return records


@hydra.main(config_path="../conf", config_name="speculate", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with usage_errors():  # a usage error found on the way: one line, exit 2
        evaluate(cfg)


if __name__ == "__main__":
    main()
