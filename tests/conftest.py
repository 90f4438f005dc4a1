"""Shared fixtures: a tiny byte-level BPE tokenizer with a chat template and tiny random Llama models,
all built in-process (no network, no downloads)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
# Under pytest-xdist (`make test` runs one worker per core) each worker gets one thread: several workers with several
# threads each on few cores spin-wait on each other.
torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else min(2, torch.get_num_threads()))

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TEXT = ("The patient presented with fever and a persistent cough. Hypertension is a chronic condition. "
        "def add(a, b):\n    return a + b\n# Python functions return values. "
        "Speculative decoding drafts tokens cheaply and verifies them with the target model. ") * 20


def make_tokenizer(vocab_size: int = 320, corpus: str = TEXT):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([corpus], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", unk_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def make_model(vocab_size: int, layers: int = 2, hidden: int = 32, seed: int = 0, tie: bool = True, init: float = 0.02):
    """A tiny random Llama; a larger `init` gives peaked, more informative next-token distributions."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, tie_word_embeddings=tie, bos_token_id=1, eos_token_id=2,
                         pad_token_id=0, initializer_range=init)
    return LlamaForCausalLM(config).eval()


def first_token_tv(q: torch.Tensor, p: torch.Tensor, draws: int, seed: int = 1) -> float:
    """Total variation between the target's law p[0] and the law of the first token `accept_reject` emits (the
    first draft if kept, else the correction), over `draws` chains drafted from q (gamma, V)."""
    from decode.core.sampling import accept_reject

    counts = torch.zeros(p.shape[-1])
    sampler = torch.Generator().manual_seed(seed)
    for _ in range(draws):
        drafted = torch.multinomial(q, 1, generator=sampler).squeeze(1)
        n, nxt = accept_reject(drafted, q, p, sampler)
        counts[drafted[0] if n >= 1 else nxt] += 1
    return 0.5 * (counts / draws - p[0]).abs().sum().item()


def first_two_tokens(target, proposer, prompt: list[int], gamma: int, params, vocab: int, draws: int,
                     new_tokens: int = 4, seed: int = 0):
    """Decode `prompt` `draws` times (`new_tokens` each, one sampler): counts (vocab, vocab) of the first two emitted
    tokens, and the drafted length of every decoding's first step. One torch thread: tiny tensors."""
    from decode.core.speculative import generate

    counts, first_drafted = torch.zeros(vocab, vocab), []
    sampler = torch.Generator().manual_seed(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(draws):
            gen = generate(target, proposer, prompt, gamma, new_tokens, params, generator=sampler)
            counts[gen.tokens[0], gen.tokens[1]] += 1
            first_drafted.append(gen.steps[0].drafted)
    finally:
        torch.set_num_threads(threads)
    return counts, first_drafted


@pytest.fixture(scope="session")
def tokenizer():
    return make_tokenizer()


@pytest.fixture(scope="session")
def tiny_target_dir(tmp_path_factory, tokenizer):
    """A tiny random target saved as a normal local HF folder (model/target=local)."""
    path = tmp_path_factory.mktemp("tiny-target")
    model = make_model(len(tokenizer), layers=3, seed=1, init=0.3)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_draft_dir(tmp_path_factory, tokenizer):
    """A tiny random one-layer draft for the tiny target, saved like an export."""
    path = tmp_path_factory.mktemp("tiny-draft")
    make_model(len(tokenizer), layers=1, seed=7, init=0.3).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "corpus.jsonl"
    import json

    lines = [json.dumps({"text": f"Document {i}. " + TEXT[i * 7: i * 7 + 600]}) for i in range(60)]
    path.write_text("\n".join(lines) + "\n")
    return path
