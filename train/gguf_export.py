"""An exported draft as a GGUF file, for llama.cpp (`llama-server -md <draft.gguf>`).

llama.cpp's own converter (`convert_hf_to_gguf.py`, installed by `make setup-llamacpp` with its gguf-py) turns the
Hugging Face folder into F16 or Q8_0; Q4_K_M is quantized from the F16 file by `llama-quantize`. The export keeps
the full vocabulary and LM head (only our CPU decoder cuts its head, at decode time), so llama.cpp checks it against
the target's vocabulary as for any draft. Written to a temporary name and renamed into place.

    python scripts/export_gguf.py export=outputs/distill/<run>/export type=q8_0     # <export>/draft-q8_0.gguf
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from data.atomic import temp_file
from data.checks import UsageError
from eval.llamacpp import llamacpp_bin, llamacpp_dir

TYPES = ("f16", "q8_0", "q4_k_m")


def export_gguf(folder, out=None, kind: str = "q8_0", cache_dir=None) -> Path:
    """Convert the Hugging Face folder `folder` to GGUF of `kind` (f16 | q8_0 | q4_k_m); returns the file (default
    <folder>/draft-<kind>.gguf)."""
    folder = Path(folder)
    if kind not in TYPES:
        raise UsageError(f"type must be one of {', '.join(TYPES)}, got {kind!r}.")
    if not (folder / "config.json").is_file():
        raise UsageError(f"{folder} is not a Hugging Face model folder (no config.json). Fix: an export folder; "
                         "feature drafts (Medusa, EAGLE) have no GGUF form here.")
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
        run([sys.executable, str(converter), str(folder), "--outfile", str(f16),
             "--outtype", "f16" if kind == "q4_k_m" else kind], env)
        if kind == "q4_k_m":
            run([str(llamacpp_bin("llama-quantize", cache_dir)), str(f16), tmp, "Q4_K_M"], env)
        os.chmod(tmp, 0o644)  # mkstemp makes it private
        os.replace(tmp, out)
    finally:
        for leftover in (Path(tmp), f16):
            leftover.unlink(missing_ok=True)
    return out


def run(cmd: list[str], env: dict) -> None:
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{Path(cmd[1] if cmd[0] == sys.executable else cmd[0]).name} failed ({done.returncode}):"
                           f" {done.stderr[-2000:]}")
