"""Draft step and target pass costs, float draft vs int8 draft, alternating in one process (decode.core.costs.measure_costs).

    python bench/decoding/draft-step-int8/measure.py      # from the repository root; writes bench/decoding/draft-step-int8/costs.json
"""
import json, sys, torch, platform
sys.path.insert(0, '.')
from decode.models.loading import load_frozen, load_tokenizer
from decode.core.costs import measure_costs
from decode.kernels.fast_linear import fast_cpu_linears
from decode.drafts.quantize import quantize_draft
from decode.kernels.runtime import setup_cpu
from data.prompts import encode_prompt, load_prompts
setup_cpu(None, True)
import os
cache = os.environ.get("DRAFTSMITH_CACHE", os.path.expanduser("~/.cache/draftsmith"))
tok = load_tokenizer("embedded:smollm2-135m-instruct", cache_dir=cache)
T = load_frozen("embedded:smollm2-135m-instruct", cache_dir=cache)
D = load_frozen("outputs/study160/generated_mix_lr2e-3/export")
Q, plan = quantize_draft(D, "int8", copy=True)
prompt = encode_prompt(tok, load_prompts("general", 1)[0])
out = {"conditions": {"threads": torch.get_num_threads(), "torch": torch.__version__, "cpu": platform.processor(),
                      "draft": "outputs/study160/generated_mix_lr2e-3/export", "context_tokens": len(prompt),
                      "repeats": 21, "order": "float, int8, float, int8"}, "runs": []}
with fast_cpu_linears([T, D, Q], 2, "auto"):
    for name, d in [("float", D), ("int8", Q), ("float", D), ("int8", Q)]:
        c = measure_costs(T, d, prompt, 2, repeats=21)
        out["runs"].append({"draft": name, "draft_step_ms": round(c["draft_step_s"] * 1e3, 2),
                            "target_pass_ms": [round(x * 1e3, 2) for x in c["target_pass_s"]]})
        print(out["runs"][-1], flush=True)
json.dump(out, open("bench/decoding/draft-step-int8/costs.json", "w"), indent=1)
