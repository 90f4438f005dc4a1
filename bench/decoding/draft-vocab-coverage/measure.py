"""How much of what the target writes a draft head cut to N ids can propose at all (decode/drafts/draft_vocab.py).

A token outside the cut head's ids can never be drafted, so its share of the target's output caps acceptance. For
each target's stored greedy answers (the generated-data stores under the cache; a prompt's answer is in one half
only), the share of answer tokens among: the first N ids (draft_vocab=auto's choice) and the N ids most frequent in
the other half of the answers (draft_vocab_from=<that half>, rank_tokens), both with the special tokens. Tokenizer
only: no model runs.

    python bench/decoding/draft-vocab-coverage/measure.py   # from the repository root; writes results.json here
"""
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, ".")
from data.token_ranking import rank_tokens  # noqa: E402
from decode.drafts.draft_vocab import kept_ids  # noqa: E402
from decode.models.loading import load_tokenizer  # noqa: E402

STORES = {"embedded:qwen2.5-coder-1.5b-instruct": "qwen25_coder_1_5b/code.jsonl",
          "embedded:smollm2-135m-instruct": "smollm2_135m/general.jsonl"}
SIZES = [4096, 8192, 16384]
cache = Path(os.environ.get("DRAFTSMITH_CACHE", os.path.expanduser("~/.cache/draftsmith")))
out = {"conditions": {"stores": STORES, "split": "answers alternate between halves A and B by line"}, "coverage": []}
for target, store in STORES.items():
    tok = load_tokenizer(target, cache_dir=cache)
    vocab = len(tok)
    answers = [json.loads(line)["messages"][-1]["content"] for line in open(cache / "generated" / store)]
    halves = [[i for a in answers[h::2] for i in tok(a, add_special_tokens=False)["input_ids"]] for h in (0, 1)]
    special = set(tok.all_special_ids)
    for size in SIZES:
        row = {"target": target, "store": store, "answers": len(answers), "size": size}
        for name, fit, test in (("A->B", 0, 1), ("B->A", 1, 0)):
            first = set(kept_ids(vocab, size, special).tolist())
            ranked = set(kept_ids(vocab, size, special, rank_tokens(halves[fit], vocab)).tolist())
            row[f"first_ids_{name}"] = sum(i in first for i in halves[test]) / len(halves[test])
            row[f"frequency_{name}"] = sum(i in ranked for i in halves[test]) / len(halves[test])
        row["first_ids"] = (row["first_ids_A->B"] + row["first_ids_B->A"]) / 2
        row["frequency"] = (row["frequency_A->B"] + row["frequency_B->A"]) / 2
        out["coverage"].append(row)
        print(f"{target} {size:>6} ids: first ids cover {row['first_ids']:.3f}, "
              f"most frequent in the other half {row['frequency']:.3f} of {len(halves[0]) + len(halves[1])} answer tokens")
Path(__file__).with_name("results.json").write_text(json.dumps(out, indent=1))
