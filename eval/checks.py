"""What each evaluation entry point accepts, checked before a model loads (eval/shared/preflight.py runs these from the
command line; the entry points run them again when called from Python). Light imports only: no torch.
"""

from __future__ import annotations

import glob
import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from data.checks import (UsageError, check_checkpoint_file, check_prompt_rows, check_source, list_value, number_in,
                         read_jsonl, writable_dir)
from data.owned import check_replaceable
from data.prompts import DOMAINS
from decode.drafts.kinds import feature_kind_of
from decode.proposers.registry import PROPOSERS, TREES
from eval.shared.preflight import check_device, check_dtype, check_same_vocabulary, model_folder

LOOKUP = "prompt lookup"  # the record name of prompt lookup alone (no draft model)
ROUTER = "router"  # the record name of the router over prompt lookup and every draft


def thresholds_of(cfg: DictConfig) -> list[float]:
    """`confidence_threshold` as a list (a single number is allowed)."""
    value = cfg.get("confidence_threshold", 0.0)
    return [float(value)] if isinstance(value, (int, float)) else [float(v) for v in value]


def check_branching(branching: list) -> None:
    if not branching or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in branching):
        raise UsageError(f"tree.branching must be a non-empty list of integers >= 1, got {branching}.")


def check_sampling(cfg: DictConfig) -> None:
    """temperature (a list of numbers >= 0), top_p in (0, 1] and top_k >= 1 (or null), the device and the dtypes:
    what eval/speculate.py and eval/acceptance.py share."""
    for key, example in (("drafts", "outputs/distill/<run>/export"), ("temperature", "0,1.0")):
        list_value(cfg[key], key, example)
    for t in cfg.temperature:
        number_in(t, "temperature", 0)
    if cfg.get("top_p") is not None:
        number_in(cfg.top_p, "top_p", 0, 1, low_open=True)
    if cfg.get("top_k") is not None:
        number_in(cfg.top_k, "top_k", 1, integer=True)
    check_device(cfg.get("device", "auto"))
    check_dtype(cfg.dtype, "dtype")
    if cfg.get("draft_dtype") is not None:
        check_dtype(cfg.draft_dtype, "draft_dtype")


def check_eval_config(cfg: DictConfig) -> None:
    check_sampling(cfg)
    for key in ("proposers", "domains"):
        list_value(cfg[key], key, "draft" if key == "proposers" else "general,code")
    gammas = [cfg.gamma] if isinstance(cfg.gamma, (int, str)) else list(cfg.gamma)
    if any(g != "auto" and (not isinstance(g, int) or g < 1) for g in gammas):
        raise UsageError(f"gamma must be integers >= 1 or 'auto', got {gammas}.")
    thresholds = thresholds_of(cfg)
    if not thresholds or any(not 0 <= t < 1 for t in thresholds):
        raise UsageError(f"confidence_threshold must be numbers in [0, 1) (0 = always draft gamma), got {thresholds}.")
    if "auto" in gammas and any(thresholds) and any(t > 0 for t in cfg.temperature):
        raise UsageError("gamma=auto chooses a confidence_threshold only at temperature 0 (it replays the target's "
                         "greedy path); when sampling, give the longest draft instead, e.g. gamma=[4,6].")
    if cfg.split not in ("tune", "test"):
        raise UsageError(f"split must be test (the reported numbers) or tune, got {cfg.split!r}.")
    number_in(cfg.repeats, "repeats", 1, integer=True)
    number_in(cfg.n_prompts, "n_prompts", 1, integer=True)
    if cfg.repeats < 1 or cfg.n_prompts < 2:
        raise UsageError(f"repeats must be >= 1 and n_prompts >= 2 (an interval across prompts needs several), got "
                         f"repeats={cfg.repeats}, n_prompts={cfg.n_prompts}.")
    if not cfg.drafts:
        raise UsageError("drafts=[...] must list at least one exported draft folder (or Hub id).")
    ref = cfg.get("reference_draft")
    if ref is not None and ref not in list(cfg.drafts):
        raise UsageError(f"reference_draft={ref} is not one of drafts: name one of {list(cfg.drafts)}, e.g. the "
                         "off-the-shelf draft, or add it to drafts.")
    check_proposers(cfg, gammas)
    check_baselines(cfg, gammas)
    check_batch_sizes(cfg, gammas, thresholds)
    check_trees_and_router(cfg)
    check_policy(cfg)


def check_proposers(cfg: DictConfig, gammas: list) -> None:
    """Which ways of drafting were asked for, and what feature drafts can run."""
    unknown = [p for p in cfg.proposers if p not in PROPOSERS]  # decode/proposers/registry.py
    if unknown or not cfg.proposers:
        raise UsageError(f"proposers must be a non-empty list of {', '.join(PROPOSERS)}; got {list(cfg.proposers)}.")
    if not 1 <= int(cfg.lookup.min_n) <= int(cfg.lookup.max_n):
        raise UsageError(f"lookup needs 1 <= min_n <= max_n, got {cfg.lookup.min_n} and {cfg.lookup.max_n}.")
    features = {str(d): feature_kind_of(d) for d in cfg.drafts if feature_kind_of(d)}
    for name, kind in features.items():
        allowed = {name for name, k in PROPOSERS.items() if k.feature_drafts}
        if not set(cfg.proposers) <= allowed or cfg.compile or cfg.get("policy"):
            raise UsageError(f"{name}: {kind} drafts decode with proposers {sorted(allowed)} only (their own chain "
                             "or token trees), compile=false and no "
                             f"policy=auto; asked for {list(cfg.proposers)}. Fix: proposers=[draft] compile=false "
                             "(measure standalone drafts' other policies in another run).")
    if all(PROPOSERS[p].drafts_with == "none" for p in cfg.proposers) and "auto" in gammas:
        raise UsageError("gamma=auto chooses a draft model's gamma; proposers without one (prompt lookup) need "
                         "fixed gammas.")


def check_baselines(cfg: DictConfig, gammas: list) -> None:
    """transformers' decoders and the served engines timed beside ours."""
    bad = [t for t in cfg.get("transformers", []) if t not in ("assisted", "lookup")]
    if bad:
        raise UsageError(f"transformers must list assisted and/or lookup (transformers' own decoders timed alongside), "
                         f"got {bad}.")
    chosen = cfg.get("transformers_drafts")
    if chosen is not None:
        wrong = [d for d in chosen if d not in list(cfg.drafts) or feature_kind_of(d)]
        if wrong:
            raise UsageError(f"transformers_drafts must name standalone drafts listed in drafts, got {wrong}. Fix: "
                             "copy names from drafts=[...] (feature drafts cannot run in transformers' assisted "
                             "generation), or null for every standalone draft.")
    bad = [e for e in cfg.get("llamacpp", []) if e not in ("plain", "speculative", "ngram")]
    if bad:
        raise UsageError(f"llamacpp must list plain, speculative and/or ngram, got {bad}.")
    if cfg.get("llamacpp"):
        from eval.shared.gguf import llamacpp_dir

        if not (llamacpp_dir(cfg.get("cache_dir")) / "bin" / "llama-server").is_file():
            raise UsageError("llamacpp=[...] needs llama.cpp. Fix: make setup-llamacpp (a few minutes, once).")
        if not cfg.get("llamacpp_target") and not str(cfg.target).startswith("embedded:"):
            raise UsageError("llamacpp=[...] needs the target as GGUF: llamacpp_target=<file.gguf> (an embedded "
                             "target brings its own).")
        if cfg.get("policy"):
            raise UsageError("llamacpp=[...] runs beside every policy, not inside policy=auto. Fix: drop one of them.")
        if "speculative" in cfg.llamacpp and not [g for g in gammas if g != "auto"]:
            raise UsageError("llamacpp=[speculative] drafts a fixed gamma: give one, e.g. gamma=[auto,2].")
    check_vllm_arms(cfg, gammas)
    tg = cfg.get("transformers_gamma")
    if tg is not None and (not isinstance(tg, int) or tg < 1):
        raise UsageError(f"transformers_gamma must be null (transformers' defaults) or an integer >= 1, got {tg!r}.")


def check_batch_sizes(cfg: DictConfig, gammas: list, thresholds: list) -> None:
    """batch_size above 1: draft chains at fixed gammas only."""
    sizes = cfg.get("batch_size") or [1]
    if not all(isinstance(b, int) and b >= 1 for b in sizes):
        raise UsageError(f"batch_size must be a list of integers >= 1, got {list(sizes)}.")
    if any(b > 1 for b in sizes):
        extras = [k for k in ("transformers", "llamacpp", "vllm") if cfg.get(k)] + (["policy"] if cfg.get("policy") else [])
        if list(cfg.proposers) != ["draft"] or "auto" in gammas or extras or cfg.compile or cfg.get("auto_off"):
            raise UsageError("batch_size above 1 measures draft chains at fixed gammas only: proposers=[draft], "
                             "gamma=[1,2,...] (no auto), no transformers/llamacpp/vllm/policy/auto_off, compile=false.")
        if any(thresholds):
            raise UsageError("batch_size above 1 drafts a fixed gamma: confidence_threshold=[0].")
        if any(feature_kind_of(d) for d in cfg.drafts):
            raise UsageError("batch_size above 1 runs standalone drafts only (a feature draft decodes at batch 1).")
        if cfg.n_prompts < max(sizes):
            raise UsageError(f"batch_size={max(sizes)} needs at least that many prompts: n_prompts >= {max(sizes)} "
                             f"(got {cfg.n_prompts}; two groups or more give an interval).")


def check_trees_and_router(cfg: DictConfig) -> None:
    """Token trees' shapes and the router's settings (also auto_off's)."""
    if any(k in TREES for k in cfg.proposers):
        if cfg.compile:
            raise UsageError("token trees decode with dynamic KV caches: compile=false with proposers tree or "
                             "dynamic_tree.")
        if cfg.tree.branching == "auto":
            if min(int(cfg.tree.max_depth), int(cfg.tree.max_nodes)) < 1:
                raise UsageError(f"tree.branching=auto needs tree.max_depth >= 1 and tree.max_nodes >= 1, got "
                                 f"{cfg.tree.max_depth} and {cfg.tree.max_nodes}.")
            if "tree" in cfg.proposers and any(feature_kind_of(d) for d in cfg.drafts):
                raise UsageError("tree.branching=auto replays standalone drafts only; a feature draft (Medusa, "
                                 "EAGLE-style) needs a fixed tree.branching, e.g. [2,2,1,1].")
        else:
            check_branching(list(cfg.tree.branching))
        if min(int(cfg.tree.depth), int(cfg.tree.width), int(cfg.tree.top_k)) < 1:
            raise UsageError(f"tree.depth, tree.width and tree.top_k must be >= 1, got {cfg.tree.depth}, "
                             f"{cfg.tree.width}, {cfg.tree.top_k}.")
    if (ROUTER in cfg.proposers or cfg.get("auto_off")) and (
            int(cfg.router.max_gamma) < 1 or not 0 < float(cfg.router.memory) <= 1 or int(cfg.router.probe_every) < 0
            or int(cfg.router.max_probe_every) < int(cfg.router.probe_every) or int(cfg.router.timing_window) < 0):
        raise UsageError(f"router needs max_gamma >= 1, 0 < memory <= 1, probe_every >= 0, max_probe_every >= "
                         f"probe_every and timing_window >= 0, got {OmegaConf.to_container(cfg.router)}.")


def check_policy(cfg: DictConfig) -> None:
    """policy=auto and policy_test."""
    if cfg.get("policy") not in (None, "auto"):
        raise UsageError(f"policy must be null (measure every policy asked for) or auto (choose one on the tune "
                         f"prompts, report it on the test prompts), got {cfg.policy!r}.")
    if cfg.get("policy_test", "chosen") not in ("chosen", "all"):
        raise UsageError(f"policy_test must be chosen (the test prompts run the chosen policy alone) or all (every "
                         f"policy, the choice flagged), got {cfg.policy_test!r}.")
    if cfg.get("policy_test", "chosen") == "all" and cfg.get("policy") != "auto":
        raise UsageError("policy_test=all lays policy=auto's choice beside every other policy; without policy=auto "
                         "every policy already runs on the test prompts. Fix: add policy=auto, or drop policy_test.")
    if cfg.get("policy") == "auto" and cfg.split != "test":
        raise UsageError("policy=auto chooses on the tune prompts and reports the test prompts: leave split=test.")


def check_prompts_source(cfg: DictConfig) -> None:
    """Built-in domains by name, or a prompts file whose every line is a prompt (split as asked)."""
    if cfg.get("prompts_file"):
        rows = read_jsonl(cfg.prompts_file, "prompts_file")
        check_prompt_rows(rows, cfg.prompts_file)
        return
    unknown = [d for d in cfg.domains if d not in DOMAINS]
    if unknown or not cfg.domains:
        raise UsageError(f"domains must list built-in prompt sets among {', '.join(DOMAINS)}, got "
                         f"{list(cfg.domains)}. Fix: domains=[general,code], or prompts_file=<your prompts>.jsonl.")


def check_models(cfg: DictConfig, drafts_key: str = "drafts") -> None:
    """The target and every draft exist and are complete, and share a vocabulary (from their files)."""
    target = model_folder(cfg.target, "target", cfg.get("cache_dir"))
    for draft in cfg[drafts_key]:
        folder = model_folder(draft, f"{drafts_key} entry {draft}", cfg.get("cache_dir"))
        check_same_vocabulary(target, folder, str(cfg.target), str(draft))


def check_speculate(cfg: DictConfig) -> None:
    """eval/speculate.py: every setting in range, the prompts, the models and the output folder."""
    check_eval_config(cfg)
    for key in ("max_new_tokens", "max_auto_gamma"):
        number_in(cfg[key], key, 1, integer=True)
    if cfg.get("draft_quant") not in ("auto", "none", "int8", "int4", None):
        raise UsageError(f"draft_quant must be auto, none, int8 or int4, got {cfg.draft_quant!r}.")
    check_prompts_source(cfg)
    check_models(cfg)
    if cfg.get("draft_vocab_from"):
        check_source(cfg.draft_vocab_from, "draft_vocab_from")
    writable_dir(cfg.out, "out")


def check_acceptance(cfg: DictConfig) -> None:
    """eval/acceptance.py."""
    check_sampling(cfg)
    if not cfg.drafts:
        raise UsageError("drafts=[...] must list at least one exported draft folder (or Hub id).")
    for key in ("n_prompts", "samples_per_prompt", "max_new_tokens", "batch_size"):
        number_in(cfg[key], key, 1, integer=True)
    if cfg.split not in ("tune", "test"):
        raise UsageError(f"split must be test (the reported numbers) or tune (for choosing), got {cfg.split!r}.")
    check_prompts_source(cfg)
    check_models(cfg)
    writable_dir(cfg.out, "out")


def check_compare(cfg: DictConfig) -> None:
    """eval/compare.py: the run folders exist and are finished runs."""
    if not list_value(cfg.runs, "runs", "outputs/distill/*"):
        raise UsageError("runs=[...] is empty. Fix: list run folders, e.g. 'runs=[outputs/distill/*]'.")
    for pattern in cfg.runs:
        found = sorted(glob.glob(str(pattern))) or [str(pattern)]
        for path in map(Path, found):
            if not (path / "summary.json").is_file():
                raise UsageError(f"runs: {path} has no summary.json: not a finished training run. Fix: pass run "
                                 "folders train/distill.py finished (outputs/distill/<run>).")
            try:
                summary = json.loads((path / "summary.json").read_text())
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise UsageError(f"runs: {path}/summary.json is not valid JSON. Fix: rerun or drop that run.") from None
            if not isinstance(summary, dict) or not isinstance(summary.get("after"), dict):
                raise UsageError(f"runs: {path}/summary.json holds no \"after\" metrics: not a summary "
                                 "train/distill.py wrote. Fix: drop that run, or rerun it to the end.")
    writable_dir(cfg.out, "out")


def check_export(cfg: DictConfig) -> None:
    """scripts/export_draft.py: a checkpoint that exists and is not cut short; an output folder it may write."""
    ckpt = Path(str(cfg.ckpt_path)).expanduser()
    if not ckpt.exists():
        raise UsageError(f"ckpt_path: {ckpt} does not exist. Fix: a .ckpt train/distill.py wrote, e.g. "
                         "outputs/distill/<run>/checkpoints/last.ckpt.")
    if ckpt.is_file():
        check_checkpoint_file(ckpt)
    elif not (ckpt / "latest").is_file():  # a DeepSpeed (ZeRO) checkpoint is a folder with a `latest` file
        newest = sorted(p.name for p in ckpt.glob("*.ckpt"))
        raise UsageError(f"ckpt_path: {ckpt} is a folder, not a checkpoint. Fix: a .ckpt file in it, e.g. "
                         f"ckpt_path={ckpt / ('last.ckpt' if 'last.ckpt' in newest or not newest else newest[-1])}.")
    out = Path(str(cfg.out)).expanduser()
    if out.exists() and not cfg.overwrite:
        raise UsageError(f"out: {out} already exists. Fix: another out=, or overwrite=true.")
    check_replaceable(out, "out", [ckpt], bool(cfg.overwrite))
    writable_dir(out, "out")
    if cfg.dtype not in (None, "float32", "bfloat16", "float16"):
        raise UsageError(f"dtype must be null, float32, bfloat16 or float16, got {cfg.dtype!r}.")


def check_generate(cfg: DictConfig) -> None:
    """scripts/generate_data.py."""
    from data.generated import PROMPT_SOURCES

    if cfg.prompts_from not in PROMPT_SOURCES:
        raise UsageError(f"prompts_from must be one of {', '.join(PROMPT_SOURCES)}, got {cfg.prompts_from!r}.")
    number_in(cfg.n_prompts, "n_prompts", 1, integer=True)
    number_in(cfg.batch_size, "batch_size", 1, integer=True)
    number_in(cfg.max_new_tokens, "max_new_tokens", 1, integer=True)
    number_in(cfg.temperature, "temperature", 0)
    if cfg.top_p is not None:
        number_in(cfg.top_p, "top_p", 0, 1, low_open=True)
    model_folder(cfg.target, "target", cfg.get("cache_dir"))
    engine = cfg.get("engine", "generate")
    if engine not in ("generate", "speculative", "vllm"):
        raise UsageError(f"engine must be generate, speculative or vllm, got {engine!r}.")
    if engine == "vllm":
        check_vllm_engine(cfg)
    if engine == "speculative":
        if not cfg.speculative.draft:
            raise UsageError("engine=speculative needs a draft: speculative.draft=<folder or embedded:name> sharing the "
                             "target's vocabulary, e.g. embedded:qwen2.5-coder-0.5b-instruct.")
        number_in(cfg.speculative.gamma, "speculative.gamma", 1, integer=True)
        if cfg.speculative.get("draft_quant", "none") not in ("none", "int8", "int4", "auto"):
            raise UsageError(f"speculative.draft_quant must be none, int8, int4 or auto, got "
                             f"{cfg.speculative.draft_quant!r}.")
        model_folder(cfg.speculative.draft, "speculative.draft", cfg.get("cache_dir"))
    if cfg.get("cpu_matmul", "torch") not in ("torch", "prepacked"):  # auto would time every row count of a batch
        raise UsageError(f"cpu_matmul must be torch or prepacked, got {cfg.cpu_matmul!r}.")
    check_dtype(cfg.dtype, "dtype")
    out = Path(str(cfg.out)).expanduser()
    if out.is_dir():
        raise UsageError(f"out: {out} is a folder; an answer store is one .jsonl file. Fix: out={out / 'answers.jsonl'}"
                         ", or another path.")
    writable_dir(out.parent, "out")


def check_vllm_arms(cfg: DictConfig, gammas: list) -> None:
    """eval/speculate.py vllm=[...]."""
    asked = list(cfg.get("vllm") or [])
    bad = [e for e in asked if e not in ("plain", "draft", "ngram")]
    if bad:
        raise UsageError(f"vllm must list plain, draft and/or ngram, got {bad}.")
    if not asked:
        return
    from eval.shared.vllm_server import vllm_bin

    try:
        vllm_bin(cfg.get("cache_dir"))
    except FileNotFoundError as e:
        raise UsageError(f"vllm=[...]: {e}") from None
    if cfg.get("policy"):
        raise UsageError("vllm=[...] runs beside every policy, not inside policy=auto. Fix: drop one of them.")
    if "draft" in asked and not [g for g in gammas if g != "auto"]:
        raise UsageError("vllm=[draft] drafts a fixed gamma: give one, e.g. gamma=[auto,3].")
    if "draft" in asked:
        served_by_vllm(cfg.drafts)
    lookup = list(cfg.get("vllm_lookup") or [2, 4])
    if len(lookup) != 2 or not all(isinstance(n, int) and n >= 1 for n in lookup) or lookup[0] > lookup[1]:
        raise UsageError(f"vllm_lookup must be [smallest, largest] n-gram sizes >= 1, got {lookup}.")
    number_in(cfg.get("vllm_kv_cache_gb", 1), "vllm_kv_cache_gb", 0, low_open=True)


def served_by_vllm(drafts) -> None:
    """Every draft of a kind vLLM serves (eval/shared/vllm_server.vllm_method_of says why not, naming the fix)."""
    from eval.shared.vllm_server import vllm_method_of

    for draft in drafts or []:
        vllm_method_of(str(draft))


def check_vllm_engine(cfg: DictConfig) -> None:
    """engine=vllm: vLLM installed, and a KV cache and context that can hold a batch."""
    from eval.shared.vllm_server import vllm_bin

    try:
        vllm_bin(cfg.get("cache_dir"))
    except FileNotFoundError as e:
        raise UsageError(f"engine=vllm: {e}") from None
    number_in(cfg.vllm.kv_cache_gb, "vllm.kv_cache_gb", 0, low_open=True)
    number_in(cfg.vllm.max_model_len, "vllm.max_model_len", cfg.max_new_tokens + 1, integer=True)
    number_in(cfg.vllm.get("in_flight", 2), "vllm.in_flight", 1, integer=True)


def check_cache_teacher(cfg: DictConfig) -> None:
    """scripts/cache_teacher.py."""
    number_in(cfg.top_k, "top_k", 1, integer=True)
    number_in(cfg.batch_size, "batch_size", 1, integer=True)
    model_folder(cfg.model.target.name_or_path, "model.target", cfg.paths.cache_dir)
    for source in cfg.data.get("sources", []) or []:
        check_source(source, "data.sources")


def check_bench_decoder(cfg: DictConfig) -> None:
    """scripts/bench_decoder.py."""
    number_in(cfg.gamma, "gamma", 1, integer=True)
    number_in(float(cfg.confidence_threshold), "confidence_threshold", 0, 1, high_open=True)
    for key in ("n_prompts", "max_new_tokens", "repeats"):
        number_in(cfg[key], key, 1, integer=True)
    check_prompts_source(OmegaConf.create({"prompts_file": cfg.prompts_file, "domains": [cfg.domain]}))
    target = model_folder(cfg.target, "target", cfg.get("cache_dir"))
    check_same_vocabulary(target, model_folder(cfg.draft, "draft", cfg.get("cache_dir")), str(cfg.target),
                          str(cfg.draft))
    writable_dir(cfg.out, "out")


def check_bench_draft_quant(cfg: DictConfig) -> None:
    """scripts/bench_draft_quant.py."""
    if not cfg.drafts:
        raise UsageError("drafts=[...] must list at least one standalone draft (an export folder or embedded:<name>).")
    for key in ("n_prompts", "max_new_tokens", "gamma", "repeats"):
        number_in(cfg[key], key, 1, integer=True)
    check_prompts_source(cfg)
    check_models(cfg)
    if cfg.get("draft_vocab_from"):
        check_source(cfg.draft_vocab_from, "draft_vocab_from")
    writable_dir(cfg.out, "out")


def context_length(folder) -> int | None:
    """The target's context (max_position_embeddings of its config.json), None where it does not say."""
    path = Path(str(folder)) / "config.json"
    if not path.is_file():
        return None
    config = json.loads(path.read_text())
    return config.get("max_position_embeddings") or config.get("text_config", {}).get("max_position_embeddings")


def check_prompt_lengths(cfg: DictConfig, tokenizer, target_folder, extra: int) -> None:
    """Every prompt to decode (both splits), encoded with the target's chat template, leaves room for
    max_new_tokens and `extra` drafted positions in the target's context: checked once the tokenizer is loaded,
    before the model is."""
    from data.prompts import encode_prompt, load_prompts

    context = context_length(target_folder)
    if not context:
        return
    longest = max(map(len, tokenizer.get_vocab()), default=1)  # no token covers more characters than this
    seen = set()
    for domain in ([None] if cfg.get("prompts_file") else cfg.domains):
        for split in dict.fromkeys([cfg.get("split", "test"), "tune"]):
            for i, prompt in enumerate(load_prompts(domain, cfg.n_prompts, cfg.get("prompts_file"), split)):
                key = json.dumps(prompt)
                if key in seen:  # a file without "split" serves both splits: each prompt measured once
                    continue
                seen.add(key)
                chars = sum(len(m["content"]) for m in prompt) if isinstance(prompt, list) else len(prompt)
                # a prompt of more than context x `longest` characters is too long for certain: not tokenized
                n = -(-chars // longest) if chars > context * longest else len(encode_prompt(tokenizer, prompt))
                if n + cfg.max_new_tokens + extra > context:
                    text = prompt if isinstance(prompt, str) else prompt[-1]["content"]
                    where = f"prompts_file {cfg.prompts_file}" if cfg.get("prompts_file") else f"domain {domain}"
                    size = f"{n} tokens" if chars <= context * longest else f"at least {n} tokens ({chars} characters)"
                    raise UsageError(f"{where}: the {split} prompt {i + 1} ('{' '.join(text[:400].split())[:40]}...') "
                                     f"is {size} with the chat template; with max_new_tokens={cfg.max_new_tokens} "
                                     f"(and {extra} drafted) it needs {n + cfg.max_new_tokens + extra} positions, the "
                                     f"target's context holds {context}. Fix: shorten it, or lower max_new_tokens.")


def check_export_gguf(cfg: DictConfig) -> None:
    """scripts/export_gguf.py."""
    from eval.shared.gguf import llamacpp_dir, spec_type_of

    if cfg.type not in ("f16", "q8_0", "q4_k_m"):
        raise UsageError(f"type must be f16, q8_0 or q4_k_m, got {cfg.type!r}.")
    folder = model_folder(cfg.export, "export", cfg.cache_dir)
    if folder is None or not (folder / "config.json").is_file():
        raise UsageError(f"export: {cfg.export} is not a local export folder with config.json.")
    spec_type_of(str(folder))  # Medusa / EAGLE-1 exports: no llama.cpp form, said here
    if not (llamacpp_dir(cfg.cache_dir) / "convert_hf_to_gguf.py").is_file():
        raise UsageError("llama.cpp is not built. Fix: make setup-llamacpp (a few minutes on 2 cores, once).")
    writable_dir(Path(str(cfg.out)).parent if cfg.out else folder, "out")


def check_bench_llamacpp(cfg: DictConfig) -> None:
    """scripts/bench_llamacpp.py."""
    from eval.shared.gguf import llamacpp_dir, spec_type_of

    if not (llamacpp_dir(cfg.cache_dir) / "bin" / "llama-server").is_file():
        raise UsageError("llama.cpp is not built. Fix: make setup-llamacpp (a few minutes on 2 cores, once).")
    for key in ("n_prompts", "max_new_tokens", "ctx"):
        number_in(cfg[key], key, 1, integer=True)
    number_in(cfg.temperature, "temperature", 0)
    for g in cfg.draft_max:
        number_in(g, "draft_max", 1, integer=True)
    if cfg.gguf_type not in ("f16", "q8_0", "q4_k_m"):
        raise UsageError(f"gguf_type must be f16, q8_0 or q4_k_m, got {cfg.gguf_type!r}.")
    check_prompts_source(cfg)
    for ref, what in [(cfg.target, "target")] + [(d, "drafts entry") for d in cfg.drafts]:
        if str(ref).endswith(".gguf"):
            from data.checks import existing_file

            existing_file(ref, what)
        else:
            model_folder(ref, f"{what} {ref}", cfg.cache_dir)
    for d in cfg.drafts:
        spec_type_of(str(d))  # Medusa / EAGLE-1 exports: no llama.cpp form, said before any server starts
    writable_dir(cfg.out, "out")


def check_bench_vllm(cfg: DictConfig) -> None:
    """scripts/bench_vllm.py."""
    from eval.shared.vllm_server import vllm_bin

    list_value(cfg.drafts, "drafts", "outputs/distill/<run>/export")
    served_by_vllm(cfg.drafts)
    try:
        vllm_bin(cfg.cache_dir)
    except FileNotFoundError as e:
        raise UsageError(str(e)) from None
    for key in ("n_prompts", "max_new_tokens", "num_speculative_tokens", "max_model_len"):
        number_in(cfg[key], key, 1, integer=True)
    if cfg.get("max_servers") is not None:
        number_in(cfg.max_servers, "max_servers", 1, integer=True)
    number_in(cfg.get("kv_cache_gb", 1), "kv_cache_gb", 0, low_open=True)
    number_in(cfg.temperature, "temperature", 0)
    check_prompts_source(cfg)
    check_models(cfg)
    writable_dir(cfg.out, "out")
