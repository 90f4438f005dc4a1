#!/usr/bin/env bash
# Issue #43 item 4: which trained draft pays most, chosen on TUNE prompts (never the test prompts a result reports).
# The off-the-shelf 0.5B (the reference) and each export decode the domain's tune prompts greedily, each taking turns
# with target-only decoding prompt by prompt, at measure.sh's settings (gamma=3, int8, heads cut to the store's 8192
# most frequent ids). The draft with the highest speedup over target-only (tokens/s over the same prompts' target-only
# tokens/s) is the one whose measure.sh test run is the domain's trained draft in the README. scripts/choose_draft.py
# applies the rule and sets every candidate against the winner prompt by prompt (choice.md, choice.json in OUT), so a
# margin these prompts do not resolve is called a tie.
#     bash bench/decoding/qwen-domain-store/choose.sh medical outputs/qwen-medical-2000-240/export outputs/qwen-medical-cut-960/export
# Environment: OUT= (the bench folder), PROMPTS= (tune prompts, default 8), TOKENS= (new tokens each, default 96),
# TEMPERATURE= (default 0, greedy: the choice the README's row follows; 1.0 asks which draft to sample with).
set -euo pipefail
cd "$(dirname "$0")/../../.."
DOMAIN=${1:?usage: choose.sh <medical|general|code> <export> [<export> ...]}
shift
[ "$#" -ge 1 ] || { echo "error: name at least one export folder to choose among"; exit 2; }
PY=${PY:-.venv/bin/python}
STORE=data/stores/qwen25_coder_1_5b/$DOMAIN.jsonl
OUT=${OUT:-outputs/bench/qwen-$DOMAIN-choice-tune}
PROMPTS=${PROMPTS:-8}
TOKENS=${TOKENS:-96}
TEMPERATURE=${TEMPERATURE:-0}
[ -f "$STORE" ] || { echo "error: no store $STORE (its 8192 most frequent ids cut the drafts' heads). Fix: generate it (data/stores/README.md)"; exit 2; }
for d in "$@"; do
    [ -f "$d/config.json" ] || { echo "error: $d is not an export folder (no config.json). Fix: train it first (measure.sh)"; exit 2; }
done
echo "== tune prompts, $DOMAIN, T=$TEMPERATURE ($(date +%H:%M)): $OUT"
# make bench-qwen-domain's settings (measure.sh's), on the tune split, one temperature; DRAFT lists every export
make bench-qwen-domain "DOMAIN=$DOMAIN" "DRAFT=$(IFS=,; echo "$*")" "QWEN_DOMAIN_STORE=$STORE" "PY=$PY" \
    ARGS="split=tune n_prompts=$PROMPTS max_new_tokens=$TOKENS temperature=[$TEMPERATURE] out=$OUT"
"$PY" scripts/choose_draft.py "$OUT/results.json"
echo "== done ($(date +%H:%M)): $OUT"
