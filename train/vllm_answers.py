"""The data engine `engine=vllm` of scripts/generate_data.py: the target's answers from a real `vllm serve`
(eval/shared/vllm_server.py), one request per batch of prompts, which vLLM decodes together (continuous batching, up to
`batch_size` sequences at once). Prompts go as token ids made with the target's chat template, and the tokens that
come back are decoded with the same tokenizer as the other engines, so a store written by any engine has the same
format and can be continued by another."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from eval.shared.vllm_server import VllmServer


def vllm_server(cfg: DictConfig, out: Path) -> VllmServer:
    """A plain vLLM server for the target (its log beside the store), sized for `batch_size` answers at once."""
    from decode.models.loading import resolve

    v = cfg.vllm
    return VllmServer(resolve(cfg.target, cfg.cache_dir), max_model_len=int(v.max_model_len),
                      log=out.with_name(out.name + ".vllm.log"), cache_dir=cfg.cache_dir, seed=int(cfg.seed),
                      max_num_seqs=int(cfg.batch_size), kv_cache_gb=float(v.kv_cache_gb),
                      extra=v.get("serve_args"))


def answer_batch_vllm(server: VllmServer, tokenizer, chats: list[str], cfg: DictConfig, batch_index: int) -> list[str]:
    """The answers to one batch of chat-templated prompts, decoded and stripped as transformers' engine does."""
    ids = [tokenizer(c, add_special_tokens=False)["input_ids"] for c in chats]
    tokens = server.complete_batch(ids, int(cfg.max_new_tokens), float(cfg.temperature), cfg.get("top_p"),
                                   seed=int(cfg.seed) + batch_index)
    return [tokenizer.decode(t, skip_special_tokens=True).strip() for t in tokens]


def answered_in_flight(server: VllmServer, tokenizer, batches: list[list[str]], cfg: DictConfig, in_flight: int):
    """Yield (batch, answers) in order, with up to `in_flight` batches sent ahead: vLLM starts the next batch's
    prompts as the current one's answers end, so the server never idles on a batch's last long answer (each batch
    is still stored as soon as it and those before it are answered)."""
    from concurrent.futures import ThreadPoolExecutor

    from data.prompts import chats_of

    with ThreadPoolExecutor(max_workers=max(1, in_flight)) as pool:
        pending = []
        for i, batch in enumerate(batches):
            pending.append((batch, pool.submit(answer_batch_vllm, server, tokenizer, chats_of(tokenizer, batch), cfg,
                                               i)))
            if len(pending) >= in_flight:
                done, future = pending.pop(0)
                yield done, future.result()
        for done, future in pending:
            yield done, future.result()
