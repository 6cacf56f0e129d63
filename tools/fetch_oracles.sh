#!/usr/bin/env bash
# Fetch the release source archives (sdists) whose HOST code decides a split policy's launch, unpack
# only the files the oracles read into ./oracles/ (git-ignored: upstream code is never committed),
# then extract and compile the oracles (tests/oracles/build.py).
#
#   tools/fetch_oracles.sh                 # all archives, then build
#   SDIST_DIR=/tmp/sd tools/fetch_oracles.sh
#
# Archives (PyPI, by exact file name and the index's sha256):
#   flash-attn 2.8.3.post2         csrc/flash_attn/flash_api.cpp, src/flash.h, static_switch.h, launch template
#   flashinfer-python 0.7.2.post1  include/flashinfer/attention/scheduler.cuh (+ the headers it includes)
#   vllm 0.11.0                    csrc/attention/paged_attention_v{1,2}.cu, vllm/attention/ops/paged_attn.py
#   vllm 0.33.0                    csrc/rocm/attention*.cu{,h}, vllm/platforms/rocm.py
#   amd-aiter 0.1.7.post2.dev18    aiter/ops/triton/unified_attention.py (+ its kernel module)
# FlashAttention-3 (hopper/heuristics.h, tile_size.h) and FlashMLA ship no source archive on PyPI:
# see docs/oracles.md.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SDIST_DIR="${SDIST_DIR:-$(dirname "$ROOT")/wheels-dl}"
DEST="${DEST:-$ROOT/oracles}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$SDIST_DIR" "$DEST"

# pip cannot download these sdists (building their metadata imports torch/CUDA), so read the simple page
# (PEP 503) of the index pip uses for the file and its sha256, and download that file.
fetch() {  # project file
  [ -s "$SDIST_DIR/$2" ] && return 0
  "$PYTHON" - "$1" "$2" "$SDIST_DIR" <<'EOF'
import hashlib, re, sys, urllib.request
project, fname, dest = sys.argv[1:]
# the index pip itself uses: $PIP_INDEX_URL, else pip's configured or built-in default
import os, subprocess
base = os.environ.get("PIP_INDEX_URL") or subprocess.run(
    [sys.executable, "-m", "pip", "config", "get", "global.index-url"], capture_output=True, text=True).stdout.strip()
if not base:
    from pip._internal.models.index import PyPI
    base = PyPI.simple_url
index = "%s/%s/" % (base.rstrip("/"), project)
html = urllib.request.urlopen(index, timeout=120).read().decode()
for m in re.finditer(r'href="([^"#]+)#sha256=([0-9a-f]{64})"[^>]*>([^<]+)</a>', html):
    if m.group(3) == fname:
        data = urllib.request.urlopen(m.group(1), timeout=900).read()
        if hashlib.sha256(data).hexdigest() != m.group(2):
            sys.exit("Error: sha256 mismatch for %s" % fname)
        open("%s/%s.part" % (dest, fname), "wb").write(data)
        break
else:
    sys.exit("Error: %s not listed on %s" % (fname, index))
EOF
  mv "$SDIST_DIR/$2.part" "$SDIST_DIR/$2"
}

unpack() {  # archive top-dir member-pattern...
  local archive="$SDIST_DIR/$1" top="$2"; shift 2
  rm -rf "${DEST:?}/$top"
  tar xzf "$archive" -C "$DEST" --wildcards "${@/#/$top/}"
}

fetch flash-attn flash_attn-2.8.3.post2.tar.gz
unpack flash_attn-2.8.3.post2.tar.gz flash_attn-2.8.3.post2 \
  csrc/flash_attn/flash_api.cpp csrc/flash_attn/src/flash.h csrc/flash_attn/src/namespace_config.h \
  csrc/flash_attn/src/static_switch.h csrc/flash_attn/src/flash_fwd_launch_template.h

fetch flashinfer-python flashinfer_python-0.7.2.post1.tar.gz
unpack flashinfer_python-0.7.2.post1.tar.gz flashinfer_python-0.7.2.post1 'include/flashinfer/*'

fetch vllm vllm-0.11.0.tar.gz
unpack vllm-0.11.0.tar.gz vllm-0.11.0 \
  csrc/attention/paged_attention_v1.cu csrc/attention/paged_attention_v2.cu vllm/attention/ops/paged_attn.py

fetch vllm vllm-0.33.0.tar.gz
unpack vllm-0.33.0.tar.gz vllm-0.33.0 'csrc/rocm/attention*' vllm/platforms/rocm.py

fetch amd-aiter amd_aiter-0.1.7.post2.dev18.tar.gz
unpack amd_aiter-0.1.7.post2.dev18.tar.gz amd_aiter-0.1.7.post2.dev18 \
  aiter/ops/triton/unified_attention.py aiter/ops/triton/_triton_kernels/unified_attention.py

"$PYTHON" "$ROOT/tests/oracles/build.py" --oracles "$DEST"
