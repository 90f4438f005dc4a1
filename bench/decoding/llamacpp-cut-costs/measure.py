"""What a draft cut from Qwen2.5-Coder-0.5B costs per step in llama.cpp: the 0.5B's first 2 and 6 layers with its full
head (untrained: only the cost is measured), converted to Q8_0 GGUF, timed by llama-bench beside the 0.5B itself, the
files taking turns twice. Compare with the dearest step that would still match llama.cpp plain
(llamacpp-costs-qwen's "where a draft can pay" table).

    make setup-qwen && make setup-llamacpp && python bench/decoding/llamacpp-cut-costs/measure.py   # from the repo root

Writes results.json and results.md beside this file.
"""
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, ".")
import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from eval.llamacpp_costs import pass_seconds  # noqa: E402
from eval.shared.provenance import provenance  # noqa: E402

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("DRAFTSMITH_CACHE", os.path.expanduser("~/.cache/draftsmith")))
SOURCE = CACHE / "models" / "qwen2.5-coder-0.5b-instruct"
FULL = CACHE / "models" / "qwen2.5-coder-0.5b-instruct.gguf"
DEPTH, KS, LAYERS = 128, [1, 3, 5], (2, 6)


def cut(layers: int, root: Path) -> Path:
    """The 0.5B's first `layers` decoder layers with its embeddings and full head, as a Q8_0 GGUF."""
    model = AutoModelForCausalLM.from_pretrained(SOURCE, dtype=torch.float32)
    model.model.layers = model.model.layers[:layers]
    model.config.num_hidden_layers = layers
    if getattr(model.config, "layer_types", None):
        model.config.layer_types = model.config.layer_types[:layers]
    folder = root / f"cut{layers}"
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(SOURCE).save_pretrained(folder)
    subprocess.run([sys.executable, "scripts/export_gguf.py", f"export={folder}", "type=q8_0"], check=True)
    return folder / "draft-q8_0.gguf"


def main():
    root = Path(tempfile.mkdtemp(prefix="cuts-"))
    files = {"Qwen2.5-Coder-0.5B (24 layers)": FULL, **{f"first {n} layers + head": cut(n, root) for n in LAYERS}}
    runs = {name: [] for name in files}
    for _ in range(2):  # the files take turns
        for name, gguf in files.items():
            runs[name].append(pass_seconds(gguf, KS, DEPTH, 2))
            print(name, {k: round(v * 1e3, 2) for k, v in runs[name][-1].items()}, flush=True)
    rows = [{"draft": name, "gguf_bytes": Path(files[name]).stat().st_size,
             "pass_ms": {k: round(min(r[k] for r in rs) * 1e3, 2) for k in KS},  # the faster of the two turns
             "turns_ms": [{k: round(v * 1e3, 2) for k, v in r.items()} for r in rs]} for name, rs in runs.items()]
    out = {"conditions": {"depth": DEPTH, "threads": 2, "tool": "llama-bench (-p k -n 0 -d depth)",
                          "cpu": platform.processor(), "provenance": provenance("embedded:qwen2.5-coder-0.5b-instruct")},
           "rows": rows}
    (HERE / "results.json").write_text(json.dumps(out, indent=1) + "\n")
    lines = ["| draft (Q8_0 GGUF) | file | 1-token pass | 3-token pass | 5-token pass |", "|---|---|---|---|---|"]
    lines += [f"| {r['draft']} | {r['gguf_bytes'] / 1e6:.0f} MB | {r['pass_ms'][1]:.1f} ms | {r['pass_ms'][3]:.1f} ms "
              f"| {r['pass_ms'][5]:.1f} ms |" for r in rows]
    (HERE / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
