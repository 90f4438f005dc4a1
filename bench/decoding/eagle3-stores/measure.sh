#!/usr/bin/env bash
# Issue #63: the EAGLE-3 draft trained on every stored answer (+experiment=qwen_coder_eagle3_stores), measured.
#     make setup-qwen setup-vllm && python train/distill.py +experiment=qwen_coder_eagle3_stores   # resumable
#     bash bench/decoding/eagle3-stores/measure.sh export          # every kept checkpoint -> an export folder
#     bash bench/decoding/eagle3-stores/measure.sh vllm 1000       # vLLM: plain, the 0.5B, EAGLE-3, n-gram
#     bash bench/decoding/eagle3-stores/measure.sh ours 1000       # our decoder's defaults: the 0.5B, EAGLE-3, lookup
#     bash bench/decoding/eagle3-stores/measure.sh llamacpp 1000   # llama.cpp: plain, the 0.5B, EAGLE-3, n-gram
#     bash bench/decoding/eagle3-stores/measure.sh curve           # α of every export against tokens trained on
# `export` writes outputs/qwen-coder-eagle3-stores/export-step<N> for each kept step-<N>.ckpt (a finished export is
# reused). `vllm` serves the 1.5B plain, with the off-the-shelf 0.5B, with the step-N EAGLE-3 export (eagle3) and with
# n-gram drafting, one server at a time (two 1.5B servers do not fit in 24 GB), on 8 held-out test prompts per domain
# (code, medical), 96 new tokens, greedy, γ=3 (the issue's setting, fixed before measuring), then our decoder on the
# same prompts with vLLM's weights (float, full heads) for the α check (vLLM's figures are written first; `ours=false`
# after the step skips the check, which takes about as long as vLLM's part). `ours` runs our decoder's defaults on the
# same prompts: target alone, the 0.5B, the EAGLE-3 export and prompt lookup, taking turns prompt by prompt.
# `llamacpp` (make setup-llamacpp) serves the 1.5B's GGUF plain, with the 0.5B (draft-simple), with the export
# converted to GGUF (draft-eagle3) and with n-gram drafting, all up at once, on the same prompts, γ=3. Nothing else
# may run beside these three (timings). `curve` decodes the same prompts with the 0.5B and every export (greedy α in
# our decoder: the learning curve; its speeds are not compared, so it may run beside training).
# Environment: RUN= (the training folder), OUT= (the bench folder), PROMPTS= (test prompts per domain, default 8).
# Arguments after the step go to the stage's script as Hydra overrides.
set -euo pipefail
cd "$(dirname "$0")/../../.."
STAGE=${1:?usage: measure.sh <export|vllm|ours|llamacpp|curve> [step]}
STEP=${2:-1000}
EXTRA=("${@:3}")  # further Hydra overrides for the stage's script, e.g. ours=false for the vllm stage
PY=${PY:-.venv/bin/python}
RUN=${RUN:-outputs/qwen-coder-eagle3-stores}
PROMPTS=${PROMPTS:-8}
TARGET=embedded:qwen2.5-coder-1.5b-instruct
OFFSHELF=embedded:qwen2.5-coder-0.5b-instruct
EXPORT=$RUN/export-step$STEP

case $STAGE in
export)
    shopt -s nullglob
    for ckpt in "$RUN"/checkpoints/step-*.ckpt; do
        n=$(basename "$ckpt" .ckpt); n=${n#step-}
        if [ -f "$RUN/export-step$n/config.json" ]; then echo "== step $n: exported ($RUN/export-step$n)"; continue; fi
        "$PY" scripts/export_draft.py "ckpt_path=$ckpt" "out=$RUN/export-step$n"
    done ;;
vllm)
    [ -f "$EXPORT/config.json" ] || { echo "error: no $EXPORT. Fix: bash $0 export (after step $STEP)"; exit 2; }
    OUT=${OUT:-bench/decoding/vllm-qwen-eagle3}
    "$PY" scripts/bench_vllm.py "target=$TARGET" "drafts=[$OFFSHELF,$EXPORT]" domains=[code,medical] \
        "n_prompts=$PROMPTS" max_new_tokens=96 max_servers=1 "out=$OUT" "${EXTRA[@]}" ;;
ours)
    [ -f "$EXPORT/config.json" ] || { echo "error: no $EXPORT. Fix: bash $0 export (after step $STEP)"; exit 2; }
    OUT=${OUT:-bench/decoding/eagle3-stores-qwen}
    "$PY" eval/speculate.py "target=$TARGET" "drafts=[$OFFSHELF,$EXPORT]" "reference_draft=$OFFSHELF" \
        proposers=[draft,lookup] domains=[code,medical] "n_prompts=$PROMPTS" gamma=[3] temperature=[0] \
        max_new_tokens=96 repeats=1 "out=$OUT" "${EXTRA[@]}" ;;
llamacpp)
    [ -f "$EXPORT/config.json" ] || { echo "error: no $EXPORT. Fix: bash $0 export (after step $STEP)"; exit 2; }
    OUT=${OUT:-bench/decoding/llamacpp-qwen-eagle3}
    "$PY" scripts/bench_llamacpp.py "target=$TARGET" "drafts=[$OFFSHELF,$EXPORT]" domains=[code,medical] \
        "n_prompts=$PROMPTS" draft_max=[3] max_new_tokens=96 "out=$OUT" "${EXTRA[@]}" ;;
curve)
    shopt -s nullglob
    exports=$(printf '%s\n' "$RUN"/export-step*/config.json | xargs -n1 dirname | sort -V | paste -sd, -)
    [ -n "$exports" ] || { echo "error: no $RUN/export-step*. Fix: bash $0 export"; exit 2; }
    OUT=${OUT:-bench/decoding/eagle3-stores-curve}
    "$PY" eval/speculate.py "target=$TARGET" "drafts=[$OFFSHELF,$exports]" domains=[code,medical] \
        "n_prompts=$PROMPTS" gamma=[3] temperature=[0] max_new_tokens=96 repeats=1 "out=$OUT" ;;
*)
    echo "error: stage '$STAGE' is none of export, vllm, ours, llamacpp, curve"; exit 2 ;;
esac
