"""Write decodecalc/data/calibration_grid.json: ``calibrate --grid``'s plan, a quarter of the shapes behind the shipped
H200 profile (benchmarks/fit_timemodel.py's shape timings, drawn by a stable hash of the shape), each at the static
launches that shape was timed under (vLLM 2D and 3D at 2-128 segments, SGLang at 1-64 splits; the engines' default
and adaptive launches and decodecalc's reference kernels left out: calibrate times static launches).

    python -m benchmarks.make_calibration_grid

BENCHMARKS.md ("Physics or map?") measured calibrate's cold recipe on this plan's shipped timings.
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.fit_timemodel import in_fraction, shipped_data, static

ROOT = Path(__file__).resolve().parents[1]

OUT = ROOT / "decodecalc" / "data" / "calibration_grid.json"
FRACTION = 0.25


def grid() -> list[dict]:
    ms, _ = shipped_data()
    shapes: dict[str, dict] = {}
    for m in ms:
        if not in_fraction(m.shape.key, FRACTION) or not static(m.variant):
            continue
        s = m.shape
        e = shapes.setdefault(s.key, {"heads": [s.num_heads, s.num_kv_heads, s.head_size], "seq_lens": list(s.seq_lens),
                                      "variants": []})
        if m.variant not in e["variants"]:
            e["variants"].append(m.variant)
    return [shapes[k] for k in sorted(shapes)]


def main() -> int:
    g = grid()
    doc = {"source": f"benchmarks/make_calibration_grid.py: {FRACTION:.0%} of the shipped H200 profile's shapes (stable hash), "
                     "their static launches", "shapes": g}
    OUT.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"{len(g)} shapes, {sum(len(e['variants']) for e in g)} timings -> {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
