"""Pack the GPU benchmark's inputs into three carry folders for the device machine (scripts/gpu/README.md).

The lent GPU machine has no network and takes at most 64 MiB per call, working tree included. It has torch but
not our transformers pin, hydra, omegaconf or gguf, and not the embedded target. So: .xfer/a = the first part of the
target's GGUF; .xfer/b = the rest of it + wheels; .xfer/c = the draft without its embedding (training froze it: the
device takes it from the target, checked by sha256) + this draft's config.

    .venv/bin/python scripts/gpu/pack.py draft=outputs/study160/generated_mix_lr2e-3/export   # from the repo root
"""
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

from safetensors.torch import load_file, save_file

sys.path.insert(0, ".")
from decode.models.embedded import REGISTRY, embedded_model_dir, locate_gguf  # noqa: E402

WHEELS = ["transformers==5.24.0", "hydra-core==1.3.8", "omegaconf==2.3.1", "gguf==0.19.0",
          "regex==2026.11.19"]   # regex: transformers 5.24 needs a newer one than the image's
BUILT = ["antlr4-python3-runtime==4.9.3"]   # pure Python, published as source only: built into a wheel here
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
PART = 55_000_000       # bytes of GGUF in .xfer/a; the rest goes to .xfer/b with the wheels
CARRY = 64 * 2**20      # what one call carries: the working tree and one of these folders


def tree_bytes() -> int:
    """The working tree that travels with every call (tracked files)."""
    files = subprocess.run(["git", "ls-files", "-z"], capture_output=True, text=True, check=True).stdout.split("\0")
    return sum(Path(f).stat().st_size for f in files if f and Path(f).is_file())
EMBED = "model.embed_tokens.weight"


def sha256_tensor(t) -> str:
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()


def main(draft: str, out: str = ".xfer") -> None:
    draft, out = Path(draft), Path(out)
    if not (draft / "model.safetensors").is_file():
        sys.exit(f"{draft} is not a draft export (no model.safetensors): pass draft=<export folder>.")
    shutil.rmtree(out, ignore_errors=True)
    a, b, c = out / "a", out / "b", out / "c"
    for d in (a, b / "w", c):
        d.mkdir(parents=True)

    gguf = locate_gguf(REGISTRY["smollm2-135m-instruct"]).read_bytes()
    (a / "gguf.part1").write_bytes(gguf[:PART])
    (b / "gguf.part2").write_bytes(gguf[PART:])
    pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
           "3.12", "--implementation", "cp", "-d", str(b / "w")] + [f"--platform={p}" for p in PLATFORMS] + WHEELS
    subprocess.run(pip, check=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(b / "w")] + BUILT, check=True)

    weights = load_file(draft / "model.safetensors")
    target_embed = load_file(embedded_model_dir("embedded:smollm2-135m-instruct") / "model.safetensors")[EMBED]
    embed = weights.pop(EMBED)
    if sha256_tensor(embed) != sha256_tensor(target_embed):
        sys.exit("The draft's embedding differs from the target's (trained with model.draft.train_embeddings=true?): "
                 "this packer only ships drafts whose embedding is the target's.")
    save_file(weights, c / "draft_body.safetensors", metadata={"format": "pt"})
    (c / "embed.json").write_text(json.dumps({"embed_sha256": sha256_tensor(embed), "draft": str(draft)}))
    for name in ("config.json", "generation_config.json", "draftsmith.json"):
        if (draft / name).is_file():
            shutil.copy(draft / name, c / name)

    limit = CARRY - tree_bytes() - 2 * 2**20
    for d in (a, b, c):
        size = sum(p.stat().st_size for p in d.rglob("*") if p.is_file())
        print(f"{d}: {size / 2**20:.1f} MiB")
        if size > limit:
            sys.exit(f"{d} is {size / 2**20:.1f} MiB; with the working tree ({tree_bytes() / 2**20:.0f} MiB) a call "
                     f"may carry {limit / 2**20:.0f} MiB more. Fix: smaller parts (PART), or a smaller tree.")
    print("next: the three `run` calls in scripts/gpu/README.md, back to back (the machine waits 30 s between calls)")


if __name__ == "__main__":
    main(**dict(arg.split("=", 1) for arg in sys.argv[1:]))
