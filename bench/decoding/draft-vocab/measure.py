"""What cutting the draft's LM head to the first N token ids costs and buys (decode/drafts/draft_vocab.py), default draft.

1. Teacher-forced agreement: along the target's own answers (the last 40 of each store: general answers to prompts the
   default draft never trained on, medical, code), how often the draft's argmax equals the target's, with the full
   head and with heads of 16384 / 8192 / 4096 ids; and how often either argmax lies past the cut.
2. The draft step (int8 weights, as decoding runs it; decode.core.costs.measure_costs, so each step follows a target pass)
   for each head size, measured twice in alternating order.

    python bench/decoding/draft-vocab/measure.py      # from the repository root; writes bench/decoding/draft-vocab/results.json
"""
import json
import os
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, ".")
from data.prompts import encode_prompt, load_prompts  # noqa: E402
from decode.core.costs import measure_costs  # noqa: E402
from decode.drafts.draft_vocab import restrict_vocab  # noqa: E402
from decode.kernels.fast_linear import fast_cpu_linears  # noqa: E402
from decode.models.loading import load_frozen, load_tokenizer  # noqa: E402
from decode.drafts.quantize import quantize_draft  # noqa: E402
from decode.kernels.runtime import setup_cpu  # noqa: E402

DRAFT = "outputs/study160/generated_mix_lr2e-3/export"
TARGET = "embedded:smollm2-135m-instruct"
SIZES = [None, 16384, 8192, 4096]
setup_cpu(None, True)
cache = os.environ.get("DRAFTSMITH_CACHE", os.path.expanduser("~/.cache/draftsmith"))
tok = load_tokenizer(TARGET, cache_dir=cache)
target = load_frozen(TARGET, cache_dir=cache)
draft = load_frozen(DRAFT)
special = set(tok.all_special_ids) | {tok.eos_token_id}
stores = next(Path(cache, "generated").iterdir())
out = {"conditions": {"threads": torch.get_num_threads(), "torch": torch.__version__, "cpu": platform.processor(),
                      "draft": DRAFT, "stores": str(stores), "answers_per_store": 40, "max_tokens": 300},
       "agreement": {}, "draft_step_ms": {str(n): [] for n in SIZES}}

heads = {n: restrict_vocab(draft, n, special, copy=True)[0] for n in SIZES}
for store in ("general-800.jsonl", "medical.jsonl", "code.jsonl"):
    if not (stores / store).is_file():
        continue
    counts = {"positions": 0, **{f"agree_{n}": 0 for n in SIZES}}
    counts.update({f"target_argmax_ge_{n}": 0 for n in SIZES[1:]}, **{f"draft_argmax_ge_{n}": 0 for n in SIZES[1:]})
    with torch.no_grad():
        for line in (stores / store).read_text().splitlines()[-40:]:
            ids = tok.apply_chat_template(json.loads(line)["messages"], tokenize=True, return_dict=False)[:300]
            ids = torch.tensor([ids])
            want = target(ids).logits[0].argmax(-1)
            full = heads[None](ids).logits[0].argmax(-1)
            counts["positions"] += len(want)
            for n, model in heads.items():
                counts[f"agree_{n}"] += int((model(ids).logits[0].argmax(-1) == want).sum())
                if n:
                    counts[f"target_argmax_ge_{n}"] += int((want >= n).sum())
                    counts[f"draft_argmax_ge_{n}"] += int((full >= n).sum())
    out["agreement"][store] = counts
    print(store, {k: (round(v / counts["positions"], 4) if k.startswith("agree") else v) for k, v in counts.items()},
          flush=True)

prompt = encode_prompt(tok, load_prompts("general", 1)[0])
quantized = {n: quantize_draft(m, "int8", copy=True)[0] for n, m in heads.items()}
with fast_cpu_linears([target], 2, "auto"):  # the target's passes as decoding runs them
    for _ in range(2):
        for n, model in quantized.items():
            ms = round(measure_costs(target, model, prompt, 1, repeats=21)["draft_step_s"] * 1e3, 2)
            out["draft_step_ms"][str(n)].append(ms)
            print(f"head {n or 'full'}: draft step {ms} ms", flush=True)
Path("bench/decoding/draft-vocab/results.json").write_text(json.dumps(out, indent=1))
