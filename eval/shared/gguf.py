"""Drafts as GGUF files for llama.cpp (`export_gguf`, `gguf_of`), and where `make setup-llamacpp` keeps llama.cpp's
build (its tools and its converter). Shared by the llama.cpp engine (eval/llamacpp.py) and scripts/export_gguf.py.

    gguf = export_gguf("outputs/distill/<run>/export", kind="q8_0")   # -> <export>/draft-q8_0.gguf
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from data.atomic import temp_file
from data.checks import UsageError
from decode.drafts.kinds import STANDALONE

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
