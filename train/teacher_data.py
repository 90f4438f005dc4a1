"""Sequence-level distillation data: the target answers prompts drawn from a domain's corpora, in batches,
appending each batch to a JSONL store so an interrupted job resumes where it stopped. Entry point:
scripts/generate_data.py."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch
from omegaconf import DictConfig
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn

from data.checks import UsageError
from data.generated import append_records, check_store_settings, domain_prompts, done_prompts, drop_torn_tail
from data.progress import progress_bar
from data.prompts import chats_of
from decode.drafts.quantize import quantize_draft
from decode.kernels.fast_linear import fast_cpu_linears
from decode.kernels.runtime import setup_cpu
from decode.models.loading import load_frozen, load_tokenizer

log = logging.getLogger("draftsmith.generate")


@torch.inference_mode()
def answer_batch(target, tokenizer, prompts: list[str], cfg: DictConfig, draft=None) -> list[str]:
    """The target's answers to `prompts`: transformers' batched generate(), or with `draft` our batched speculative
    decoder (decode/core/batched.py: each answer is what the target writes alone, the draft only makes it faster)."""
    if draft is not None:
        return answer_batch_speculative(target, draft, tokenizer, prompts, cfg)
    chats = chats_of(tokenizer, prompts)
    batch = tokenizer(chats, return_tensors="pt", padding=True, add_special_tokens=False)
    # top_k=0 switches off transformers' default top-k of 50: samples follow the target's own distribution
    sampling = {"do_sample": True, "temperature": cfg.temperature, "top_p": cfg.top_p or 1.0, "top_k": 0} \
        if cfg.temperature > 0 else {"do_sample": False}
    out = target.generate(**batch, max_new_tokens=cfg.max_new_tokens, pad_token_id=tokenizer.pad_token_id, **sampling)
    return [tokenizer.decode(row[batch["input_ids"].shape[1]:], skip_special_tokens=True).strip() for row in out]


@torch.inference_mode()
def answer_batch_speculative(target, draft, tokenizer, prompts: list[str], cfg: DictConfig) -> list[str]:
    from decode.core.batched import generate_batch
    from decode.core.speculative import SamplingParams
    from decode.models.loading import eos_token_ids

    ids = [tokenizer(c, add_special_tokens=False)["input_ids"] for c in chats_of(tokenizer, prompts)]
    params = SamplingParams(float(cfg.temperature), None, cfg.top_p)
    out = generate_batch(target, draft, ids, int(cfg.speculative.gamma), int(cfg.max_new_tokens), params,
                         eos_token_ids(tokenizer, target), pad_id=tokenizer.pad_token_id or 0)
    return [tokenizer.decode(t, skip_special_tokens=True).strip() for t in out.tokens]


def store_settings(cfg: DictConfig) -> dict:
    """What makes two answers to one prompt differ in kind (recorded next to the store)."""
    return {"temperature": float(cfg.temperature), "top_p": cfg.get("top_p"), "max_new_tokens": int(cfg.max_new_tokens)}


def missing_prompts(prompts_from: str, n_prompts: int, seed: int, store: Path) -> list[str]:
    """The domain's first n_prompts prompts that the store does not answer yet."""
    done = done_prompts(store)
    return [p for p in domain_prompts(prompts_from, n_prompts, seed) if p not in done]


def generate_store(cfg: DictConfig, target=None, tokenizer=None, stats: dict | None = None) -> Path:
    """Answer the domain's prompts not yet in the store; returns the store's path. Pass an already loaded
    target and tokenizer to reuse them (train/distill.py does), or they are loaded from cfg.target; `stats`, when
    given, gets what this call answered (answers, answer_tokens, seconds: model loading left out)."""
    setup_cpu(cfg.threads, cfg.get("keep_freed_memory", True))
    if cfg.batch_size < 1 or cfg.n_prompts < 1 or cfg.max_new_tokens < 1 or cfg.temperature < 0:
        raise UsageError("batch_size, n_prompts, max_new_tokens must be >= 1 and temperature >= 0.")
    torch.manual_seed(cfg.seed)
    out = Path(cfg.out)
    drop_torn_tail(out)  # a kill mid-write: the cut line goes, its prompt is answered again
    todo = missing_prompts(cfg.prompts_from, cfg.n_prompts, cfg.seed, out)
    check_store_settings(out, store_settings(cfg), adding=bool(todo))
    print(f"{cfg.prompts_from}: {len(todo)} of the first {cfg.n_prompts} prompts still to answer in {out}")
    if not todo:
        return out
    tokenizer = tokenizer or load_tokenizer(cfg.target, cache_dir=cfg.cache_dir)
    if cfg.get("engine", "generate") == "vllm":
        done = answer_with_vllm(tokenizer, todo, cfg, out)
    else:
        done = answer_in_process(target, tokenizer, todo, cfg, out)
    if stats is not None:
        stats.update(done)
    return out


def answer_with_vllm(tokenizer, todo: list[str], cfg: DictConfig, out: Path) -> dict:
    """engine=vllm: a vLLM server answers (train/vllm_answers.py); the server's start is not counted in the rate."""
    from train.vllm_answers import answered_in_flight, vllm_server

    print(f"starting vllm serve for {cfg.target} (its log: {out}.vllm.log; a first start compiles, minutes)")
    with vllm_server(cfg, out) as server:
        return _answer_all(tokenizer, todo, cfg, out, lambda chunks: answered_in_flight(
            server, tokenizer, chunks, cfg, int(cfg.vllm.in_flight)))


def answer_in_process(target, tokenizer, todo: list[str], cfg: DictConfig, out: Path) -> dict:
    """engine=generate (transformers' batched generate) or speculative (our batched speculative decoder)."""
    target = target or load_frozen(cfg.target, dtype=cfg.dtype, cache_dir=cfg.cache_dir)
    draft = None
    if cfg.get("engine", "generate") == "speculative":
        draft = load_frozen(cfg.speculative.draft, dtype=cfg.dtype, cache_dir=cfg.cache_dir)
        if draft.get_output_embeddings().weight.shape[0] != target.get_output_embeddings().weight.shape[0]:
            raise UsageError(f"speculative.draft={cfg.speculative.draft} does not share the target's vocabulary. "
                             "Fix: a draft of the target's family (the same tokenizer), or engine=generate.")
        if cfg.speculative.get("draft_quant", "none") != "none":
            draft, _ = quantize_draft(draft, cfg.speculative.draft_quant, copy=False)
    padding_side, tokenizer.padding_side = tokenizer.padding_side, "left"  # prompts end where answers start
    models = [target] + ([draft] if draft is not None else [])
    # one step's rows: a batch of new tokens, or of the gamma+1 tokens a speculative step verifies
    rows = cfg.batch_size * (int(cfg.speculative.gamma) + 1 if draft is not None else 1)
    try:
        with fast_cpu_linears(models, rows, cfg.get("cpu_matmul", "torch")):
            return _answer_all(tokenizer, todo, cfg, out, lambda chunks: (
                (chunk, answer_batch(target, tokenizer, chunk, cfg, draft)) for chunk in chunks))
    finally:
        tokenizer.padding_side = padding_side


def _answer_all(tokenizer, todo: list[str], cfg: DictConfig, out: Path, answered) -> dict:
    """Every prompt of `todo` in batches of batch_size through `answered(batches)`, which yields (batch, answers) in
    order; each batch is appended to the store as it comes, with a progress bar."""
    started, answered_tokens = time.time(), 0
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
               TimeRemainingColumn()]
    with progress_bar(*columns) as progress:
        task = progress.add_task("generating answers", total=len(todo), rate="")
        chunks = [todo[start:start + cfg.batch_size] for start in range(0, len(todo), cfg.batch_size)]
        for chunk, answers in answered(chunks):
            append_records(out, [(p, a) for p, a in zip(chunk, answers) if a])
            answered_tokens += sum(len(tokenizer(a)["input_ids"]) for a in answers)
            progress.update(task, advance=len(chunk),
                            rate=f"{answered_tokens / (time.time() - started):.0f} answer tok/s")
    seconds = time.time() - started
    print(f"wrote {out} ({len(done_prompts(out))} records, {answered_tokens} new answer tokens in {seconds:.0f} s: "
          f"{len(todo) / seconds * 3600:.0f} answers/hour, {answered_tokens / seconds:.1f} answer tokens/s, engine "
          f"{cfg.get('engine', 'generate')})")
    return {"answers": len(todo), "answer_tokens": answered_tokens, "seconds": seconds}
