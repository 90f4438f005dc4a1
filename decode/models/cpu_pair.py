"""For benchmark scripts (bench/*/*/*.py): the embedded target and a draft set up as the decoders run them on CPU
(glibc allocator set up, draft head cut to the first 8192 ids plus the special ones, int8 draft weights)."""

from __future__ import annotations

from decode.drafts.draft_vocab import restrict_vocab
from decode.models.loading import load_drafts, load_frozen, load_tokenizer, special_token_ids
from decode.drafts.quantize import quantize_draft
from decode.kernels.runtime import setup_cpu

TARGET = "embedded:smollm2-135m-instruct"


def load_cpu_pair(draft_dir: str, target_name: str = TARGET) -> tuple:
    """(tokenizer, target, draft) for decoding on this CPU."""
    setup_cpu(None, True)
    tokenizer, target = load_tokenizer(target_name), load_frozen(target_name)
    draft = next(iter(load_drafts([draft_dir], tokenizer, target, target_name).values()))
    restrict_vocab(draft, "auto", special_token_ids(tokenizer, target))
    quantize_draft(draft, "int8")
    return tokenizer, target, draft
