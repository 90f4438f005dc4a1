"""`vllm serve` started as a real process, prompts sent over its OpenAI API: what the vLLM engine (eval/vllm.py)
and the vLLM data engine (train/vllm_answers.py) both run.

`make setup-vllm` installs vLLM's CPU build into an environment of its own in the cache (it needs another
transformers than .venv); on a GPU machine `VLLM_PYTHON=<its python>` points at a plain `pip install vllm`, the same
code path. A `VllmServer` starts `vllm serve` (through scripts/vllm_serve.py) on a free local port, plain or with a
`speculative_config` built for the draft's kind; waits for its health check; keeps its log; and is stopped on exit,
on error and when the process that started it dies. `completion` sends one prompt as token ids (every engine decodes
the same tokens, chat template included) and returns the text, the tokens generated, the wall time and the drafted /
accepted / rejected counts from vLLM's own spec-decode counters (its /metrics).

    with VllmServer(target, speculative_config("draft", export, 3), log=out / "vllm.log") as server:
        result = server.completion(prompt_ids, max_tokens=128)   # .text, .n_tokens, .seconds, .drafted, .accepted
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from data.checks import UsageError
from decode.drafts.kinds import VLLM_REFUSES, serving_kind_of
from eval.shared.server_process import ServerProcess, free_port

VERSION = "0.32.0"  # requirements-vllm.txt
# the CPU build's settings that matter on a small machine: every core for the engine (by default one is kept for the
# front end), and the KV cache's size in GB
CPU_ENV = {"VLLM_CPU_OMP_THREADS_BIND": f"0-{max(0, (os.cpu_count() or 1) - 1)}", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
           "VLLM_CPU_KVCACHE_SPACE": "1"}


def vllm_dir(cache_dir=None) -> Path:
    base = Path(cache_dir or os.environ.get("DRAFTSMITH_CACHE", Path.home() / ".cache" / "draftsmith"))
    return base / "vllm" / VERSION


LAUNCHER = Path(__file__).resolve().parents[2] / "scripts" / "vllm_serve.py"  # `vllm serve` for the CPU build too


def vllm_bin(cache_dir=None) -> Path:
    """The Python of vLLM's environment: VLLM_PYTHON if set (an install of your own, e.g. `pip install vllm` on a
    GPU machine), else the one `make setup-vllm` installed."""
    if os.environ.get("VLLM_PYTHON"):
        return Path(os.environ["VLLM_PYTHON"])
    path = vllm_dir(cache_dir) / "venv" / "bin" / "python"
    if not (path.is_file() and (vllm_dir(cache_dir) / "INSTALL.txt").is_file()):
        raise FileNotFoundError(f"vLLM is not installed ({path}). Fix: make setup-vllm (a few minutes, once), or "
                                "VLLM_PYTHON=<the python of an environment with vllm>.")
    return path


def preload(python: Path) -> str:
    """LD_PRELOAD for `vllm serve`: Intel's OpenMP from vLLM's environment when it has one, as vLLM's CPU guide asks
    (without it vLLM warns that speculative decoding loses much of its speed); the caller's own LD_PRELOAD wins."""
    if os.environ.get("LD_PRELOAD") is not None:
        return os.environ["LD_PRELOAD"]
    lib = Path(python).parent.parent / "lib" / "libiomp5.so"
    return str(lib) if lib.is_file() else ""


def draft_kind(folder) -> str:
    """What draftsmith.json says the export is: a feature-draft kind, or standalone (a causal LM folder)."""
    return serving_kind_of(folder).name


def speculative_config(method: str, draft=None, tokens: int = 3, lookup=(2, 4)) -> dict | None:
    """vLLM's --speculative-config for a method: plain (None), ngram (prompt lookup of `lookup` n-gram sizes), or
    a draft served the way its kind needs (decode/drafts/kinds.py `vllm_method`: draft_model for standalone ones)."""
    if method == "plain":
        return None
    if method == "ngram":
        return {"method": "ngram", "num_speculative_tokens": tokens, "prompt_lookup_min": lookup[0],
                "prompt_lookup_max": lookup[1]}
    return {"method": vllm_method_of(draft), "model": str(draft), "num_speculative_tokens": tokens}


def vllm_method_of(draft) -> str:
    """vLLM's speculative method for the draft in `draft` (its kind's); a kind vLLM serves no form of: a usage error
    saying why (config checks call this before anything loads)."""
    kind = serving_kind_of(draft)
    if kind.vllm_method is None:
        raise UsageError(f"{draft} is a {kind.name} draft, which vLLM does not serve: {VLLM_REFUSES[kind.name]}. Fix: "
                         "measure it with eval/speculate.py (our decoder), or train an EAGLE-3 draft (model/draft=eagle3).")
    return kind.vllm_method


@dataclass
class Completion:
    text: str
    n_tokens: int       # tokens generated (the API's usage.completion_tokens)
    seconds: float      # the request's wall time, prompt included
    drafted: int = 0    # tokens the draft proposed (vLLM's spec-decode counters, this request's share)
    accepted: int = 0   # of those, accepted by the target
    rejected: int = 0   # draft steps that stopped at a rejected token: steps less those whose last position was
                        # accepted (vLLM's per-position counters), so α = accepted / (accepted + rejected)
    tokens: list = field(default_factory=list)  # the generated token ids
    steps: list = field(default_factory=list)   # no per-step logs from the server

    @property
    def prefill_s(self) -> float:  # the API reports no split: the request's whole wall time is counted as decoding
        return 0.0

    @property
    def decode_s(self) -> float:
        return self.seconds


def own_session_ended_with_parent() -> None:
    """In the server's child before it runs: a session of its own (its engine processes are stopped with it), and
    SIGTERM when the process that started it dies, however it dies (Linux's PR_SET_PDEATHSIG), so a killed
    benchmark leaves no server behind."""
    import ctypes
    import signal

    os.setsid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class VllmServer(ServerProcess):
    """One `vllm serve` process (a context manager): started on a free port, health-checked, stopped on exit."""

    name, stop_timeout = "vllm serve", 30.0
    wait_options = {"poll_s": 1, "every_s": 60, "waiting": "it compiles its graphs on a first start"}

    def __init__(self, model, spec: dict | None = None, max_model_len: int = 4096, log: Path | None = None,
                 extra: list[str] | None = None, cache_dir=None, start_timeout: float = 900, seed: int = 0,
                 max_num_seqs: int = 1, kv_cache_gb: float | None = None):
        self.port = free_port()
        self.log = Path(log) if log else None
        python = vllm_bin(cache_dir)
        args = [str(python), str(LAUNCHER), "serve", str(model), "--host", "127.0.0.1",
                "--port", str(self.port),
                "--max-model-len", str(max_model_len), "--seed", str(seed), "--max-num-seqs", str(max_num_seqs),
                "--dtype", "float32", "--generation-config", "vllm"]  # no sampling defaults from the folder
        if spec is not None:
            args += ["--speculative-config", json.dumps(spec)]
        self.args = args + [str(a) for a in extra or []]  # a Hydra list of flags as well
        cpu_env = {**CPU_ENV, **({"VLLM_CPU_KVCACHE_SPACE": f"{kv_cache_gb:g}"} if kv_cache_gb else {})}
        self.env = {**os.environ, **cpu_env, "VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "INFO"),
                    "LD_PRELOAD": preload(python)}
        self.start_timeout = start_timeout
        self.model = str(model)

    def popen(self, out) -> subprocess.Popen:
        return subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                preexec_fn=own_session_ended_with_parent)

    def healthy(self) -> bool:
        return self._get("/health") is not None

    def _get(self, path: str) -> str | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.read().decode() if r.status == 200 else None
        except (urllib.error.URLError, ConnectionError, OSError):
            return None

    def spec_counts(self) -> dict:
        """vLLM's spec-decode counters so far (its Prometheus /metrics): draft steps, drafted and accepted tokens,
        and accepted tokens by position in the draft (zeros without speculation)."""
        text = self._get("/metrics") or ""

        def values(name: str, label: str | None = None) -> dict:
            found = {}
            for labels, value in re.findall(rf"^vllm:{name}(?:_total)?(?:{{([^}}]*)}})? ([0-9.e+-]+)$", text, re.M):
                key = re.search(rf'{label}="(\d+)"', labels).group(1) if label and labels else ""
                found[key] = found.get(key, 0) + int(float(value))
            return found

        per_pos = values("spec_decode_num_accepted_tokens_per_pos", "position")
        return {"drafts": sum(values("spec_decode_num_drafts").values()),
                "drafted": sum(values("spec_decode_num_draft_tokens").values()),
                "accepted": sum(values("spec_decode_num_accepted_tokens").values()),
                "per_pos": [per_pos.get(str(i), 0) for i in range(len(per_pos))]}

    def _post(self, path: str, body: dict, timeout: float) -> dict:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return json.loads(r.read())

    def complete_batch(self, prompts: list[list[int]], max_tokens: int, temperature: float = 0.0,
                       top_p: float | None = None, seed: int = 0, timeout: float = 3600) -> list[list[int]]:
        """The tokens generated after each of several prompts (token ids each), in one request that vLLM batches
        up to --max-num-seqs at once; in prompt order, the end-of-sequence token included where one was generated.
        Greedy at temperature 0, else sampling from the target's distribution (top-p if given)."""
        body = {"model": self.model, "prompt": [list(p) for p in prompts], "max_tokens": max_tokens,
                "temperature": temperature, "seed": seed, "top_p": top_p or 1.0, "top_k": -1,
                "return_token_ids": True}
        choices = sorted(self._post("/v1/completions", body, timeout)["choices"], key=lambda c: c["index"])
        return [list(c["token_ids"]) for c in choices]

    def completion(self, prompt: list[int], max_tokens: int, temperature: float = 0.0, seed: int = 0,
                   timeout: float = 900) -> Completion:
        """Generate up to `max_tokens` after `prompt` (token ids, chat template applied); greedy at temperature 0,
        the target's own distribution otherwise (no top-k / top-p cut)."""
        body = {"model": self.model, "prompt": list(prompt), "max_tokens": max_tokens, "temperature": temperature,
                "seed": seed, "top_p": 1.0, "top_k": -1, "ignore_eos": False, "return_token_ids": True}
        before = self.spec_counts()
        started = time.perf_counter()
        reply = self._post("/v1/completions", body, timeout)
        seconds = time.perf_counter() - started
        after = self.spec_counts()
        drafts = after["drafts"] - before["drafts"]
        per_pos = [a - (before["per_pos"][i] if i < len(before["per_pos"]) else 0)
                   for i, a in enumerate(after["per_pos"])]
        return Completion(text=reply["choices"][0]["text"], n_tokens=int(reply["usage"]["completion_tokens"]),
                          seconds=seconds, drafted=after["drafted"] - before["drafted"],
                          accepted=after["accepted"] - before["accepted"],
                          rejected=drafts - per_pos[-1] if per_pos else 0,
                          tokens=list(reply["choices"][0].get("token_ids") or []))
