"""Distill a draft model from a frozen target's logits, then export it as a Hugging Face folder.

    python train/distill.py                                  # embedded SmolLM2-135M-Instruct target, general text
    python train/distill.py +domain=medical                  # medical corpora (HPO + ICD-10-CM)
    python train/distill.py trainer.max_steps=20 logger=wandb

Prints validation top-1 agreement and E[accept] = mean sum_v min(p, q) before and after training, and where
the checkpoint and the export landed. Everything is configured in conf/ (see docs/training.md).
"""

from __future__ import annotations

if __name__ == "__main__":  # bad input ends here in about a second (one line, exit 2), before torch loads
    from train.checks import check_distill
    from eval.shared.preflight import preflight

    preflight("distill", check_distill)

import contextlib
import json
import logging
import os
import time
import warnings
from pathlib import Path

import hydra
import lightning as L
import torch
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from omegaconf import DictConfig, OmegaConf

from eval.shared.preflight import usage_errors
from data.owned import is_rank_zero, run_lock
from data.datamodule import DistillDataModule
from data.prompts import DOMAINS, encode_prompt, load_prompts
from data.token_ranking import rank_labels, rank_source
from decode.drafts.feature_drafts import is_feature_draft
from decode.drafts.kinds import FEATURE_KINDS
from decode.models.loading import check_same_vocab, load_frozen, load_tokenizer, special_token_ids
from decode.kernels.runtime import peak_rss_gb, setup_cpu
from eval.shared.export import export_checkpoint, tokenizer_files
from eval.shared.lora import add_lora, lora_settings
from eval.shared.provenance import provenance
from train.drafts import build_draft
from train.callbacks import LastFitValidation, SpeculativeEval
from train.loggers import build_loggers, finish_wandb, run_name_and_tags
from train.checkpointing import (AtomicCheckpointIO, FlushLogsAtCheckpoints, PeriodicLastCheckpoint, atomic_file,
                                 check_free_disk, checkpoint_bytes, checkpoint_step, final_weights_win, find_resume,
                                 load_before, weight_bytes)
from train.checks import check_config, check_inputs
from train.stores import generated_stores
from train.scaling import is_fsdp, trainer_kwargs
from train.losses import LossSettings
from train.module import DistillModule, OptimSettings
from train.progress import StepLines, progress_bar

log = logging.getLogger("draftsmith")


def quiet_known_warnings() -> None:
    """Lightning warnings that would only mislead here. Installed when a run starts (a filter installed at import
    is lost when a caller such as pytest restores the warning filters after importing this module)."""
    # the frozen target sits in eval mode on purpose
    warnings.filterwarnings("ignore", message=r".*module\(s\) in eval mode at the start of training.*")
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated.*")
    # a resumed run skips the batches it already trained on (data/datamodule.py logs how many): the warning that
    # the dataloader "is not resumable" would say the opposite
    warnings.filterwarnings("ignore", message=r".*ended before the epoch ended and your dataloader is not resumable.*")
    # train/loggers.py keeps a resumed run's metrics.csv rows: the warning that they will be deleted is wrong
    warnings.filterwarnings("ignore", message=r".*Experiment logs directory .*csv.* exists and is not empty.*")


# Lightning's advertisement for a cloud logging service at every start would only distract.
logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(lambda r: "litlogger" not in r.getMessage())
# before/after table: teacher-forced metrics on held-out text; speculative decoding on the test prompts
METRICS = ("val/top1_agree", "val/expected_accept", "val/kl", "test/alpha", "test/tau", "test/speedup")


def resolve_teacher_cache(cfg: DictConfig, data_cfg: dict, tokenizer, target=None,
                          aux_layers: list[int] | None = None) -> str | None:
    """teacher=cache: the folder scripts/cache_teacher.py wrote for this target and these data settings, else the
    target's top-`teacher_top_k` built here first (resumable); for a feature draft, the target's feature cache (with
    `aux_layers`' inputs for an EAGLE-3 draft), likewise built here when it is missing."""
    if cfg.teacher != "cache":
        return None
    from data.teacher_cache_files import DONE, cache_aux_layers, cache_kind
    from train.teacher_cache import default_cache_path, reuse_richer_cache

    feature = cfg.model.draft.kind in FEATURE_KINDS
    if cfg.teacher_cache:
        path = Path(str(cfg.teacher_cache)).expanduser()
        if (path / DONE).is_file() and (cache_kind(path) == "features") != feature:
            raise ValueError(f"teacher_cache={path} holds the target's {cache_kind(path)}, but a "
                             f"{'feature' if feature else 'standalone'} draft trains from its "
                             f"{'features' if feature else 'top-k'}. Fix: teacher_cache=null (the default cache).")
        if aux_layers and (path / DONE).is_file() and cache_aux_layers(path) != list(aux_layers):
            raise ValueError(f"teacher_cache={path} holds the inputs of target layers {cache_aux_layers(path)}, this "
                             f"draft reads layers {list(aux_layers)}. Fix: teacher_cache=null (the default cache).")
        if not feature or (path / DONE).is_file():
            return str(path)
    dm = DistillDataModule(tokenizer, **data_module_kwargs(cfg, data_cfg, view=False))
    data_name = dm.cache_path.name
    if feature:
        storage = str(cfg.get("feature_cache_storage", "float16"))
        path = cfg.teacher_cache or default_cache_path(cfg.paths.cache_dir, cfg.model.target.slug, data_name, None,
                                                       aux_layers, storage)
        if not cfg.teacher_cache and not aux_layers and storage == "float16":
            path = reuse_richer_cache(Path(path))
        return build_teacher_cache(cfg, dm, target, path, aux_layers, storage=storage)
    base = default_cache_path(cfg.paths.cache_dir, cfg.model.target.slug, data_name, 1).parent
    found = sorted(base.glob(f"{data_name}-k*/{DONE}"))  # one scripts/cache_teacher.py wrote, whatever its k
    if found:
        return str(found[-1].parent)
    if target is None:
        raise FileNotFoundError(f"teacher=cache: no teacher cache for these data settings under {base}. Fix: run "
                                "`python scripts/cache_teacher.py` with the same model/target and data overrides first.")
    top_k = int(cfg.teacher_top_k)
    return build_teacher_cache(cfg, dm, target, default_cache_path(cfg.paths.cache_dir, cfg.model.target.slug,
                                                                   data_name, top_k), top_k=top_k)


def build_teacher_cache(cfg: DictConfig, dm: DistillDataModule, target, out, aux_layers=None,
                        top_k: int | None = None, storage: str = "float16") -> str:
    """The target's final hidden states (and `aux_layers`' inputs), or with `top_k` its top-k log-probs, over the
    very blocks training reads (train/teacher_cache.py), once."""
    from data.teacher_cache_files import DONE
    from train.teacher_cache import build_cache

    done = (Path(out) / DONE).is_file()
    if not done:
        dm.setup()
        log.info("teacher=cache: caching %s's %s over %d train + %d val blocks (once, resumable) -> %s",
                 cfg.model.target.name_or_path, f"top-{top_k}" if top_k else "features", len(dm.train_set),
                 len(dm.val_set), out)
    return str(build_cache(target, {"train": dm.train_set, "val": dm.val_set}, out, top_k, cfg.cache_batch_size,
                           info={"target": str(cfg.model.target.name_or_path), "data": dm.cache_path.name},
                           aux_layers=aux_layers, storage=storage, rows=None if done else view_rows(cfg, dm)))


def view_rows(cfg: DictConfig, dm: DistillDataModule) -> dict | None:
    """The rows of each split the run's view reads (data.train_sources / data.train_blocks; None without one): a
    cache builds their shards first, and the run trains once they are there (data/views.py)."""
    view = DistillDataModule(dm.tokenizer, **data_module_kwargs(cfg, cfg.data))
    if not view.train_sources and view.train_blocks is None:
        return None
    return {split: view.view(split, len(rows)) for split, rows in (("train", dm.train_set), ("val", dm.val_set))}


def answer_missing_prompts(cfg: DictConfig, tokenizer, target) -> None:
    """data=generated: the target answers the prompts missing from each store before training starts."""
    from data.generated import check_store_settings, drop_torn_tail, seed_from_repo
    from train.teacher_data import generate_store, missing_prompts, store_settings

    gen = cfg.data.get("generate")
    for store, temperature, domain, seed in generated_stores(cfg):
        settings = OmegaConf.create({"target": cfg.model.target.name_or_path, "dtype": cfg.model.target.dtype,
                                     "cache_dir": cfg.paths.cache_dir, "prompts_from": domain,
                                     "n_prompts": gen.n_prompts, "batch_size": gen.batch_size,
                                     "max_new_tokens": gen.max_new_tokens, "temperature": temperature, "top_p": None,
                                     "seed": seed, "threads": None, "out": str(store),
                                     "engine": gen.get("engine", "generate"),
                                     "cpu_matmul": gen.get("cpu_matmul", "torch"),
                                     "speculative": gen.get("speculative") or {"draft": None, "gamma": 3},
                                     "vllm": gen.get("vllm") or {"kv_cache_gb": 2, "max_model_len": 2048,
                                                                  "in_flight": 2}})
        seed_from_repo(store, cfg.model.target.slug, domain, store_settings(settings), seed)  # data/stores/
        drop_torn_tail(store)  # a kill mid-write: the cut line goes (its prompt is answered again)
        missing = missing_prompts(domain, gen.n_prompts, seed, store)
        check_store_settings(store, store_settings(settings), adding=bool(missing))  # greedy, sampled never mix
        if not missing:
            continue
        if os.environ.get("RANK", "0") != "0" or os.environ.get("LOCAL_RANK", "0") != "0":
            raise RuntimeError(f"{len(missing)} prompts are not answered yet in {store}, and this is not rank 0 (all "
                               "ranks start at once under torchrun/SLURM). Fix: run `python scripts/generate_data.py "
                               f"prompts_from={domain} n_prompts={gen.n_prompts} "
                               f"temperature={temperature} seed={seed} out={store}` once, then launch.")
        log.info("data=generated: the target answers %d %s prompts first (T=%g, seed %d, resumable store %s)",
                 len(missing), domain, temperature, seed, store)
        generate_store(settings, target=target, tokenizer=tokenizer)


def train_vocab_ranking(cfg: DictConfig, datamodule, tokenizer, draft) -> tuple[list[int] | None, str | None]:
    """model.draft.train_vocab_from: the ids the trained head keeps, most frequent first, and where they came from
    (None, None: the lowest ids)."""
    ranked = cfg.model.draft.get("train_vocab_from")
    if ranked is None or not cfg.model.draft.get("train_vocab"):
        return None, None
    vocab_size = draft.get_output_embeddings().out_features
    if ranked == "data":
        ranking, origin = rank_labels(datamodule.train_labels(), vocab_size), f"training text of {cfg.data.name}"
    else:
        ranking, origin = rank_source(ranked, tokenizer, vocab_size, "model.draft.train_vocab_from"), str(
            OmegaConf.to_container(ranked, resolve=True))
    log.info("train_vocab_from: %d distinct ids of %s ranked by frequency; the head keeps %d ids", len(ranking),
             origin, cfg.model.draft.train_vocab)
    return ranking, origin


def data_module_kwargs(cfg: DictConfig, data_cfg: dict, view: bool = True) -> dict:
    """DistillDataModule's arguments; view=False: every block, whatever data.train_sources / train_blocks say (a
    teacher cache is built over all of them, so that every view reads it)."""
    return dict(sources=data_cfg["sources"], block_size=data_cfg["block_size"], batch_size=data_cfg["batch_size"],
                eval_batch_size=data_cfg["eval_batch_size"], max_train_tokens=data_cfg["max_train_tokens"],
                val_tokens=data_cfg["val_tokens"], train_on_prompt=data_cfg["train_on_prompt"], seed=cfg.seed,
                num_workers=data_cfg["num_workers"], cache_dir=cfg.paths.cache_dir, name=data_cfg["name"],
                train_sources=data_cfg.get("train_sources") if view else None,
                train_blocks=data_cfg.get("train_blocks") if view else None,
                train_blocks_pick=str(data_cfg.get("train_blocks_pick") or "spread"))


def build_models(cfg: DictConfig):
    t, d, cache = cfg.model.target, cfg.model.draft, cfg.paths.cache_dir
    log.info("target: loading %s", t.name_or_path)
    tokenizer = load_tokenizer(t.name_or_path, cache_dir=cache, trust_remote_code=t.trust_remote_code)
    target = load_frozen(t.name_or_path, dtype=t.dtype, cache_dir=cache, attn_implementation=t.attn_implementation,
                         revision=t.revision, trust_remote_code=t.trust_remote_code)
    draft_tokenizer = None
    donor = d.name_or_path if d.kind == "pretrained" else d.get("source") if d.kind == "truncated" else None
    if donor:  # the other kinds copy the target's vocabulary by construction
        draft_tokenizer = load_tokenizer(donor, cache_dir=cache)
        check_same_vocab(tokenizer, draft_tokenizer, target_name=t.name_or_path, draft_name=donor)
    draft = build_draft(target, d.kind, layers=d.get("layers"), config=d.get("config"),
                        copy_embeddings=d.get("copy_embeddings", True), name_or_path=d.get("name_or_path"),
                        train_embeddings=d.train_embeddings, dtype=d.dtype, cache_dir=cache, seed=cfg.seed,
                        source=d.get("source"), num_heads=d.get("num_heads", 3), num_layers=d.get("num_layers", 1),
                        init_layer=d.get("init_layer", -1), aux_layers=d.get("aux_layers"))
    check_same_vocab(tokenizer, draft_tokenizer, target, draft, t.name_or_path, f"draft ({d.kind})")
    if cfg.lora.enabled:  # e.g. a general draft adapted to a domain: only the adapters train
        draft = add_lora(draft, lora_settings(cfg.lora))
    max_pos = getattr(target.config, "max_position_embeddings", None)
    if max_pos and cfg.data.block_size > max_pos:
        raise ValueError(f"data.block_size={cfg.data.block_size} exceeds the target's maximum sequence length "
                         f"({max_pos}). Fix: data.block_size={max_pos} or less.")
    n_target = sum(p.numel() for p in target.parameters())
    n_draft = sum(p.numel() for p in draft.parameters())
    n_train = sum(p.numel() for p in draft.parameters() if p.requires_grad)
    log.info("target %.1fM params (frozen) | draft %.1fM params, %.1fM trainable", n_target / 1e6, n_draft / 1e6,
             n_train / 1e6)
    return tokenizer, target, draft


def spec_eval_domains(cfg: DictConfig) -> list[str]:
    """The held-out prompt sets for alpha: spec_eval.domain (one, or a list: n_prompts from each), else the data's
    domain (generated data: its prompts')."""
    chosen = cfg.spec_eval.domain
    if chosen:
        return [chosen] if isinstance(chosen, str) else list(chosen)
    domain = cfg.data.get("prompts_from") or cfg.data.name
    return [domain if domain in DOMAINS else "general"]


def build_spec_eval(cfg: DictConfig, tokenizer, target, ranking: list[int] | None = None) -> SpeculativeEval | None:
    """Real speculative decoding on held-out prompts of the run's domain, at validations (see train/callbacks.py):
    the `tune` split during fit (what checkpoint selection reads), the `test` split for the reported figures."""
    s = cfg.spec_eval
    if not s.enabled:
        return None
    if is_fsdp(cfg.trainer.get("strategy")):
        log.warning("spec_eval is off under FSDP: the target is sharded across ranks, and decoding it token by token "
                    "on every rank would be slow and wrong to time. The teacher-forced metrics (val/expected_accept, "
                    "val/top1_agree, val/kl) still run; judge the export with eval/speculate.py on one GPU.")
        return None
    domains = spec_eval_domains(cfg)[:1] if s.prompts_file else spec_eval_domains(cfg)  # a file: its prompts once
    tune, test = ([encode_prompt(tokenizer, p) for d in domains for p in load_prompts(d, s.n_prompts, s.prompts_file,
                                                                                      split)]
                  for split in ("tune", "test"))
    eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    return SpeculativeEval(tune, test, gamma=s.gamma, max_new_tokens=s.max_new_tokens,
                           every_n_validations=s.every_n_validations, temperature=s.temperature, eos_token_ids=eos,
                           seed=cfg.seed, cpu_matmul=s.cpu_matmul, draft_quant=s.draft_quant,
                           draft_vocab=s.get("draft_vocab"), special_ids=special_token_ids(tokenizer, target),
                           confidence_threshold=float(s.get("confidence_threshold", 0.0)),
                           draft_vocab_ranking=ranking)  # the cut head keeps the ids it trained over


def decoding_conditions(measured: dict) -> str:
    """What the callback's decoding ran with, for the before/after table's caption."""
    threshold, size = measured.get("confidence_threshold"), measured.get("draft_vocab")
    ranked = measured.get("draft_vocab_order") == "frequency"
    head = (f", draft head over the {size} token ids most frequent in its training text" if ranked
            else f", draft head over the first {size} token ids") if size else ""
    return ((f" at most, stopped after a token the draft gives p < {threshold:g}" if threshold else "")
            + (f", {measured['draft_weights']} draft weights" if measured.get("draft_weights") else "") + head)


def metrics_table(before: dict, after: dict) -> str:
    rows = [f"{'metric':<22}{'before':>10}{'after':>10}"]
    for key in METRICS:
        if key in before or key in after:
            rows.append(f"{key:<22}{before.get(key, float('nan')):>10.4f}{after.get(key, float('nan')):>10.4f}")
    return "\n".join(rows)


def train(cfg: DictConfig) -> dict:
    """Check everything, find what to resume, then train in the run folder under its lock (one live run a folder;
    DDP's other ranks share rank 0's)."""
    quiet_known_warnings()
    check_config(cfg)
    check_inputs(cfg, [store for store, *_ in generated_stores(cfg)])
    setup_cpu(cfg.threads, cfg.get("keep_freed_memory", True))
    L.seed_everything(cfg.seed, workers=True)
    output_dir = Path(cfg.paths.output_dir).resolve()
    resume, run_dir = find_resume(cfg.ckpt_path, output_dir, output_dir.parent)
    if run_dir != output_dir:  # ckpt_path=last: continue in the interrupted run's folder
        log.info("resuming %s: writing into %s", resume, run_dir)
        cfg.paths.output_dir = str(run_dir)
        output_dir = run_dir
    elif resume:
        log.info("resuming from %s", resume)
    with run_lock(output_dir, "paths.output_dir") if is_rank_zero() else contextlib.nullcontext():
        return train_in(cfg, output_dir, resume)


def run_meta(cfg: DictConfig, tokenizer, target, run_name: str, ranking, ranked_from) -> dict:
    """What every checkpoint and the export carry about the run: target, tokenizer, config, LoRA, draft vocabulary."""
    return {"target": cfg.model.target.name_or_path, "target_architectures": target.config.architectures,
            "run_name": run_name, "tokenizer_files": tokenizer_files(tokenizer),
            "generation_config": target.generation_config.to_dict() if target.generation_config else None,
            "config": OmegaConf.to_container(cfg, resolve=True),
            "lora": lora_settings(cfg.lora) if cfg.lora.enabled else None,
            # the export writes it as draft_vocab.json: decoding keeps the ids the draft was trained over
            "draft_vocab": {"size": int(cfg.model.draft.train_vocab), "from": ranked_from, "ranking": ranking,
                            "special_ids": sorted(int(i) for i in special_token_ids(tokenizer, target))}
            if ranking else None}


def build_module(cfg: DictConfig, tokenizer, target, draft, meta: dict, ranking) -> DistillModule:
    """The Lightning module; teacher=cache: the target only built the draft and named the cache, training runs
    without it."""
    return DistillModule(target if cfg.teacher == "live" else None, draft,
                         loss=LossSettings.from_config(cfg.loss, cfg.model.draft),
                         optim=OptimSettings.from_config(cfg.optim), meta=meta,
                         onpolicy=OmegaConf.to_container(cfg.onpolicy),
                         train_vocab=cfg.model.draft.get("train_vocab"), train_vocab_ranking=ranking,
                         special_ids=special_token_ids(tokenizer, target))


def build_trainer(cfg: DictConfig, output_dir: Path, resume: str | None, run_name: str, tags: list,
                  spec_eval) -> tuple:
    """(trainer, best-checkpoint callback, last-validation callback, loggers): checkpoints every
    checkpoint.every_n_steps and the best by checkpoint.monitor, atomic writes, progress, loggers."""
    ckpt_dir = output_dir / "checkpoints"
    monitor = cfg.checkpoint.monitor
    checkpoint = ModelCheckpoint(dirpath=ckpt_dir, filename="step{step}-" + monitor.split("/")[1] + "{" + monitor + ":.4f}",
                                 monitor=monitor, mode="max", save_top_k=1, save_last=True, auto_insert_metric_name=False,
                                 enable_version_counter=False)  # one last.ckpt, shared with PeriodicLastCheckpoint
    last_validation = LastFitValidation()
    periodic = PeriodicLastCheckpoint(ckpt_dir, cfg.checkpoint.every_n_steps, cfg.checkpoint.get("keep_steps"))
    callbacks = [checkpoint, periodic, last_validation, FlushLogsAtCheckpoints()]
    if spec_eval is not None:
        callbacks.append(spec_eval)
    bar = progress_bar(cfg.progress_bar)
    if bar is not None:
        callbacks.append(bar)
    logger_cfg = OmegaConf.to_container(cfg.logger, resolve=True)
    logger_cfg["tags"] = list(logger_cfg.get("tags") or []) + tags
    loggers = build_loggers(logger_cfg, output_dir, run_name, OmegaConf.to_container(cfg, resolve=True),
                            resumed=bool(resume), resume_step=checkpoint_step(resume))
    if loggers:  # Lightning refuses a learning-rate monitor without a logger (logger=none)
        callbacks.append(LearningRateMonitor(logging_interval="step"))
    trainer = L.Trainer(**trainer_kwargs(OmegaConf.to_container(cfg.trainer, resolve=True)), logger=loggers or False,
                        callbacks=callbacks, default_root_dir=str(output_dir),
                        plugins=[] if "deepspeed" in str(cfg.trainer.get("strategy")) else [AtomicCheckpointIO()],
                        enable_progress_bar=bar is not None and not isinstance(bar, StepLines))
    return trainer, checkpoint, last_validation, loggers


def fit_between_validations(trainer, module, datamodule, output_dir: Path, resume: str | None, last_validation,
                            spec_eval) -> tuple[dict, dict, Path]:
    """(before, after, last checkpoint): validation before training (kept for a resumed run), fit, validation of the
    final weights (fit's own last one where it validated them), and a last.ckpt of the final state."""
    before_file = output_dir / "before.json"
    before = load_before(before_file, resume)
    if before is None:
        before = {k: float(v) for k, v in trainer.validate(module, datamodule=datamodule, verbose=False)[0].items()}
        if trainer.is_global_zero:
            with atomic_file(before_file, "w") as f:  # a resumed run reuses it (load_before)
                json.dump(before, f, indent=2)
    trainer.fit(module, datamodule=datamodule, ckpt_path=resume)
    step = trainer.global_step
    if last_validation.step == step and (spec_eval is None or spec_eval.measured_at_step == step):
        # fit already validated the final weights: reuse its teacher-forced metrics; the reported speculative
        # figures come from the test prompts (fit measured tune ones)
        after = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
        if spec_eval is not None:
            after.update(spec_eval.report(module))
    else:
        after = {k: float(v) for k, v in trainer.validate(module, datamodule=datamodule, verbose=False)[0].items()}
    last = output_dir / "checkpoints" / "last.ckpt"
    trainer.save_checkpoint(last, weights_only=False)  # the final weights and full state, whatever the schedule was
    return before, after, last


def export_run(cfg: DictConfig, output_dir: Path, draft, checkpoint, last: Path, after: dict, spec_eval,
               summary: dict) -> None:
    """The export from the best checkpoint (or the final weights, where they validated better or export.checkpoint
    is last), with the end-of-training measurements when those describe the exported weights."""
    monitor = cfg.checkpoint.monitor
    final_wins = final_weights_win(monitor, checkpoint.best_model_score, after)
    if cfg.export.checkpoint == "best" and final_wins:
        log.info("export: the final weights (%s %.4f, validated after fit) beat the best checkpoint's %.4f",
                 monitor, after[monitor], float(checkpoint.best_model_score))
    from_last = cfg.export.checkpoint == "last" or not checkpoint.best_model_path or final_wins
    source = last if from_last else Path(checkpoint.best_model_path)
    # measurements describe the final weights: record them only when those are what we export
    evaluations = [{**spec_eval.last, "domain": "+".join(spec_eval_domains(cfg)), "device": summary["device"],
                    "source": "end of training (spec_eval)",
                    "provenance": provenance(str(cfg.model.target.name_or_path))}] if from_last and spec_eval and spec_eval.last else []
    summary["export"] = str(Path(cfg.export.dir).resolve())
    export_checkpoint(source, cfg.export.dir, overwrite=cfg.export.overwrite, dtype=cfg.export.dtype,
                      extra_info={"val": after if from_last else None, "evaluations": evaluations},
                      head=draft.get_output_embeddings().weight if is_feature_draft(draft) else None,  # the target's
                      protected=[output_dir])  # never the run folder itself


def log_summary(cfg: DictConfig, output_dir: Path, summary: dict, before: dict, after: dict, spec_eval,
                cache_seconds: float, teacher_cache) -> None:
    last = summary["last_checkpoint"]
    log.info("validation before/after training. Teacher-forced on held-out text: top1_agree (greedy acceptance "
             "proxy), expected_accept (sum_v min(p,q)), kl. Real speculative decoding on held-out prompts (greedy, "
             "gamma=%s%s): alpha, tau (+1 bonus token included), speedup vs target-only.\n%s",
             cfg.spec_eval.gamma, decoding_conditions(spec_eval.last if spec_eval else {}), metrics_table(before, after))
    log.info("checkpoint: %s", last)
    if "export" in summary:
        log.info("export:     %s  (%s)", summary["export"], "a feature draft: eval/speculate.py and serving engines "
                 "load it next to its target" if cfg.model.draft.kind in FEATURE_KINDS
                 else "load with AutoModelForCausalLM.from_pretrained")
        log.info("next:       python eval/speculate.py target=%s drafts=[%s] gamma=auto update_card=true  (alpha, "
                 "speedup on held-out prompts; fills the model card); every decoding policy side by side: %s",
                 cfg.model.target.name_or_path, summary["export"],
                 f"make bench-adaptive DRAFT={summary['export']}" if cfg.model.target.name_or_path
                 == "embedded:smollm2-135m-instruct" else "docs/decoder.md")
    cached = f", {cache_seconds:.0f} s of it finding or building the teacher cache" if teacher_cache else ""
    log.info("summary:    %s  (%.0f s%s, peak memory %.1f GB: this process's maximum resident set)",
             output_dir / "summary.json", summary["seconds"], cached, peak_rss_gb())


def train_in(cfg: DictConfig, output_dir: Path, resume: str | None) -> dict:
    """The run itself, in `output_dir` (resuming `resume` when given): models, data, fit, export, summary."""
    output_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    tokenizer, target, draft = build_models(cfg)
    if cfg.checkpoint.get("check_free_disk", True):  # before answers and teacher caches, which can take hours
        check_free_disk(output_dir, checkpoint_bytes(draft), weight_bytes(draft) if cfg.export.enabled else 0)
    answer_missing_prompts(cfg, tokenizer, target)
    # a data source to rank (train_vocab_from) is read before the teacher cache, which can take an hour: a bad one
    # fails in seconds; `data` ranks the packed training blocks, after
    ranks_data = cfg.model.draft.get("train_vocab_from") == "data"
    ranking, ranked_from = (None, None) if ranks_data else train_vocab_ranking(cfg, None, tokenizer, draft)
    data_cfg = OmegaConf.to_container(cfg.data, resolve=True)
    cache_started = time.time()
    teacher_cache = resolve_teacher_cache(cfg, data_cfg, tokenizer, target, getattr(draft, "aux_layers", None))
    cache_seconds = round(time.time() - cache_started, 1)  # building a feature cache happens here, once
    datamodule = DistillDataModule(tokenizer, **data_module_kwargs(cfg, data_cfg), teacher_cache=teacher_cache)
    run_name, tags = run_name_and_tags(cfg, draft)
    if ranks_data:
        ranking, ranked_from = train_vocab_ranking(cfg, datamodule, tokenizer, draft)
    module = build_module(cfg, tokenizer, target, draft, run_meta(cfg, tokenizer, target, run_name, ranking,
                                                                  ranked_from), ranking)
    spec_eval = build_spec_eval(cfg, tokenizer, target, ranking)
    if cfg.teacher == "cache":
        del target
    trainer, checkpoint, last_validation, loggers = build_trainer(cfg, output_dir, resume, run_name, tags, spec_eval)
    before, after, last = fit_between_validations(trainer, module, datamodule, output_dir, resume, last_validation,
                                                  spec_eval)
    summary = {"output_dir": str(output_dir), "last_checkpoint": str(last),
               "best_checkpoint": checkpoint.best_model_path or None, "steps": trainer.global_step,
               "before": before, "after": after, "seconds": round(time.time() - started, 1),
               "threads": torch.get_num_threads(), "device": str(module.device), "run_name": run_name,
               "peak_rss_gb": round(peak_rss_gb(), 2), "teacher_cache_s": cache_seconds if teacher_cache else None,
               "setup": {"domain": str(cfg.data.name), "loss": str(cfg.loss.name), "draft": str(cfg.model.draft.kind),
                         "draft_from": str(cfg.model.draft.get("name_or_path") or ""), "draft_layers": draft.config.num_hidden_layers, "lora": bool(cfg.lora.enabled),
                         "target": str(cfg.model.target.name_or_path), "max_steps": cfg.trainer.max_steps,
                         "train_blocks": len(datamodule.train_set), "block_size": int(cfg.data.block_size),
                         "train_sources": list(cfg.data.get("train_sources") or []) or None}}
    if not trainer.is_global_zero:  # DDP/FSDP: one process exports and writes the summary
        return summary
    if cfg.export.enabled:
        export_run(cfg, output_dir, draft, checkpoint, last, after, spec_eval, summary)
    (output_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    finish_wandb(loggers, summary)
    log_summary(cfg, output_dir, summary, before, after, spec_eval, cache_seconds, teacher_cache)
    return summary


@hydra.main(config_path="../conf", config_name="distill", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with usage_errors():  # a usage error found on the way: one line, exit 2
        train(cfg)


if __name__ == "__main__":
    main()
