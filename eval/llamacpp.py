"""llama.cpp as a measured serving engine: llama-server started as a real process, prompts sent over its HTTP API.
Its GGUF files and its build's location are eval/shared/gguf.py's.

`make setup-llamacpp` builds the binaries into the cache. A `LlamaServer` starts llama-server on a free local port
with a target GGUF, and optionally a draft GGUF (`--spec-type draft-simple`, llama.cpp's draft-model speculation);
waits for its health check; keeps its log; and is stopped on exit and on error. `completion` sends one prompt as
token ids (so every engine decodes the same tokens, chat template included) and returns the generated ids with the
server's own timings: prompt and generation time, drafted and accepted tokens.

    with LlamaServer(target_gguf, draft_gguf=draft, draft_max=4, log=out / "server.log") as server:
        result = server.completion(prompt_ids, n_predict=128)   # .tokens, .prefill_s, .decode_s, .drafted, .accepted
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from eval.shared.gguf import gguf_of, llamacpp_bin, llamacpp_dir, spec_type_of
from eval.shared.server_process import ServerProcess, free_port


@dataclass
class Completion:
    tokens: list[int]
    prefill_s: float     # the server's prompt time
    decode_s: float      # the server's generation time
    drafted: int = 0     # tokens the draft proposed (speculative servers)
    accepted: int = 0    # of those, accepted by the target
    steps: list = field(default_factory=list)  # no per-step logs from the server
    target_passes: int | None = None
    top: list = field(default_factory=list)  # with n_probs: per token, the n most likely (id, log-probability)


class LlamaServer(ServerProcess):
    """One llama-server process (a context manager): started on a free port, health-checked, stopped on exit."""

    name = "llama-server"

    def __init__(self, model: Path, draft_gguf: Path | None = None, draft_max: int = 4, draft_min: int = 0,
                 p_min: float = 0.0, spec_type: str | None = None, threads: int | None = None, ctx: int = 4096,
                 log: Path | None = None, extra: list[str] | None = None, cache_dir=None, start_timeout: float = 300):
        self.port = free_port()
        self.log = Path(log) if log else None
        args = [str(llamacpp_bin("llama-server", cache_dir)), "-m", str(model), "--host", "127.0.0.1",
                "--port", str(self.port), "-c", str(ctx), "-np", "1", "-t", str(threads or os.cpu_count()),
                "--no-webui"]
        if draft_gguf is not None:  # a fixed chain of draft_max tokens (p_min 0: no confidence stop), as ours
            args += ["-md", str(draft_gguf), "--spec-type", spec_type or "draft-simple", "--spec-draft-n-max",
                     str(draft_max), "--spec-draft-n-min", str(draft_min), "--spec-draft-p-min", str(p_min),
                     "-td", str(threads or os.cpu_count())]
        elif spec_type is not None:  # drafting without a draft model (n-grams of the context), llama.cpp's defaults
            args += ["--spec-type", spec_type]
        if (llamacpp_dir(cache_dir) / "no-repack").is_file():  # make setup-llamacpp found repacking crashes here
            args.append("--no-repack")
        self.args = args + list(extra or [])
        self.start_timeout = start_timeout

    def popen(self, out) -> subprocess.Popen:
        return subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, ConnectionError, OSError):
            return False

    def completion(self, prompt: list[int], n_predict: int, temperature: float = 0.0, seed: int = 0,
                   timeout: float = 600, n_probs: int = 0) -> Completion:
        """Generate up to `n_predict` tokens after `prompt` (token ids); greedy at temperature 0. The prompt cache
        is off, so every call pays its prompt as a new request does. `n_probs`: also the n most likely tokens at
        each generated position, from the model's own logits (before sampling)."""
        body = {"prompt": list(prompt), "n_predict": n_predict, "temperature": temperature, "seed": seed,
                "cache_prompt": False, "return_tokens": True, "stream": False}
        if n_probs:
            body["n_probs"] = n_probs
        if temperature == 0:
            body["top_k"] = 1
        else:  # the target's own distribution: no top-k / top-p / min-p cut
            body.update({"top_k": 0, "top_p": 1.0, "min_p": 0.0})
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/completion", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as r:
            reply = json.loads(r.read())
        t = reply.get("timings", {})
        return Completion(tokens=list(reply.get("tokens") or []), prefill_s=t.get("prompt_ms", 0.0) / 1e3,
                          decode_s=t.get("predicted_ms", 0.0) / 1e3, drafted=int(t.get("draft_n", 0) or 0),
                          accepted=int(t.get("draft_n_accepted", 0) or 0),
                          top=[[(int(x["id"]), float(x["logprob"])) for x in step.get("top_logprobs", [])]
                               for step in reply.get("completion_probabilities") or []])


# --- the engine interface (eval/engines.py) -----------------------------------------------------------------------

class LlamaCppEngine:
    """llama.cpp behind eval/engines.py: llamacpp=[plain, speculative, ngram] in conf/speculate.yaml."""

    name, key = "llama.cpp", "llamacpp"

    def settings(self, cfg) -> list:
        from decode.drafts.kinds import serving_kind_of
        from eval.engines import Setting, fixed_gammas

        out = [Setting(self.name, "plain")]
        if "speculative" in cfg.llamacpp:
            out += [Setting(self.name, "draft", str(d), g) for d in cfg.drafts
                    if serving_kind_of(d).llamacpp_spec for g in fixed_gammas(cfg)]
        if "ngram" in cfg.llamacpp:
            out.append(Setting(self.name, "ngram"))
        return out

    def start(self, setting, cfg, stack, log: Path):
        target = gguf_of(cfg.llamacpp_target or str(cfg.target), cfg.llamacpp_gguf, cfg.cache_dir)
        spec_type = {"plain": None, "ngram": "ngram-simple"}.get(setting.method) or spec_type_of(setting.draft)
        draft = gguf_of(setting.draft, cfg.llamacpp_gguf, cfg.cache_dir) if setting.method == "draft" else None
        server = stack.enter_context(LlamaServer(target, draft_gguf=draft, draft_max=setting.gamma or 4,
                                                 spec_type=spec_type, threads=cfg.threads, log=log,
                                                 cache_dir=cfg.cache_dir))

        def run(prompt, max_new_tokens, params, eos, generator):
            return server.completion(prompt, max_new_tokens, params.temperature if params else 0.0,
                                     seed=int(generator.initial_seed()))
        return run

    def describe(self, cfg) -> str:
        build = llamacpp_dir(cfg.cache_dir) / "BUILD.txt"
        return build.read_text().strip() if build.is_file() else "llama.cpp"


ENGINE = LlamaCppEngine()
