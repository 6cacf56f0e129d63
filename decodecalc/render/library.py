"""`models` and `gpus`: the model library and the GPU table, fitting 80 columns."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from decodecalc.specs.gpus import GPUSpec
    from decodecalc.specs.models import ModelConfig


def print_models(console: Console, models: Iterable[ModelConfig]) -> None:
    ms = sorted(models, key=lambda m: m.name)
    t = Table(title=f"{len(ms)} models", box=box.SIMPLE_HEAD, pad_edge=False)
    for col, right in (("id", False), ("layers", True), ("heads q/kv", True), ("head dim", True),
                       ("attention", False), ("window", True), ("dtype", False)):
        t.add_column(col, justify="right" if right else "left", overflow="fold", no_wrap=col == "id")  # ids are copied
    for m in ms:
        head = f"{m.head_dim_k}/{m.head_dim_v}" if m.is_mla else str(m.head_dim)
        t.add_row(m.name, str(m.num_layers), f"{m.num_attention_heads}/{m.num_key_value_heads}", head, m.attention,
                  str(m.sliding_window or "-"), m.dtype)
    console.print(t)


def print_gpus(console: Console, gpus: Iterable[GPUSpec]) -> None:
    gs = list(gpus)
    t = Table(title=f"{len(gs)} GPUs (GB = 1e9 B; sources below)", box=box.SIMPLE_HEAD, pad_edge=False)
    from decodecalc.timemodel.profile_sources import calibration_of

    for col in ("name", "SMs/CUs", "HBM GB/s", "bf16 TFLOP/s", "L2 MB", "cc / arch", "time", "src"):
        t.add_column(col, justify="left" if col in ("name", "cc / arch", "time") else "right", overflow="fold")
    for i, g in enumerate(gs, 1):
        cc = ".".join(map(str, g.compute_capability)) if g.compute_capability else (g.gfx_arch or "-")
        t.add_row(g.name, str(g.num_sms), f"{g.hbm_bandwidth_bytes_per_s / 1e9:,.0f}",
                  f"{g.bf16_dense_flops_per_s / 1e12:,.0f}", f"{g.l2_bytes / 1e6:.0f}", cc,
                  {"packaged": "cal.", "user": "yours"}.get(calibration_of(g) or "", "-"), f"[{i}]")
    console.print(t)
    console.print(Text("time: the time model's profile. cal.: calibrated on that GPU and shipped; yours: your own "
                       "`decodecalc calibrate`; -: the datasheet fallback, every predicted time marked uncalibrated"))
    console.print("Sources:")
    for i, g in enumerate(gs, 1):
        line = Text(f"[{i}] {g.name}: {g.source}")
        console.print(line)
