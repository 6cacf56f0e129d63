#!/usr/bin/env bash
# Download the vLLM and SGLang release wheels and unpack ONLY the decode-attention
# kernel sources (and the files they import or that we read) into ./upstream/.
#
#   tools/fetch_upstream.sh            # vllm 0.33.0, sglang 0.5.23
#   tools/fetch_upstream.sh sglang     # only SGLang (CI: its wheel is ~38 MB, vLLM's ~340 MB)
#   tools/fetch_upstream.sh vllm       # only vLLM
#   VLLM_VERSION=0.33.0 SGLANG_VERSION=0.5.23 WHEEL_DIR=/tmp/w tools/fetch_upstream.sh
#
# ./upstream/ is git-ignored: upstream code is never committed to this repository.
# The wheels (vLLM's is ~340 MB) go to $WHEEL_DIR, outside the repository by default.
set -euo pipefail

VLLM_VERSION="${VLLM_VERSION:-0.33.0}"
SGLANG_VERSION="${SGLANG_VERSION:-0.5.23}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WHEEL_DIR="${WHEEL_DIR:-$(dirname "$ROOT")/wheels-dl}"
DEST="${DEST:-$ROOT/upstream}"
PIP="${PIP:-python -m pip}"

WHICH="${1:-all}"
case "$WHICH" in
  all|vllm|sglang) ;;
  *) echo "Error: unknown argument '$WHICH'; valid: vllm, sglang (or none for both)" >&2; exit 2 ;;
esac
wanted() { [ "$WHICH" = all ] || [ "$WHICH" = "$1" ]; }

mkdir -p "$WHEEL_DIR" "$DEST"

want() { ls "$WHEEL_DIR"/"$1"-"$2"-*.whl 2>/dev/null | head -n1; }

for spec in "vllm $VLLM_VERSION" "sglang $SGLANG_VERSION"; do
  set -- $spec
  wanted "$1" || continue
  if [ -z "$(want "$1" "$2")" ]; then
    $PIP download --no-deps "$1==$2" -d "$WHEEL_DIR"
  fi
done

VLLM_WHL="$(want vllm "$VLLM_VERSION" || true)"
SGLANG_WHL="$(want sglang "$SGLANG_VERSION" || true)"

# Files the kernels need at import time, plus files read (never imported) for
# reference: triton_attn.py (thresholds, scratch shapes), triton_backend.py
# (SGLang split-count host wrapper, buffer shapes).
VLLM_FILES=(
  vllm/_version.py
  vllm/envs.py
  vllm/v1/attention/ops/triton_unified_attention.py
  vllm/v1/attention/ops/triton_attention_helpers.py
  vllm/v1/attention/backends/triton_attn.py
  vllm/v1/kv_cache_interface.py
)
SGLANG_FILES=(
  sglang/version.py
  sglang/_version.py
  sglang/kernels/ops/attention/decode_attention.py
  sglang/kernels/ops/attention/metadata.py
  sglang/kernels/ops/attention/score_mod.py
  sglang/srt/layers/attention/triton_backend.py
)

unpack() {  # wheel dest names...
python - "$@" <<'PY'
import sys, zipfile, pathlib
whl, dest, *names = sys.argv[1:]
z = zipfile.ZipFile(whl)
for n in names:
    out = pathlib.Path(dest) / n
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(z.read(n))
    print("unpacked", out)
PY
}

if wanted vllm; then unpack "$VLLM_WHL" "$DEST/vllm-$VLLM_VERSION" "${VLLM_FILES[@]}"; fi
if wanted sglang; then unpack "$SGLANG_WHL" "$DEST/sglang-$SGLANG_VERSION" "${SGLANG_FILES[@]}"; fi
