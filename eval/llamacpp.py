"""llama.cpp as a measured serving engine: llama-server started as a real process, prompts sent over its HTTP API;
and drafts converted to GGUF for it (`export_gguf`, `gguf_of`).

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
import sys
from dataclasses import dataclass, field
from pathlib import Path

from data.atomic import temp_file
from decode.drafts.kinds import STANDALONE
from data.checks import UsageError
from eval.server_process import free_port, wait_until_healthy

VERSION = "11434.0.0"  # requirements-llamacpp.txt


def llamacpp_dir(cache_dir=None) -> Path:
    base = Path(cache_dir or os.environ.get("DRAFTSMITH_CACHE", Path.home() / ".cache" / "draftsmith"))
    return base / "llama.cpp" / VERSION


def llamacpp_bin(tool: str = "llama-server", cache_dir=None) -> Path:
    """A built llama.cpp tool; a clear error naming `make setup-llamacpp` when it is not built."""
    path = llamacpp_dir(cache_dir) / "bin" / tool
    if not path.is_file():
        raise FileNotFoundError(f"llama.cpp's {tool} is not built ({path}). Fix: make setup-llamacpp (about 25 "
                                "minutes on 2 cores, once).")
    return path


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


class LlamaServer:
    """One llama-server process (a context manager): started on a free port, health-checked, stopped on exit."""

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
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "LlamaServer":
        out = open(self.log, "w") if self.log else subprocess.DEVNULL
        self.proc = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_until_healthy(self.proc, self._healthy, self.start_timeout, self.log, "llama-server")
            return self
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def _healthy(self) -> bool:
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


# --- GGUF files for llama.cpp ------------------------------------------------------------------------------------

TYPES = ("f16", "q8_0", "q4_k_m")


def spec_type_of(draft: str) -> str:
    """How llama-server drafts with this draft (decode/drafts/kinds.py `llamacpp_spec`): `draft-simple` for a
    standalone model (a .gguf file, an embedded model, an export of a standalone draft), the kind's own spec type for
    a feature draft that llama.cpp's converter reads; a kind with no llama.cpp form: a usage error naming that."""
    from decode.drafts.kinds import KINDS, serving_kind_of

    kind = serving_kind_of(draft)
    if kind.llamacpp_spec:
        return kind.llamacpp_spec
    served = [k.name for k in KINDS.values() if k.llamacpp_spec]
    raise UsageError(f"{draft} is a {kind.name} draft: llama.cpp drafts with standalone models and "
                     f"{', '.join(served)} drafts only. Fix: measure it with eval/speculate.py (our decoder), or pass "
                     "a draft llama.cpp serves.")


def verifier_dir(folder: Path, cache_dir=None) -> Path:
    """The Hugging Face folder of the target a feature-draft export was trained for (its config's verifier): llama.cpp's
    converter takes the vocabulary and the target's sizes from it."""
    from decode.models.loading import resolve

    config = json.loads((folder / "config.json").read_text())
    name = config.get("speculators_config", {}).get("verifier", {}).get("name_or_path")
    target = Path(resolve(name, cache_dir)) if name else None
    if target is None or not (target / "config.json").is_file():
        raise UsageError(f"{folder}: its target ({name}) is not a local model folder here. Fix: convert the target "
                         "first (make setup, make setup-qwen) or keep the export beside it.")
    return target


def export_gguf(folder, out=None, kind: str = "q8_0", cache_dir=None) -> Path:
    """Convert the Hugging Face folder `folder` to GGUF of `kind` (f16 | q8_0 | q4_k_m); returns the file (default
    <folder>/draft-<kind>.gguf). An EAGLE-3 export converts with its target's folder (llama.cpp's EAGLE3 layout)."""
    folder = Path(folder)
    if kind not in TYPES:
        raise UsageError(f"type must be one of {', '.join(TYPES)}, got {kind!r}.")
    if not (folder / "config.json").is_file():
        raise UsageError(f"{folder} is not a Hugging Face model folder (no config.json). Fix: an export folder.")
    extra = []
    if spec_type_of(str(folder)) != STANDALONE.llamacpp_spec:  # a feature draft converts with its target's sizes
        extra = ["--target-model-dir", str(verifier_dir(folder, cache_dir))]
    root = llamacpp_dir(cache_dir)
    converter = root / "convert_hf_to_gguf.py"
    if not converter.is_file():
        raise UsageError(f"llama.cpp's converter is not installed ({converter}). Fix: make setup-llamacpp.")
    out = Path(out) if out else folder / f"draft-{kind}.gguf"
    fd, tmp = temp_file(out.parent, out.name)
    os.close(fd)
    f16 = Path(tmp + ".f16") if kind == "q4_k_m" else Path(tmp)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "gguf-py"), str(root),
                                                        os.environ.get("PYTHONPATH", "")])}
    try:
        _run([sys.executable, str(converter), str(folder), "--outfile", str(f16),
             "--outtype", "f16" if kind == "q4_k_m" else kind, *extra], env)
        if kind == "q4_k_m":
            _run([str(llamacpp_bin("llama-quantize", cache_dir)), str(f16), tmp, "Q4_K_M"], env)
        os.chmod(tmp, 0o644)  # mkstemp makes it private
        os.replace(tmp, out)
    finally:
        for leftover in (Path(tmp), f16):
            leftover.unlink(missing_ok=True)
    return out


def _run(cmd: list[str], env: dict) -> None:
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{Path(cmd[1] if cmd[0] == sys.executable else cmd[0]).name} failed ({done.returncode}):"
                           f" {done.stderr[-2000:]}")


def gguf_of(ref: str, kind: str = "q8_0", cache_dir=None) -> Path:
    """A model as a GGUF file for llama.cpp: an embedded model's own file, a .gguf as given, or an export folder
    converted once (kept as <folder>/draft-<kind>.gguf)."""
    from decode.models.embedded import embedded_gguf, is_embedded

    if is_embedded(ref):
        return embedded_gguf(ref, cache_dir)
    if str(ref).endswith(".gguf"):
        return Path(ref)
    existing = Path(ref) / f"draft-{kind}.gguf"
    return existing if existing.is_file() else export_gguf(ref, None, kind, cache_dir)


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
