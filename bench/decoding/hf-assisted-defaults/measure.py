"""transformers assisted generation with the default draft as exported (transformers defaults for an assistant:
20 tokens, constant schedule, confidence threshold 0.4) against num_assistant_tokens = 1 or 4: 4 general prompts x 64
new tokens, greedy, 3 interleaved rounds, median tok/s. No layouts, no int8: stock transformers on this CPU.

    .venv/bin/python bench/decoding/hf-assisted-defaults/measure.py      # from the repository root, ~6 min here
"""
import time, statistics, sys, os, copy
import torch
sys.path.insert(0, ".")
from decode.models.loading import load_frozen, load_tokenizer
from data.prompts import encode_prompt, load_prompts
from decode.kernels.runtime import setup_cpu
setup_cpu(None, True)
cache = os.path.expanduser("~/.cache/draftsmith")
T = "embedded:smollm2-135m-instruct"
tok = load_tokenizer(T, cache_dir=cache); target = load_frozen(T, cache_dir=cache)
draft = load_frozen("outputs/study160/generated_mix_lr2e-3/export")
prompts = [encode_prompt(tok, p) for p in load_prompts("general", 4, None)]
settings = {"as exported (transformers defaults: 20 tokens, constant, confidence 0.4)": {},
            "num_assistant_tokens=1, constant, no confidence stop": {"num_assistant_tokens": 1, "num_assistant_tokens_schedule": "constant", "assistant_confidence_threshold": 0.0},
            "num_assistant_tokens=1, constant, confidence 0.4": {"num_assistant_tokens": 1, "num_assistant_tokens_schedule": "constant"},
            "num_assistant_tokens=4, constant, confidence 0.4": {"num_assistant_tokens": 4, "num_assistant_tokens_schedule": "constant"},
            "target only": None}
def run(kw):
    n = 0; t = time.perf_counter(); outs = []
    for p in prompts:
        ids = torch.tensor([p])
        extra = {} if kw is None else {"assistant_model": d}
        o = target.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=64, min_new_tokens=64, do_sample=False, **extra)
        n += o.shape[1] - ids.shape[1]; outs.append(o[0].tolist())
    return n / (time.perf_counter() - t), outs
res = {k: [] for k in settings}; outs = {}
for rep in range(3):
    for name, kw in settings.items():
        d = copy.deepcopy(draft)
        if kw:
            for a, v in kw.items(): setattr(d.generation_config, a, v)
        tps, o = run(kw); res[name].append(tps); outs[name] = o
for name in settings:
    print(f"{statistics.median(res[name]):6.1f} tok/s  {name}  identical={outs[name]==outs['target only']}  {[round(x,1) for x in res[name]]}")
