"""What a result was measured with: the code (git commit, dirty tree), package versions, the machine, and the exact
weights of the target and of each draft. Recorded in every results file and model card so a figure can be traced
and reproduced."""

from __future__ import annotations

import hashlib
import platform
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def git_state(repo: Path = REPO) -> dict:
    """{"commit": full sha or None, "dirty": bool or None}: None where the code is not a git checkout."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                                capture_output=True, text=True, timeout=10, check=True).stdout
        return {"commit": commit, "dirty": bool(status.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def cpu_model() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what platform reports."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def weights_hash(folder: str | Path) -> str | None:
    """sha256 over a model folder's weight files (safetensors / bin, sorted by name); None if there are none."""
    folder = Path(folder)
    files = sorted(p for p in folder.glob("*") if p.suffix in (".safetensors", ".bin")) if folder.is_dir() else []
    if not files:
        return None
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode())
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def target_weights(name_or_path: str) -> dict:
    """The exact weights behind a target name: an embedded model's GGUF sha256 (and the original weights' Hub id,
    which serving engines load and which are NOT these weights), or a local folder's weights hash, or a Hub id."""
    from decode.models.embedded import PREFIX, REGISTRY

    if name_or_path.startswith(PREFIX):
        spec = REGISTRY[name_or_path[len(PREFIX):]]
        parts = spec.parts()
        return {"kind": "embedded", "name": name_or_path, "package": parts[0][1] if len(parts) == 1 else
                [pip for _, pip, _ in parts], "file": spec.gguf_file, "chunks": spec.chunks,
                "sha256": spec.sha256, "hub_original": spec.hub_original}
    if Path(name_or_path).is_dir():
        return {"kind": "folder", "name": name_or_path, "weights_sha256": weights_hash(name_or_path)}
    return {"kind": "hub", "name": name_or_path}


def provenance(target: str, drafts: list[str] = ()) -> dict:
    """Everything above for one measurement run."""
    import torch
    import transformers

    return {**git_state(), "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "cpu_model": cpu_model(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "target_weights": target_weights(target),
            # an embedded draft: its GGUF's pinned sha256 (the weights it is converted from)
            "draft_weights_sha256": {d: target_weights(d)["sha256"] if d.startswith("embedded:") else weights_hash(d)
                                     for d in drafts}}
