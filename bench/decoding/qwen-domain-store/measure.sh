#!/usr/bin/env bash
# Issue #43 item 5, one domain: what training on the repo's answer store buys on the real target. The whole
# Qwen2.5-Coder-0.5B with rank-16 LoRA (the method the tune-prompt comparison chose: bench/acceptance/
# qwen-medical-methods) learns the 1.5B's cached top-64 (teacher=cache) over the first N answers of
# data/stores/qwen25_coder_1_5b/<domain>.jsonl for STEPS steps; then the off-the-shelf 0.5B (the reference) and the
# export decode the domain's test prompts side by side, greedy and T=1, each taking turns with target-only decoding.
# Resumable: the teacher cache by shard, training from its last checkpoint, a finished export is reused.
#     make setup-qwen && bash bench/decoding/qwen-domain-store/measure.sh medical 2000 240   # bench/decoding/qwen-medical-2000
# Environment: RUNS= (the training folder), OUT= (the bench folder), PROMPTS= (test prompts, default 12),
# QUANT= (both drafts' weights while decoding, default int8: on medical tune prompts int4 costs agreement that int8
# keeps, at about the same draft cost: bench/decoding/draft-quant-qwen-medical).
# TEACHER= (cache, the default: the 1.5B's top-64 over every train block, built once before training; live: the 1.5B
# scores each batch as training reads it, its full distribution, which costs less when a run reads fewer blocks than
# the store holds; no cache is left behind for a later run),
# RECIPE= (the training recipe, default qwen_coder: the whole 0.5B with LoRA; qwen_coder_layers: the 8-layer cut),
# TRAIN_ARGS= (more train/distill.py overrides, e.g. TRAIN_ARGS="loss=forward_kl" for the cut, whose recipe learns by
# cross-entropy).
set -euo pipefail
cd "$(dirname "$0")/../../.."
DOMAIN=${1:?usage: measure.sh <medical|general|code> [N answers] [steps]}
N=${2:-2000}
STEPS=${3:-300}
PY=${PY:-.venv/bin/python}
STORE=data/stores/qwen25_coder_1_5b/$DOMAIN.jsonl
RUNS=${RUNS:-outputs/qwen-$DOMAIN-$N-$STEPS}
OUT=${OUT:-outputs/bench/qwen-$DOMAIN-$N-$STEPS}
PROMPTS=${PROMPTS:-12}
QUANT=${QUANT:-int8}
RECIPE=${RECIPE:-qwen_coder}
TRAIN_ARGS=${TRAIN_ARGS:-}
TEACHER=${TEACHER:-cache}
[ -f "$STORE" ] || { echo "error: no store $STORE. Fix: generate it (data/stores/README.md)"; exit 2; }
held=$(wc -l < "$STORE")
[ "$held" -ge "$N" ] || { echo "error: $STORE holds $held answers, fewer than N=$N. Fix: grow it (data/stores/README.md)"; exit 2; }

if [ -f "$RUNS/export/config.json" ]; then
    had=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['setup']['max_steps'])" "$RUNS/summary.json")
    [ "$had" = "$STEPS" ] || { echo "error: $RUNS was trained for $had steps, not $STEPS. Fix: RUNS=<a new folder>"; exit 2; }
    echo "== training: done ($RUNS/export)"
else
    echo "== training on $N $DOMAIN answers, $STEPS steps ($(date +%H:%M)): $RUNS"
    "$PY" train/distill.py "+experiment=$RECIPE" "+domain=$DOMAIN" "data.store=$STORE" "data.generate.n_prompts=$N" \
        data.generate.enabled=false "teacher=$TEACHER" model.draft.train_vocab=null model.draft.train_vocab_from=null \
        "trainer.max_steps=$STEPS" "trainer.val_check_interval=$((STEPS / 6))" "checkpoint.every_n_steps=$((STEPS / 12))" \
        "optim.warmup_steps=$((STEPS / 20))" logger=csv "task_name=qwen-$DOMAIN-store" "paths.output_dir=$RUNS" $TRAIN_ARGS
fi

echo "== side by side on $PROMPTS $DOMAIN test prompts ($(date +%H:%M)): $OUT"
# make bench-qwen-domain's settings; both heads keep the 8192 ids the 1.5B writes most in this store
make bench-qwen-domain "DOMAIN=$DOMAIN" "DRAFT=$RUNS/export" "QWEN_DOMAIN_STORE=$STORE" "PY=$PY" \
    ARGS="n_prompts=$PROMPTS draft_quant=$QUANT out=$OUT"
cp "$RUNS/summary.json" "$OUT/summary-trained.json"
cp "$RUNS/csv/metrics.csv" "$OUT/train-metrics.csv"   # the validation curve
echo "== done ($(date +%H:%M)): $OUT"
