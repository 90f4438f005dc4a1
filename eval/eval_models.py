"""What one eval/speculate.py run decodes with: the tokenizer, the target and the drafts (each head cut to
draft_vocab ids, weights quantized as asked; float copies for transformers' assisted generation), the pass sizes the
run needs, and the conditions its results.json records."""

from __future__ import annotations

import logging
import platform
from dataclasses import dataclass

import torch
from omegaconf import DictConfig, OmegaConf

from data.token_ranking import head_ranking, rank_source, saved_ranking
from decode.drafts.draft_vocab import restrict_vocab
from decode.drafts.kinds import feature_kind_of
from decode.drafts.quantize import quantize_draft
from decode.models.loading import (eos_token_ids, load_drafts, load_frozen, load_tokenizer, model_vocab_size, resolve,
                                   special_token_ids)
from eval.arms import tree_rows
from eval.checks import ROUTER, check_prompt_lengths
from eval.shared.provenance import provenance

log = logging.getLogger("draftsmith.eval")


@dataclass
class Models:
    """What one evaluation decodes with: the target, the drafts (cut and quantized for our decoder) and the float
    copies transformers' assisted generation gets, with the gammas and pass sizes the run needs."""
    tokenizer: object
    target: object
    drafts: dict
    hf_drafts: dict
    eos: set
    gammas: list
    max_gamma: int       # the cost model's span (and compiled pass shapes)
    rows: int            # the most tokens beyond the pending one in a target pass
    quant: dict
    vocab: dict


def gpu_name(device: torch.device) -> str | None:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


def draft_vocab_ranking(source, tokenizer, vocab_size: int) -> list[int] | None:
    """draft_vocab_from: the token ids of a data source, most frequent first, for the cut draft head to keep
    (data/token_ranking.py)."""
    ranked = rank_source(source, tokenizer, vocab_size)
    if ranked is not None:
        log.info("draft_vocab_from: %d distinct ids of %s ranked by frequency", len(ranked), source)
    return ranked


def batched(cfg: DictConfig) -> bool:
    return any(int(b) != 1 for b in cfg.get("batch_size") or [1])


def pass_sizes(cfg: DictConfig, gammas: list) -> tuple[int, int]:
    """(max_gamma, rows): the cost model's span (gamma = 1..max_auto_gamma, so its verdict can name a gamma not
    asked for; compiled, every pass shape compiles first, so only the gammas asked for) and the most tokens beyond
    the pending one in a target pass (trees: nodes; batched: every sequence's)."""
    asked = [g for g in gammas if g != "auto"] + ([cfg.max_auto_gamma] if "auto" in gammas else [])
    max_gamma = max(asked) if cfg.compile else max(asked + [cfg.max_auto_gamma])
    if ROUTER in cfg.proposers:
        max_gamma = max(max_gamma, int(cfg.router.max_gamma))
    if "predicted" in cfg.proposers:
        max_gamma = max(max_gamma, int(cfg.max_auto_gamma))
    rows = max(max_gamma, tree_rows(cfg))
    if batched(cfg):
        rows = max(int(b) for b in cfg.batch_size) * (max(asked) + 1) - 1
    return max_gamma, rows


def load_models(cfg: DictConfig) -> Models:
    """The tokenizer, target and drafts (each draft's head cut to draft_vocab ids, weights quantized as asked), after
    the prompts are checked to fit (before the weights load)."""
    tokenizer = load_tokenizer(cfg.target, cache_dir=cfg.cache_dir)
    gammas = [cfg.gamma] if isinstance(cfg.gamma, (int, str)) else list(cfg.gamma)
    drafted = max([g for g in gammas if g != "auto"] + [int(cfg.max_auto_gamma), int(cfg.router.max_gamma),
                                                         tree_rows(cfg)]) + 1
    check_prompt_lengths(cfg, tokenizer, resolve(cfg.target, cfg.cache_dir), drafted)
    target = load_frozen(cfg.target, dtype=cfg.dtype, cache_dir=cfg.cache_dir, device=cfg.device)
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
    max_gamma, rows = pass_sizes(cfg, gammas)
    return Models(tokenizer, target, drafts, hf_drafts, eos_token_ids(tokenizer, target), gammas, max_gamma, rows,
                  quant, vocab)


def run_conditions(cfg: DictConfig, m: Models) -> dict:
    """What results.json says the run was measured under (costs filled in as they are measured)."""
    from_source = cfg.get("draft_vocab_from")
    return {"target": str(cfg.target), "threads": torch.get_num_threads(), "device": str(m.target.device),
            "dtype": cfg.dtype, "draft_dtype": cfg.draft_dtype or cfg.dtype, "max_new_tokens": cfg.max_new_tokens,
            "repeats": cfg.repeats, "torch": torch.__version__,
            "transformers": __import__("transformers").__version__,
            "cpu": platform.processor() or platform.machine(), "gpu": gpu_name(m.target.device),
            "top_k": cfg.top_k, "top_p": cfg.top_p, "draft_quant": m.quant, "draft_vocab": m.vocab,
            "draft_vocab_from": OmegaConf.to_container(from_source) if isinstance(from_source, DictConfig)
            else from_source, "costs": {}, "provenance": provenance(str(cfg.target), [str(d) for d in cfg.drafts])}

