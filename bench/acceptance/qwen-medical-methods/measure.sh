#!/usr/bin/env bash
# Issue #43, items 3 and 4, chosen on tune prompts: which way of training the whole Qwen2.5-Coder-0.5B on the 1.5B's
# medical answers raises acceptance most? Three drafts from the same N answers and the same step budget, each judged
# beside the off-the-shelf 0.5B by eval/acceptance.py on the medical `tune` prompts (alpha_tf at T=0 and T=1):
#   lora  rank-16 LoRA, lr 1e-4 (the recipe's)          full  every layer, lr 2e-5 (embeddings and head frozen)
#   mix   LoRA on the answers plus as many tokens of HPO definitions (1 : 1): issue #43 item 3
# Results: this folder (lora, full) and ../qwen-medical-mix (lora, mix).
# All three learn from the 1.5B's cached top-64 (teacher=cache: built by the first run, reused), so the target runs
# over the answers once (the mix arm's data is other text, so it caches its own). Resumable: a finished run (its
# export) is skipped on a rerun, and refused if trained for other steps: another N or step count needs its own RUNS=.
# ARMS= picks arms: "lora full" leaves the mix arm out, "mix" runs it alone.
#     make setup-qwen && bash bench/acceptance/qwen-medical-methods/measure.sh [N answers] [steps]
#     ARMS="lora full" OUT=bench/acceptance/qwen-medical-methods bash bench/acceptance/qwen-medical-methods/measure.sh 256 60
#     ARMS="lora mix" OUT=bench/acceptance/qwen-medical-mix bash bench/acceptance/qwen-medical-methods/measure.sh 256 60
set -euo pipefail
cd "$(dirname "$0")/../../.."
N=${1:-256}
STEPS=${2:-60}
PY=${PY:-.venv/bin/python}
STORE=data/stores/qwen25_coder_1_5b/medical.jsonl
RUNS=${RUNS:-outputs/qwen-medical-methods}
ARMS=${ARMS:-lora full mix}
OUT=${OUT:-outputs/acceptance/qwen-medical-${ARMS// /-}}   # this folder's results: ARMS="lora full" OUT=<this folder>
held=$(wc -l < "$STORE")
[ "$held" -ge "$N" ] || { echo "error: $STORE holds $held answers, fewer than N=$N. Fix: grow it (data/stores/README.md)"; exit 2; }
COMMON=(+experiment=qwen_coder_quick +domain=medical "data.store=$STORE" "data.generate.n_prompts=$N"
        data.generate.enabled=false teacher=cache model.draft.train_vocab=null model.draft.train_vocab_from=null "trainer.max_steps=$STEPS"
        trainer.val_check_interval=20 checkpoint.every_n_steps=20 optim.warmup_steps=6 logger=csv)

train() {  # arm, extra overrides...
    local arm=$1; shift
    if [ -f "$RUNS/$arm/export/config.json" ]; then
        local had
        had=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['setup']['max_steps'])" "$RUNS/$arm/summary.json")
        [ "$had" = "$STEPS" ] || { echo "error: $RUNS/$arm was trained for $had steps, not $STEPS. Fix: RUNS=<a new folder>"; exit 2; }
        echo "== $arm: done ($RUNS/$arm/export)"; return
    fi
    echo "== $arm: training ($(date +%H:%M))"
    "$PY" train/distill.py "${COMMON[@]}" "task_name=qwen-medical-$arm" "paths.output_dir=$RUNS/$arm" "$@"
}

has() { [[ " $ARMS " == *" $1 "* ]]; }
has lora && train lora
has full && train full lora.enabled=false optim.lr=2e-5
if has mix; then  # LoRA: the method the lora / full comparison chose (result.md here)
    # as many HPO definition tokens as answer tokens: about 54 tokens a definition against about 170 a chat record
    HPO="{kind: builtin, name: medical_hpo, weight: 1.0, max_records: $((N * 170 / 54))}"
    train mix "data.sources=[{kind: files, path: $STORE, format: chat, weight: 1.0, max_records: $N},$HPO]"
fi
DRAFTS=embedded:qwen2.5-coder-0.5b-instruct
for arm in $ARMS; do DRAFTS="$DRAFTS,$RUNS/$arm/export"; done

echo "== acceptance on the medical tune prompts ($(date +%H:%M))"
"$PY" eval/acceptance.py target=embedded:qwen2.5-coder-1.5b-instruct \
    "drafts=[$DRAFTS]" \
    domains=[medical] split=tune n_prompts=24 temperature=[0,1] samples_per_prompt=1 max_new_tokens=128 \
    batch_size=12 "out=$OUT"
for arm in $ARMS; do cp "$RUNS/$arm/summary.json" "$OUT/summary-$arm.json"; done
echo "== done ($(date +%H:%M)): $OUT"
