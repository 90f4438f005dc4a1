"""What train/distill.py accepts, checked before a model loads: its settings (`check_config`) and its inputs
(`check_inputs`: the target and draft files, data files, writable folders). eval/shared/preflight.py runs `check_distill`
from the command line, before torch and Lightning load; train() runs it again when called from Python. Light
imports only.
"""

from __future__ import annotations

import glob
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from data.checks import (UsageError, check_checkpoint_file, check_data_file, check_source, list_value, number_in,
                         writable_dir)
from data.owned import check_not_in_use, check_replaceable, is_rank_zero
from data.prompts import DOMAINS
from decode.drafts.kinds import FEATURE_KINDS
from eval.shared.preflight import check_dtype, check_same_vocabulary, check_trainer_device, model_folder
from train.checkpoint_meta import auto_resume, checkpoint_meta, shape_differences
from train.scaling import is_fsdp
from train.stores import generated_stores

LOSS_PARAMS = {"jsd": {"beta": (0, 1)}, "skew_kl": {"skew": (0, 1)}, "forward_kl": {}, "reverse_kl": {}, "tvd": {},
               "cross_entropy": {}}  # each loss's parameters and their open ranges ([0, 1) for skew)


def check_loss(loss: DictConfig) -> None:
    if loss.name not in LOSS_PARAMS:
        raise UsageError(f"unknown loss '{loss.name}'. Fix: loss=<one of {', '.join(LOSS_PARAMS)}>.")
    params = OmegaConf.to_container(loss.params) if loss.get("params") else {}
    for key, value in params.items():
        if key not in LOSS_PARAMS[loss.name]:
            raise UsageError(f"loss {loss.name} takes no parameter '{key}' (it takes "
                             f"{', '.join(LOSS_PARAMS[loss.name]) or 'none'}).")
        low, high = LOSS_PARAMS[loss.name][key]
        number_in(value, f"loss.params.{key}", low, high, low_open=key != "skew", high_open=True)


def check_config(cfg: DictConfig) -> None:
    """Every value in range and every combination allowed, before loading anything (no file is read)."""
    check_feature_draft(cfg)  # first: what a feature draft cannot do at all comes before how to fix the rest
    check_train_vocab(cfg)
    check_trainer_device(cfg.trainer)
    check_dtype(cfg.model.target.dtype, "model.target.dtype")
    check_dtype(cfg.model.draft.get("dtype", "float32"), "model.draft.dtype")
    check_layer_list(cfg.model.draft)
    check_trainer_numbers(cfg)
    check_lora(cfg.lora)
    if cfg.export.get("dtype") is not None:
        check_dtype(cfg.export.dtype, "export.dtype")
    if cfg.data.get("sources") is not None:
        sources = list_value(cfg.data.sources, "data.sources", "{kind: files, path: chats.jsonl, format: chat}")
        wrong = [s for s in sources if not isinstance(s, DictConfig)]
        if wrong:
            raise UsageError(f"data.sources entries must be data sources, got {wrong[0]!r}. Fix: "
                             "'data.sources=[{kind: files, path: chats.jsonl, format: chat}]'.")
    check_steps(cfg)  # numbers before the comparisons below, which need numbers
    number_in(cfg.loss.temperature, "loss.temperature", 0, low_open=True)
    number_in(cfg.loss.ce_weight, "loss.ce_weight", 0, 1)
    for key in ("block_size", "batch_size"):
        number_in(cfg.data[key], f"data.{key}", 2 if key == "block_size" else 1, integer=True)
    if cfg.data.get("train_blocks") is not None:
        number_in(cfg.data.train_blocks, "data.train_blocks", cfg.data.batch_size, integer=True)
    if cfg.data.get("train_sources") is not None:
        list_value(cfg.data.train_sources, "data.train_sources", "[medical]")
    if cfg.teacher not in ("live", "cache"):
        raise UsageError(f"teacher must be live or cache, got '{cfg.teacher}'.")
    top_k_cache = cfg.teacher == "cache" and cfg.model.draft.kind not in FEATURE_KINDS  # feature caches: any loss
    if top_k_cache and (cfg.loss.name not in ("forward_kl", "cross_entropy") or cfg.loss.temperature != 1):
        raise UsageError("teacher=cache stores the target's top-k at temperature 1: it supports loss=forward_kl (sparse "
                         "KL over top-k + tail) or loss=cross_entropy, with loss.temperature=1. Fix: add loss=forward_kl "
                         "(the default loss, jsd, needs full logits), or use teacher=live.")
    if top_k_cache:
        number_in(cfg.get("teacher_top_k", 64), "teacher_top_k", 1, integer=True)
        if cfg.model.draft.get("train_vocab"):
            raise UsageError("model.draft.train_vocab works with teacher=live (the cached teacher's top-k ids are not "
                             "restricted to the kept ids). Fix: model.draft.train_vocab=null, or teacher=live.")
    if cfg.get("feature_cache_storage", "float16") not in ("float16", "int8"):
        raise UsageError(f"feature_cache_storage must be float16 or int8, got {cfg.feature_cache_storage!r}.")
    if cfg.teacher == "cache" and cfg.spec_eval.enabled:
        raise UsageError("teacher=cache trains without the target, so it cannot run speculative decoding during "
                         "training. Fix: spec_eval.enabled=false (then judge the export with eval/speculate.py).")
    op = cfg.onpolicy
    if not 0 <= op.fraction <= 1 or op.new_tokens < 1 or op.prompt_tokens < 1 or op.temperature < 0:
        raise UsageError("onpolicy needs 0 <= fraction <= 1, prompt_tokens >= 1, new_tokens >= 1, temperature >= 0.")
    if op.fraction > 0 and (cfg.teacher == "cache" or op.prompt_tokens + op.new_tokens > cfg.data.block_size * 4):
        raise UsageError("onpolicy.fraction > 0 needs teacher=live (the target grades the draft's own text) and "
                         "prompt_tokens + new_tokens of a few blocks at most.")
    check_loss(cfg.loss)
    if cfg.checkpoint.monitor not in ("val/expected_accept", "val/top1_agree", "val/alpha"):
        raise UsageError(f"checkpoint.monitor must be val/expected_accept, val/top1_agree or val/alpha, "
                         f"got '{cfg.checkpoint.monitor}'.")
    keep = list_value(cfg.checkpoint.get("keep_steps") or [], "checkpoint.keep_steps", "50,250,1000")
    for step in keep:
        number_in(step, "checkpoint.keep_steps entries", low=1, integer=True)
    if cfg.checkpoint.monitor == "val/alpha" and is_fsdp(cfg.trainer.get("strategy")):
        raise UsageError("checkpoint.monitor=val/alpha needs speculative decoding during training, which is off under "
                         "FSDP (the target is sharded across ranks). Fix: checkpoint.monitor=val/expected_accept.")
    if cfg.checkpoint.monitor == "val/alpha" and not (cfg.spec_eval.enabled and cfg.spec_eval.every_n_validations == 1):
        raise UsageError("checkpoint.monitor=val/alpha needs spec_eval.enabled=true and spec_eval.every_n_validations=1 "
                         "(alpha must be measured at every validation).")
    if cfg.progress_bar not in ("rich", "tqdm", "none"):
        raise UsageError(f"progress_bar must be rich, tqdm or none, got '{cfg.progress_bar}'.")
    if cfg.export.checkpoint not in ("last", "best"):
        raise UsageError(f"export.checkpoint must be last or best, got '{cfg.export.checkpoint}'.")
    out = Path(cfg.export.dir)
    if cfg.export.enabled and out.exists() and not cfg.export.overwrite:
        raise UsageError(f"Export folder {out} already exists. Fix: set export.dir elsewhere, "
                         "or export.overwrite=true.")
    if cfg.export.enabled:  # never the run folder, never a folder holding what no export wrote
        check_replaceable(out, "export.dir", [cfg.paths.output_dir], bool(cfg.export.overwrite))
    check_generated_data(cfg)
    check_spec_eval(cfg)


def check_feature_draft(cfg: DictConfig) -> None:
    """Medusa heads and the EAGLE-style drafts read the live target's hidden states and share its embeddings/head."""
    d = cfg.model.draft
    if d.kind not in FEATURE_KINDS:
        return
    fixes = {"onpolicy.fraction=0": cfg.onpolicy.fraction > 0, "lora.enabled=false": cfg.lora.enabled}
    wrong = [fix for fix, bad in fixes.items() if bad]
    if wrong:
        raise UsageError(f"model.draft.kind={d.kind} (a feature draft) needs " + ", ".join(wrong) + ".")
    if d.get("loss_decay", 0.8) <= 0 or d.get("unroll_steps", 1) < 1:
        raise UsageError("model.draft.loss_decay must be > 0 and model.draft.unroll_steps >= 1.")


def check_trainer_numbers(cfg: DictConfig) -> None:
    """Lightning and data-loader settings that would otherwise fail after the models load, or train wrongly
    without a word (a negative gradient clip, logging never)."""
    t = cfg.trainer
    number_in(t.get("accumulate_grad_batches", 1), "trainer.accumulate_grad_batches", 1, integer=True)
    number_in(t.get("log_every_n_steps", 50), "trainer.log_every_n_steps", 1, integer=True)
    if t.get("gradient_clip_val") is not None:
        number_in(t.gradient_clip_val, "trainer.gradient_clip_val", 0)
    devices = t.get("devices", "auto")
    if devices != "auto" and not (isinstance(devices, str) and devices == "-1"):
        if isinstance(devices, int) and not isinstance(devices, bool):
            if devices < 1 and devices != -1:
                raise UsageError(f"trainer.devices must be auto, -1 (all), a count >= 1 or a list of device ids, got "
                                 f"{devices}.")
        elif not (isinstance(devices, ListConfig) and devices):
            raise UsageError(f"trainer.devices must be auto, -1 (all), a count >= 1 or a list of device ids, got "
                             f"{devices!r}.")
    betas = list_value(cfg.optim.betas, "optim.betas", "0.9,0.999")
    if len(betas) != 2:
        raise UsageError(f"optim.betas must be two numbers (Adam's beta1, beta2), got {betas}. Fix: "
                         "optim.betas=[0.9,0.999].")
    number_in(cfg.data.get("eval_batch_size", 1), "data.eval_batch_size", 1, integer=True)
    number_in(cfg.data.get("num_workers", 0), "data.num_workers", 0, integer=True)
    if cfg.loss.get("chunk_size") is not None:
        number_in(cfg.loss.chunk_size, "loss.chunk_size", 1, integer=True)


def check_lora(lora: DictConfig) -> None:
    if not lora.enabled:
        return
    number_in(lora.r, "lora.r", 1, integer=True)
    number_in(lora.alpha, "lora.alpha", 0, low_open=True)
    number_in(lora.dropout, "lora.dropout", 0, 1, high_open=True)
    modules = list_value(lora.target_modules, "lora.target_modules", "q_proj,v_proj")
    if not modules or not all(isinstance(m, str) and m for m in modules):
        raise UsageError(f"lora.target_modules must name the draft's linear layers, got {modules}. Fix: e.g. "
                         "lora.target_modules=[q_proj,v_proj].")


def check_lora_modules(lora: DictConfig, folder: Path | None, name: str) -> None:
    """Every lora.target_modules name is a layer of the model being adapted (its weights' tensor names)."""
    from eval.shared.preflight import weight_names

    if not lora.enabled or folder is None:
        return
    names = weight_names(folder)
    present = {part for n in names for part in n.split(".")}
    missing = [m for m in lora.target_modules if m not in present]
    if names and missing:
        linear = sorted({n.split(".")[-2] for n in names if n.endswith(".weight") and "proj" in n})
        raise UsageError(f"lora.target_modules {missing} are not layers of {name} (its layers: "
                         f"{', '.join(linear[:8]) or 'none named *proj'}). Fix: e.g. lora.target_modules=[q_proj,v_proj].")


def check_layer_list(d: DictConfig) -> None:
    """model.draft.layers of a truncated draft: distinct layer indices (their range is checked with the model's
    config, check_layer_range)."""
    if d.kind != "truncated" or d.get("layers") is None:
        return
    layers = list_value(d.layers, "model.draft.layers", "0,1,2,3")
    if not layers or any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in layers) \
            or len(set(layers)) != len(layers):
        raise UsageError(f"model.draft.layers must be distinct layer indices >= 0 (at least one), got {layers}. Fix: "
                         "e.g. model.draft.layers=[0,1,2,3].")


def check_layer_range(d: DictConfig, folder: Path | None, name: str) -> None:
    """Every index of model.draft.layers exists in the model being cut (`folder`'s config.json)."""
    import json

    if d.kind != "truncated" or d.get("layers") is None or folder is None or not (folder / "config.json").is_file():
        return
    config = json.loads((folder / "config.json").read_text())
    n = config.get("num_hidden_layers") or config.get("text_config", {}).get("num_hidden_layers")
    bad = [i for i in d.layers if n and i >= n]
    if bad:
        raise UsageError(f"model.draft.layers={list(d.layers)}: {name} has {n} layers (0 to {n - 1}), so {bad} do "
                         f"not exist. Fix: indices below {n}, e.g. model.draft.layers=[0,1,2,3].")


def check_resume(cfg: DictConfig) -> None:
    """The checkpoint a run would resume from is whole and holds a draft of this run's shape. ckpt_path=auto with a
    last.ckpt cut short resumes from the newest whole checkpoint beside it (train/checkpointing.py), else refuses."""
    if cfg.ckpt_path in (None, "", "none", "last"):
        return
    if cfg.ckpt_path == "auto":
        ckpt = auto_resume(cfg.paths.output_dir)
        if ckpt is None:
            return
    else:
        ckpt = Path(str(cfg.ckpt_path)).expanduser()
        if not ckpt.is_file():
            raise UsageError(f"ckpt_path: {ckpt} is not a file. Fix: a .ckpt of a run (its checkpoints/last.ckpt), "
                             "auto (this run's own, if any), last (the newest run's) or null (start fresh).")
        check_checkpoint_file(ckpt)
    meta = checkpoint_meta(ckpt)
    if meta and isinstance(meta.get("config"), dict):
        differ = shape_differences(meta["config"], OmegaConf.to_container(cfg, resolve=True))
        if differ:
            raise UsageError(f"ckpt_path: {ckpt} holds a draft of another shape, trained with {'; '.join(differ[:3])}. "
                             "Fix: the same model settings as that run, or ckpt_path=null with another "
                             "paths.output_dir to start afresh.")


def check_train_vocab(cfg: DictConfig) -> None:
    d = cfg.model.draft
    ranked = d.get("train_vocab_from")
    if ranked is None:
        return
    if not d.get("train_vocab"):
        raise UsageError("model.draft.train_vocab_from chooses which ids model.draft.train_vocab keeps; it needs "
                         "train_vocab: N. Fix: model.draft.train_vocab=8192, or model.draft.train_vocab_from=null.")
    if ranked != "data" and not isinstance(ranked, DictConfig):
        raise UsageError(f"model.draft.train_vocab_from must be null (the lowest ids), data (the ids the loss covers "
                         f"in this run's training text, most frequent first) or a data source as in data.sources, "
                         f"got {ranked!r}.")


def check_steps(cfg: DictConfig) -> None:
    t, o = cfg.trainer, cfg.optim
    if t.max_steps == -1 and (t.get("max_epochs") or 0) >= 1:
        pass  # Lightning: train by epochs
    else:
        number_in(t.max_steps, "trainer.max_steps", 1, integer=True)
    if t.get("val_check_interval") is not None:
        number_in(t.val_check_interval, "trainer.val_check_interval", 0, low_open=True)
    number_in(o.lr, "optim.lr", 0, 1, low_open=True)
    number_in(o.warmup_steps, "optim.warmup_steps", 0, integer=True)
    number_in(o.weight_decay, "optim.weight_decay", 0)
    number_in(o.min_lr_ratio, "optim.min_lr_ratio", 0, 1)
    for i, b in enumerate(o.betas):
        number_in(b, f"optim.betas[{i}]", 0, 1, high_open=True)
    number_in(cfg.checkpoint.every_n_steps, "checkpoint.every_n_steps", 0, integer=True)


def check_generated_data(cfg: DictConfig) -> None:
    """data=generated: what the target answers before training."""
    from data.generated import PROMPT_SOURCES

    gen = cfg.data.get("generate")
    if gen is None:
        return
    if cfg.data.get("prompts_from") is not None and cfg.data.prompts_from not in PROMPT_SOURCES:
        raise UsageError(f"data.prompts_from must be one of {', '.join(PROMPT_SOURCES)}, got "
                         f"{cfg.data.prompts_from!r}.")
    for key in ("n_prompts", "batch_size", "max_new_tokens"):
        number_in(gen[key], f"data.generate.{key}", 1, integer=True)
    number_in(gen.temperature, "data.generate.temperature", 0)
    if gen.get("cpu_matmul", "torch") not in ("torch", "prepacked"):
        raise UsageError(f"data.generate.cpu_matmul must be torch or prepacked, got {gen.cpu_matmul!r}.")
    engine = gen.get("engine", "generate")
    if engine not in ("generate", "speculative", "vllm"):
        raise UsageError(f"data.generate.engine must be generate, speculative or vllm, got {engine!r}.")
    if engine == "vllm":
        from eval.shared.vllm_server import vllm_bin

        try:
            vllm_bin(cfg.paths.cache_dir)
        except FileNotFoundError as e:
            raise UsageError(f"data.generate.engine=vllm: {e}") from None


def check_spec_eval(cfg: DictConfig) -> None:
    s = cfg.spec_eval
    if not s.enabled:
        return
    number_in(s.gamma, "spec_eval.gamma", 1, integer=True)
    number_in(s.n_prompts, "spec_eval.n_prompts", 1, integer=True)
    number_in(s.max_new_tokens, "spec_eval.max_new_tokens", 1, integer=True)
    number_in(s.temperature, "spec_eval.temperature", 0)
    number_in(s.confidence_threshold, "spec_eval.confidence_threshold", 0, 1, high_open=True)
    domains = [s.domain] if isinstance(s.domain, str) else list(s.domain or [])
    unknown = [d for d in domains if d not in DOMAINS]
    if unknown and not s.prompts_file:
        raise UsageError(f"spec_eval.domain must be among {', '.join(DOMAINS)} (or null: the data's domain), got "
                         f"{unknown}.")
    if s.prompts_file:
        from data.checks import check_prompt_rows, read_jsonl

        check_prompt_rows(read_jsonl(s.prompts_file, "spec_eval.prompts_file"), s.prompts_file)


def check_inputs(cfg: DictConfig, stores: list[Path] = ()) -> None:
    """The files a run reads and the folders it writes: the target and a pretrained draft (complete, one
    vocabulary), every data file (answer `stores` the run fills first may be missing, or end in a line cut by a
    kill, which the run drops), and the output folders."""
    cache = cfg.paths.cache_dir
    target = model_folder(cfg.model.target.name_or_path, "model.target.name_or_path", cache)
    d = cfg.model.draft
    folders = {}  # model.draft.name_or_path / source -> its local folder (None: not converted or a Hub id yet)
    for key in ("name_or_path", "source"):
        if d.get(key):
            folders[key] = model_folder(d[key], f"model.draft.{key}", cache)
            check_same_vocabulary(target, folders[key], str(cfg.model.target.name_or_path), str(d[key]))
    cut = folders["source"] if d.get("source") else target  # what a truncated draft is cut from
    check_layer_range(d, cut, str(d.get("source") or cfg.model.target.name_or_path))
    pretrained = d.kind == "pretrained" and d.get("name_or_path")
    check_lora_modules(cfg.lora, folders["name_or_path"] if pretrained else cut,
                       str(d.name_or_path if pretrained else d.get("source") or cfg.model.target.name_or_path))
    stores = {Path(str(s)).expanduser() for s in stores}
    for source in cfg.data.get("sources", []) or []:
        if source.get("kind", "builtin") != "files":
            continue
        paths = sorted(glob.glob(str(Path(str(source.path)).expanduser()))) or [str(source.path)]
        for path in paths:
            if Path(path).expanduser() in stores:
                if Path(path).exists():
                    check_data_file(path, source.get("format", "text"), "data.sources", torn_tail_ok=True)
                continue
            check_data_file(path, source.get("format", "text"), "data.sources")
    ranked = d.get("train_vocab_from")
    if ranked not in (None, "data") and Path(str(ranked.get("path", ""))).expanduser() not in stores:
        check_source(ranked, "model.draft.train_vocab_from")  # a store this run fills first is checked as one
    if cfg.teacher == "cache" and cfg.teacher_cache and d.kind not in FEATURE_KINDS:
        folder = Path(str(cfg.teacher_cache)).expanduser()
        if not (folder / "done.json").is_file():
            raise UsageError(f"teacher_cache: {folder} is not a finished teacher cache (no done.json). Fix: run "
                             "scripts/cache_teacher.py (it resumes), or teacher_cache=null.")
    if is_rank_zero():  # DDP's other ranks run in rank 0's folder, under its lock
        check_not_in_use(cfg.paths.output_dir, "paths.output_dir")
    check_resume(cfg)
    writable_dir(cfg.paths.output_dir, "paths.output_dir")
    writable_dir(cfg.paths.cache_dir, "paths.cache_dir")


def check_distill(cfg: DictConfig) -> None:
    """Everything train/distill.py can check before it loads a model."""
    check_config(cfg)
    check_inputs(cfg, [store for store, *_ in generated_stores(cfg)])
