"""Top-1 agreement and expected acceptance of UNTRAINED truncated drafts, for several choices of target layers.

Along the last 20 target answers of the general-800 and medical stores (~/.cache/draftsmith/generated/<target>/).
Prints one line per layer choice (docs/results.md, "Which 4 target layers, and a trainable head").

    .venv/bin/python bench/acceptance/draft-layers-and-head/init_layers.py      # from the repository root, ~90 s here
"""
import json, os, sys, time
from pathlib import Path
import torch
sys.path.insert(0, ".")
from decode.models.loading import load_frozen, load_tokenizer
from decode.kernels.runtime import setup_cpu
from train.drafts import truncated_draft
setup_cpu(None, True)
cache = os.path.expanduser("~/.cache/draftsmith")
T = "embedded:smollm2-135m-instruct"
tok = load_tokenizer(T, cache_dir=cache); target = load_frozen(T, cache_dir=cache)
stores = next(Path(cache, "generated").iterdir())
seqs = {}
for s in ("general-800.jsonl", "medical.jsonl"):
    seqs[s] = [torch.tensor([tok.apply_chat_template(json.loads(l)["messages"], tokenize=True, return_dict=False)[:300]])
               for l in (stores / s).read_text().splitlines()[-20:]]
want = {s: [target(x).logits[0] for x in xs] for s, xs in seqs.items()}
choices = [[0,1,2,3],[0,1,2,29],[0,1,28,29],[0,28,29],[0,29],[0,1,29],[0,10,20,29],[0,1,2,3,29],[0,1,27,28,29],[0,2,4,29],[27,28,29,0]]
for layers in choices:
    d = truncated_draft(target, layers).eval()
    row = []
    with torch.no_grad():
        for s, xs in seqs.items():
            agree = n = 0; soft = 0.0
            for x, tl in zip(xs, want[s]):
                dl = d(x).logits[0]
                agree += int((dl.argmax(-1) == tl.argmax(-1)).sum()); n += len(tl)
                soft += float(torch.minimum(tl.softmax(-1), dl.softmax(-1)).sum(-1).sum())
            row.append(f"{s[:7]} greedy {agree/n:.3f} T1 {soft/n:.3f}")
    print(layers, " | ".join(row), flush=True)
