"""`decodecalc verify` over model configurations beyond the shared 40 shapes (one H200).

Each case is the CLI as a user runs it (`python -m decodecalc verify ... -o case.json`);
the cases vary what the launch models must get right: GQA groups that are not powers of two
(28:4), MHA with a padded head size (phi-3-mini d=96), head size 256 (Gemma-2), groups of 12
and 16 per KV head (BLOCK_Q 1), batches either side of vLLM's threshold, speculative decode,
batch invariance, fp16, a block size of 32, CUDA graphs off, and ragged batches.

    python3 -m benchmarks.verify_configs_h200 --out results.json

Writes one JSON with every case's verify output and a summary line per case.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

CASES: list[tuple[str, list[str]]] = [
    ("qwen2.5-7b g7 B8 4K", ["-m", "qwen2.5-7b", "-b", "8", "-s", "4096"]),
    ("phi-3-mini MHA d96 B4 2K", ["-m", "phi-3-mini", "-b", "4", "-s", "2000"]),
    ("gemma-2-9b d256 B2 8K", ["-m", "gemma-2-9b", "-b", "2", "-s", "8192"]),
    ("mistral-large tp8 g12 B16 16K", ["-m", "mistral-large", "--tp", "8", "-b", "16", "-s", "16384"]),
    ("llama3-405b tp8 g16 B3 32K", ["-m", "llama3-405b", "--tp", "8", "-b", "3", "-s", "32768"]),
    ("llama3-405b tp8 B130 2K (2D)", ["-m", "llama3-405b", "--tp", "8", "-b", "130", "-s", "2048"]),
    ("qwen3-32b tp4 B1 100K", ["-m", "qwen3-32b", "--tp", "4", "-b", "1", "-s", "100000"]),
    ("gpt-oss-120b tp2 d64 B33 4K", ["-m", "gpt-oss-120b", "--tp", "2", "-b", "33", "-s", "4000"]),
    ("llama3-8b spec k3 B4 8K", ["-m", "llama3-8b", "-b", "4", "-s", "8192", "--num-speculative-tokens", "3",
                                 "--system", "vllm"]),
    ("llama3-8b batch-invariant B2 16K", ["-m", "llama3-8b", "-b", "2", "-s", "16384", "--batch-invariant"]),
    ("llama3-8b fp16 block32 eager B13", ["-m", "llama3-8b", "-b", "13", "-s", "3000", "--dtype", "float16",
                                          "--block-size", "32", "--no-cuda-graph"]),
    ("llama3-70b tp8 ragged 10", ["-m", "llama3-70b", "--tp", "8", "--seq-lens",
                                  "17,300,1024,5000,9999,20000,33,64,129,70000"]),
]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, args) in enumerate(CASES):
            path = os.path.join(tmp, f"{i}.json")
            t0 = time.time()
            # --kernels both: the upstream kernels and decodecalc's reference kernels, as recorded
            r = subprocess.run([sys.executable, "-m", "decodecalc", "verify", *args, "--kernels", "both", "-o", path],
                               capture_output=True, text=True)
            data = json.load(open(path)) if os.path.exists(path) else None
            ok = r.returncode == 0
            results.append({"case": name, "args": args, "exit_code": r.returncode, "verify": data,
                            "stderr": r.stderr[-2000:], "wall_s": round(time.time() - t0, 1)})
            tail = [ln for ln in r.stdout.splitlines() if "match" in ln or "predicted time" in ln]
            print(f"{'ok ' if ok else 'BAD'} {name:36s} rc={r.returncode} {' | '.join(tail)[:160]}", flush=True)
            if not ok:
                print(r.stderr[-600:], flush=True)
    with open(a.out, "w") as f:
        json.dump({"cases": results}, f, indent=1)
    return 0 if all(x["exit_code"] == 0 for x in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
