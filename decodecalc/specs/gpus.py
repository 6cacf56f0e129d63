"""GPU table: one row per SKU, each with the source of its figures.

Units are SI: bytes, bytes/s, FLOP/s. Rows are data, not code paths: a launcher reads
``num_sms`` (CUs on AMD), ``compute_capability`` and ``vendor`` only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from decodecalc.errors import ConfigError, UnknownNameError


@dataclass(frozen=True, slots=True, kw_only=True)
class GPUSpec:
    name: str
    num_sms: int  # SMs (NVIDIA) or CUs (AMD)
    hbm_bandwidth_bytes_per_s: float
    bf16_dense_flops_per_s: float
    l2_bytes: int
    compute_capability: tuple[int, int] | None  # None on AMD
    vendor: str  # "nvidia" | "amd"
    memory_bytes: int = 0
    gfx_arch: str | None = None  # AMD only, e.g. "gfx942"
    source: str = ""
    aliases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.num_sms <= 0:
            raise ConfigError(f"GPU {self.name!r}: SM count must be positive, got {self.num_sms}")
        if self.hbm_bandwidth_bytes_per_s <= 0:
            raise ConfigError(f"GPU {self.name!r}: bandwidth must be positive, got {self.hbm_bandwidth_bytes_per_s}")

    @property
    def ridge_flop_per_byte(self) -> float:
        """Roofline ridge point I* = peak FLOP/s / peak bytes/s."""
        return self.bf16_dense_flops_per_s / self.hbm_bandwidth_bytes_per_s

    @property
    def is_rocm(self) -> bool:
        return self.vendor == "amd"


GB = 1e9
TB = 1e12
MiB = 1 << 20

# Filled in full by the GPU-table work; every row names its source.
GPUS: tuple[GPUSpec, ...] = (
    GPUSpec(
        name="h100-sxm", num_sms=132, hbm_bandwidth_bytes_per_s=3350 * GB, bf16_dense_flops_per_s=989e12,
        l2_bytes=50 * MiB, compute_capability=(9, 0), vendor="nvidia", memory_bytes=80 * 10**9,
        source="NVIDIA H100 datasheet (SXM5: 3.35 TB/s, 989 TFLOP/s dense BF16); 132 SMs per flash-attention#609",
        aliases=("h100",),
    ),
    GPUSpec(
        name="h200", num_sms=132, hbm_bandwidth_bytes_per_s=4800 * GB, bf16_dense_flops_per_s=989e12,
        l2_bytes=50 * MiB, compute_capability=(9, 0), vendor="nvidia", memory_bytes=141 * 10**9,
        source="NVIDIA H200 datasheet (SXM: 4.8 TB/s, 989 TFLOP/s dense BF16); 132 SMs measured on the lent H200",
        aliases=("h200-sxm",),
    ),
)


def gpu_table() -> dict[str, GPUSpec]:
    table: dict[str, GPUSpec] = {}
    for gpu in GPUS:
        table[gpu.name] = gpu
        for alias in gpu.aliases:
            table.setdefault(alias, gpu)
    return table


def resolve_gpu(
    name: str,
    *,
    sms: int | None = None,
    bandwidth_bytes_per_s: float | None = None,
) -> GPUSpec:
    """Look a GPU up by name or alias (case-insensitive) and apply the user's overrides."""
    table = gpu_table()
    gpu = table.get(name.lower())
    if gpu is None:
        raise UnknownNameError("GPU", name, [g.name for g in GPUS])
    changes: dict[str, object] = {}
    if sms is not None:
        if sms <= 0:
            raise ConfigError(f"--sms must be a positive SM count, got {sms}")
        changes["num_sms"] = sms
    if bandwidth_bytes_per_s is not None:
        if bandwidth_bytes_per_s <= 0:
            raise ConfigError(f"--bandwidth must be positive, got {bandwidth_bytes_per_s}")
        changes["hbm_bandwidth_bytes_per_s"] = bandwidth_bytes_per_s
    return dataclasses.replace(gpu, **changes) if changes else gpu
