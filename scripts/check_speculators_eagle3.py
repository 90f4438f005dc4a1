"""Load an EAGLE-3 export with vLLM's `speculators` package's own classes and check it drafts what ours drafts.

    python scripts/check_speculators_eagle3.py outputs/eagle3-general/<run>/export

speculators is not a Draftsmith dependency (its release pins transformers <= 5.19; we pin 5.24), so it is read from
a folder of its own, installed without its dependencies next to ours (SPECULATORS_PATH, default
~/.cache/draftsmith/speculators):

    pip download speculators==0.9.0 --no-deps -d /tmp/s && unzip -q /tmp/s/speculators-*.whl -d ~/.cache/draftsmith/speculators
    pip install --no-deps --target ~/.cache/draftsmith/speculators openai loguru pydantic-settings jiter distro \\
        sniffio python-dotenv hs-connectors==0.9.0

It builds `Eagle3SpeculatorConfig` from the export's config.json (its own validation), `Eagle3DraftModel` from that
config, loads model.safetensors into it (it must find every weight it has, apart from the verifier's embeddings and
the training-only verifier head/norm, and nothing else), gives it the target's embeddings, and compares its first
drafted token at every position of a few tune prompts with ours, both reading the same target layer inputs.
Exit code 0 when at least 99% agree (float rounding may flip a near tie).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ALLOWED_MISSING = {"embed_tokens.weight", "verifier_lm_head.weight", "verifier_norm.weight"}


def main(folder: str) -> int:
    sys.path.insert(0, os.path.expanduser(os.environ.get("SPECULATORS_PATH", "~/.cache/draftsmith/speculators")))
    try:
        from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    except ImportError as e:
        print(f"speculators does not import ({e}). Fix: install it as this script's docstring says.")
        return 2
    from safetensors.torch import load_file

    from data.prompts import load_prompts
    from decode.drafts.eagle3 import layer_inputs
    from decode.drafts.feature_export import load_feature_draft
    from decode.models.loading import load_frozen, load_tokenizer

    folder = Path(folder)
    info = json.loads((folder / "draftsmith.json").read_text())
    if info.get("draft_kind") != "eagle3":
        print(f"{folder} holds a {info.get('draft_kind')} draft, not eagle3.")
        return 2
    config = Eagle3SpeculatorConfig(**json.loads((folder / "config.json").read_text()))
    config.transformer_layer_config._attn_implementation = "eager"
    theirs = Eagle3DraftModel(config).eval()
    state = load_file(str(folder / "model.safetensors"))
    missing, unexpected = theirs.load_state_dict(state, strict=False)
    print(f"Eagle3SpeculatorConfig: ok ({config.draft_vocab_size} draft ids, layers "
          f"{config.eagle_aux_hidden_state_layer_ids}); weights missing {missing}, unexpected {unexpected}")
    if set(missing) - ALLOWED_MISSING or unexpected:
        return 1
    target = load_frozen(info["target"], dtype="float32")
    tokenizer = load_tokenizer(info["target"])
    with torch.no_grad():
        theirs.embed_tokens.weight.copy_(target.get_input_embeddings().weight)
    ours = load_feature_draft(folder, target)
    kept = state["t2d"].nonzero().flatten()
    same = total = 0
    for prompt in load_prompts("general", 4, split="tune"):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                            return_tensors="pt", return_dict=True)["input_ids"]
        with torch.no_grad():
            _, aux = layer_inputs(target, ids, ours.aux_layers, use_cache=False)
            nxt = torch.cat([ids[:, 1:], ids[:, :1]], 1)  # slot t reads token t+1 (the last slot's is a dummy)
            mine = kept[ours.logits(ours(ours.fuse(aux), nxt, torch.arange(ids.shape[1])[None]))[0][:, kept].argmax(-1)]
            drafted = theirs(aux, nxt, torch.zeros_like(ids), ttt_steps=1)[0][0]
            other = drafted + state["d2t"][drafted]
        same += int((mine == other).sum())
        total += ids.shape[1]
    print(f"first drafted token, ours against speculators' Eagle3DraftModel: {same} of {total} positions agree")
    return 0 if same >= 0.99 * total else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
