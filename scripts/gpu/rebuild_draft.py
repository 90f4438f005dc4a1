"""On the device machine: rebuild the packed draft from its body and the target's embedding (scripts/gpu/README.md).

    python scripts/gpu/rebuild_draft.py <folder holding .xfer/c's files> <draft folder to write>

Converts the embedded target once (decode/models/embedded.py), checks that its embedding is the one the draft was trained
with (sha256), and writes a plain Hugging Face draft folder. Exit code 3 if the embeddings differ.
"""
import json
import shutil
import sys
from pathlib import Path

from safetensors.torch import load_file, save_file

sys.path[:0] = [".", str(Path(__file__).parent)]
from decode.models.embedded import embedded_model_dir  # noqa: E402
from pack import EMBED, sha256_tensor  # noqa: E402


def main(here: Path, out: Path) -> int:
    target = embedded_model_dir("embedded:smollm2-135m-instruct")
    embed = load_file(target / "model.safetensors")[EMBED]
    same = sha256_tensor(embed) == json.loads((here / "embed.json").read_text())["embed_sha256"]
    print("target embedding identical to the draft's (sha256):", same, flush=True)
    body = load_file(here / "draft_body.safetensors")
    body[EMBED] = embed
    out.mkdir(parents=True, exist_ok=True)
    save_file(body, out / "model.safetensors", metadata={"format": "pt"})
    for name in ("config.json", "generation_config.json", "draftsmith.json"):
        if (here / name).is_file():
            shutil.copy(here / name, out / name)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (target / name).is_file():
            shutil.copy(target / name, out / name)
    print("draft folder:", out, sorted(p.name for p in out.iterdir()), flush=True)
    return 0 if same else 3


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
