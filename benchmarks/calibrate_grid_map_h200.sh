#!/usr/bin/env bash
# issue 18, item 5: the one-command from-scratch calibration of the H200, as run on the device.
#
#   benchmarks/calibrate_grid_map_h200.sh smoke   # a minute: the backends load and JIT-build, map steps run
#   benchmarks/calibrate_grid_map_h200.sh full    # the command itself, timed: `calibrate --gpu h200 --from-scratch --grid`
#   BACKENDS=none benchmarks/calibrate_grid_map_h200.sh full   # its Triton kernels and map steps alone
#
# Carried with the device call (never committed, .gitignore): upstream/ (tools/fetch_upstream.sh: vLLM 0.33.0's and
# SGLang 0.5.23's kernel files) and .devcarry/ (flashinfer-python 0.7.2.post1's wheel without the kernel sources of
# unrelated features but with every Python module, as its __init__ imports fused_moe, moe_ep and experimental;
# tar.xz; apache-tvm-ffi 0.1.15.post2's cp312 wheel; vLLM 0.33.0's vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so, xz).
# FlashInfer JIT-compiles into a fresh workspace each run, so the backends' time includes their builds as on a GPU
# that never ran them.
set -uo pipefail
MODE="${1:-full}"
GPU="${GPU:-auto}"  # decodecalc gpus' name of the device; auto: the one its device name resolves to
OUT="${OUT:-/tmp/decodecalc-out}"
mkdir -p "$OUT"
S="$(mktemp -d /tmp/dc-carry.XXXX)"
mkdir -p "$S/fi"
tar xJf .devcarry/flashinfer.tar.xz -C "$S/fi"
python3 -m zipfile -e .devcarry/apache_tvm_ffi-*.whl "$S/fi"
xz -dc .devcarry/_vllm_fa3_C.abi3.so.xz > "$S/fa3.so"
export PYTHONPATH="$PWD:$S/fi" DECODECALC_FA3_LIB="$S/fa3.so" PYTHONUNBUFFERED=1 FLASHINFER_WORKSPACE_BASE="$S/ws"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
if [ "$GPU" = auto ]; then
  GPU="$(python3 -c "import torch; from decodecalc.specs.gpus import resolve_gpu; print(resolve_gpu(torch.cuda.get_device_name(0)).name)")"
fi
echo "GPU=$GPU"

case "$MODE" in
  smoke)
    timeout 90 python3 -m decodecalc verify --gpu "$GPU" --system flashinfer-tc --batch 4 --seq-len 512 2>&1 | tail -6
    timeout 60 python3 -m decodecalc verify --gpu "$GPU" --system fa3 --batch 4 --seq-len 512 2>&1 | tail -6
    timeout 240 python3 -m decodecalc calibrate --gpu "$GPU" --from-scratch --quick --map-steps 1 --backends none \
      -o "$OUT/smoke.yaml" --save-measurements "$OUT/smoke-measurements.json.gz" 2>&1 | tail -8
    ;;
  full)
    start=$(date +%s)
    name="calibrate-grid-map-$GPU"
    timeout 590 python3 -m decodecalc calibrate --gpu "$GPU" --from-scratch --grid --backends "${BACKENDS:-auto}" \
      -o "$OUT/$name.yaml" \
      --save-measurements "$OUT/$name-measurements.json.gz" > "$OUT/$name.log" 2>&1
    rc=$?
    echo "rc=$rc wall_s=$(( $(date +%s) - start ))" | tee -a "$OUT/$name.log"
    tail -30 "$OUT/$name.log"
    ;;
  *) echo "Error: unknown mode '$MODE'; valid: smoke, full" >&2; exit 2 ;;
esac
