"""Tokenize examples with the target's tokenizer and pack them into fixed-length blocks.

Each example becomes (ids, loss_mask). Text: every token counts. Chat: rendered with the tokenizer's chat
template; only the assistant's tokens count unless train_on_prompt. Packing concatenates examples and cuts
blocks of `block_size`; `labels` is input_ids with -100 where the loss mask is 0.
"""

from __future__ import annotations

from typing import Iterable


def encode_text(tokenizer, texts: list[str]) -> list[tuple[list[int], list[int]]]:
    encoded = tokenizer(texts, add_special_tokens=True, verbose=False)["input_ids"]
    out = []
    for ids in encoded:
        if tokenizer.eos_token_id is not None and (not ids or ids[-1] != tokenizer.eos_token_id):
            ids = ids + [tokenizer.eos_token_id]
        out.append((ids, [1] * len(ids)))
    return out


def encode_chat(tokenizer, messages: list[dict], train_on_prompt: bool = False) -> tuple[list[int], list[int]]:
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("chat-formatted data needs a tokenizer with a chat template; this target's tokenizer has "
                         "none. Fix: use format=text, or a target with a chat template.")
    full = tokenizer.apply_chat_template(messages, tokenize=False)
    prompt = tokenizer.apply_chat_template(messages[:-1], tokenize=False, add_generation_prompt=True)
    ids = tokenizer(full, add_special_tokens=False, verbose=False)["input_ids"]
    n_prompt = len(tokenizer(prompt, add_special_tokens=False, verbose=False)["input_ids"])
    mask = [1] * len(ids) if train_on_prompt else [0] * n_prompt + [1] * (len(ids) - n_prompt)
    return ids, mask


def encode(tokenizer, examples: list, train_on_prompt: bool = False) -> list[tuple[list[int], list[int]]]:
    texts = [e for e in examples if isinstance(e, str)]
    out = encode_text(tokenizer, texts) if texts else []
    out += [encode_chat(tokenizer, e, train_on_prompt) for e in examples if not isinstance(e, str)]
    return out


def pack(encoded: Iterable[tuple[list[int], list[int]]], block_size: int,
         doc_sources: list[int] | None = None) -> dict[str, list[list[int]]]:
    """Concatenate (ids, mask) pairs and cut full blocks; the incomplete tail is dropped. With `doc_sources` (the
    source index of each pair), also "source": the source of each block's first token."""
    if block_size < 2:
        raise ValueError(f"data.block_size must be >= 2, got {block_size}.")
    ids_buf: list[int] = []
    mask_buf: list[int] = []
    src_buf: list[int] = []
    blocks: dict[str, list] = {"input_ids": [], "labels": []}
    if doc_sources is not None:
        blocks["source"] = []
    for d, (ids, mask) in enumerate(encoded):
        ids_buf.extend(ids)
        mask_buf.extend(mask)
        if doc_sources is not None:
            src_buf.extend([doc_sources[d]] * len(ids))
        while len(ids_buf) >= block_size:
            block, bmask = ids_buf[:block_size], mask_buf[:block_size]
            source = src_buf[0] if src_buf else None
            del ids_buf[:block_size], mask_buf[:block_size], src_buf[:block_size]
            if any(bmask[1:]):  # a block with nothing to predict teaches nothing
                blocks["input_ids"].append(block)
                blocks["labels"].append([t if m else -100 for t, m in zip(block, bmask)])
                if doc_sources is not None:
                    blocks["source"].append(source)
    return blocks
