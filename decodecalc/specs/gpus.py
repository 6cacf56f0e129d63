"""GPU table: one row per SKU, each with the source of its figures.

Units are SI: bytes, bytes/s, FLOP/s. Rows are data, not code paths: a launcher reads
``num_sms`` (CUs on AMD), ``compute_capability`` and ``vendor`` only.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from decodecalc.errors import ConfigError, UnknownNameError
from decodecalc.limits import MAX_SMS


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
        if self.vendor not in ("nvidia", "amd"):
            raise ConfigError(f"GPU {self.name!r}: vendor must be 'nvidia' or 'amd', got {self.vendor!r}")

    @property
    def arch(self) -> str | None:
        """The architecture kernels are compiled for on this GPU: ``sm_90`` (compute capability 9.0), ``gfx942``.
        Registers and shared memory per SM, hence a build's occupancy, are the same on every GPU of one."""
        if self.compute_capability is not None:
            major, minor = self.compute_capability
            return f"sm_{major}{minor}"
        return self.gfx_arch

    @property
    def ridge_flop_per_byte(self) -> float:
        """Roofline ridge point I* = peak FLOP/s / peak bytes/s."""
        return self.bf16_dense_flops_per_s / self.hbm_bandwidth_bytes_per_s

    @property
    def is_rocm(self) -> bool:
        return self.vendor == "amd"


GB = 1e9
GB_INT = 10**9  # memory sizes are exact integers
TB = 1e12
MiB = 1 << 20

# Figures: reference/peers-and-user-needs.md section 5 (vendor datasheets, whitepapers, deviceQuery).
# Bandwidth and FLOP/s are the datasheet peaks (dense, no sparsity; BF16 with FP32 accumulate);
# memory_bytes is the marketed capacity in SI bytes. L2 is the last level every SM shares.
GPUS: tuple[GPUSpec, ...] = (
    GPUSpec(
        name="h100-sxm", num_sms=132, hbm_bandwidth_bytes_per_s=3350 * GB, bf16_dense_flops_per_s=989e12,
        l2_bytes=50 * MiB, compute_capability=(9, 0), vendor="nvidia", memory_bytes=80 * GB_INT,
        source="NVIDIA H100 datasheet (SXM5: 3.35 TB/s, 989 TFLOP/s dense BF16); 132 SMs per flash-attention#609",
        aliases=("h100", "h100-sxm5", "h100-80gb", "h100-80gb-hbm3"),  # the last: nvidia-smi, torch
    ),
    GPUSpec(
        name="h100-pcie", num_sms=114, hbm_bandwidth_bytes_per_s=2000 * GB, bf16_dense_flops_per_s=756e12,
        l2_bytes=50 * MiB, compute_capability=(9, 0), vendor="nvidia", memory_bytes=80 * GB_INT,
        source="NVIDIA H100 datasheet (PCIe: 2.0 TB/s, 756 TFLOP/s dense BF16); 114 SMs per flash-attention#609",
    ),
    GPUSpec(
        name="h200", num_sms=132, hbm_bandwidth_bytes_per_s=4800 * GB, bf16_dense_flops_per_s=989e12,
        l2_bytes=50 * MiB, compute_capability=(9, 0), vendor="nvidia", memory_bytes=141 * GB_INT,
        source="NVIDIA H200 datasheet (SXM: 4.8 TB/s, 989 TFLOP/s dense BF16); 132 SMs measured on the lent H200",
        aliases=("h200-sxm",),
    ),
    GPUSpec(
        # L2 60 MiB is the commonly reported deviceQuery value, not from a datasheet: verify on hardware.
        name="h20", num_sms=78, hbm_bandwidth_bytes_per_s=4000 * GB, bf16_dense_flops_per_s=148e12,
        l2_bytes=60 * MiB, compute_capability=(9, 0), vendor="nvidia", memory_bytes=96 * GB_INT,
        source="NVIDIA H20 spec as widely quoted (96 GB, 4.0 TB/s, 148 TFLOP/s dense BF16; no public datasheet); "
        "78 SMs from deviceQuery reports (inclusionAI/cuLA#21); the 141 GB variant has 4.8 TB/s",
    ),
    GPUSpec(
        name="a100-40gb", num_sms=108, hbm_bandwidth_bytes_per_s=1555 * GB, bf16_dense_flops_per_s=312e12,
        l2_bytes=40 * MiB, compute_capability=(8, 0), vendor="nvidia", memory_bytes=40 * GB_INT,
        source="NVIDIA A100 datasheet (SXM 40GB: 1,555 GB/s, 312 TFLOP/s dense BF16); GA100 whitepaper (108 SMs, 40 MB L2)",
        aliases=("a100-40g", "a100-sxm-40gb", "a100-sxm4-40gb"),
    ),
    GPUSpec(
        name="a100-80gb", num_sms=108, hbm_bandwidth_bytes_per_s=2039 * GB, bf16_dense_flops_per_s=312e12,
        l2_bytes=40 * MiB, compute_capability=(8, 0), vendor="nvidia", memory_bytes=80 * GB_INT,
        source="NVIDIA A100 datasheet (SXM 80GB: 2,039 GB/s, 312 TFLOP/s dense BF16; PCIe 80GB: 1,935 GB/s); "
        "GA100 whitepaper (108 SMs, 40 MB L2)",
        aliases=("a100", "a100-80g", "a100-sxm-80gb", "a100-sxm4-80gb"),
    ),
    GPUSpec(
        name="l40s", num_sms=142, hbm_bandwidth_bytes_per_s=864 * GB, bf16_dense_flops_per_s=362e12,
        l2_bytes=96 * MiB, compute_capability=(8, 9), vendor="nvidia", memory_bytes=48 * GB_INT,
        source="NVIDIA L40S datasheet (864 GB/s GDDR6, 362 TFLOP/s dense BF16, 142 SMs); Ada whitepaper (96 MB L2)",
    ),
    GPUSpec(
        name="l4", num_sms=58, hbm_bandwidth_bytes_per_s=300 * GB, bf16_dense_flops_per_s=121e12,
        l2_bytes=48 * MiB, compute_capability=(8, 9), vendor="nvidia", memory_bytes=24 * GB_INT,
        source="NVIDIA L4 datasheet (300 GB/s GDDR6, 121 TFLOP/s dense BF16); Ada whitepaper (AD104, 58 SMs, 48 MB L2)",
    ),
    GPUSpec(
        # No NVIDIA datasheet exists for the AWS-only A10G; SM count and FLOP/s are community figures.
        name="a10g", num_sms=80, hbm_bandwidth_bytes_per_s=600 * GB, bf16_dense_flops_per_s=70e12,
        l2_bytes=6 * MiB, compute_capability=(8, 6), vendor="nvidia", memory_bytes=24 * GB_INT,
        source="AWS G5 A10G: 600 GB/s; ~70 TFLOP/s per llm-analysis a10g-pcie-24gb.json (unofficial); "
        "80 SMs from deviceQuery (verify); GA102 6 MB L2",
        aliases=("a10g-24gb",),
    ),
    GPUSpec(
        name="rtx-4090", num_sms=128, hbm_bandwidth_bytes_per_s=1008 * GB, bf16_dense_flops_per_s=165.2e12,
        l2_bytes=72 * MiB, compute_capability=(8, 9), vendor="nvidia", memory_bytes=24 * GB_INT,
        source="NVIDIA Ada Lovelace whitepaper appendix (RTX 4090: 128 SMs, 1,008 GB/s, 165.2 TFLOP/s BF16 with "
        "FP32 accumulate, 330.3 with FP16 accumulate, 72 MB L2)",
        aliases=("4090", "rtx4090", "geforce-rtx-4090"),
    ),
    GPUSpec(
        # Datasheet 8 TB/s; the driver reports a 7680-bit bus (7.68 TB/s, pytorch/ao#4002) and
        # aiconfigurator uses 7.7 TB/s. L2: 126.5 MiB reported by cudaGetDeviceProperties.
        name="b200", num_sms=148, hbm_bandwidth_bytes_per_s=8000 * GB, bf16_dense_flops_per_s=2250e12,
        l2_bytes=int(126.5 * MiB), compute_capability=(10, 0), vendor="nvidia", memory_bytes=180 * GB_INT,
        source="NVIDIA DGX/HGX B200 spec, per GPU (8 TB/s, 2,250 TFLOP/s dense BF16, 180 GB); 148 SMs and "
        "126.5 MiB L2 from device properties (0xSero/blackwell-gpu-wiki#2, pytorch/ao#4002)",
        aliases=("b200-sxm",),
    ),
    GPUSpec(
        # Some GB200 SKUs report more than 148 SMs: verify with torch.cuda.get_device_properties.
        name="gb200", num_sms=148, hbm_bandwidth_bytes_per_s=8000 * GB, bf16_dense_flops_per_s=2500e12,
        l2_bytes=int(126.5 * MiB), compute_capability=(10, 0), vendor="nvidia", memory_bytes=186 * GB_INT,
        source="NVIDIA GB200 NVL72 spec divided by 72 (8 TB/s, 2,500 TFLOP/s dense BF16, 186 GB); aiconfigurator "
        "gb200.yaml; SM count and L2 assumed equal to B200 (verify)",
        aliases=("gb200-nvl72",),
    ),
    GPUSpec(
        # l2_bytes is the L2 only (4 MiB per XCD x 8 XCDs); the 256 MiB Infinity Cache (MALL)
        # behind it is left out because it sits on the HBM side, not the CU side.
        name="mi300x", num_sms=304, hbm_bandwidth_bytes_per_s=5300 * GB, bf16_dense_flops_per_s=1307.4e12,
        l2_bytes=8 * 4 * MiB, compute_capability=None, vendor="amd", memory_bytes=192 * GB_INT, gfx_arch="gfx942",
        source="AMD Instinct MI300X datasheet (5.3 TB/s, 1,307.4 TFLOP/s dense BF16, 192 GB); ROCm GPU specifications "
        "(304 CUs = 38 per XCD x 8, 4 MB L2 per XCD, 256 MB Infinity Cache)",
    ),
    GPUSpec(
        name="mi325x", num_sms=304, hbm_bandwidth_bytes_per_s=6000 * GB, bf16_dense_flops_per_s=1307.4e12,
        l2_bytes=8 * 4 * MiB, compute_capability=None, vendor="amd", memory_bytes=256 * GB_INT, gfx_arch="gfx942",
        source="AMD Instinct MI325X datasheet (6.0 TB/s, 1,307.4 TFLOP/s dense BF16, 256 GB); ROCm GPU specifications "
        "(304 CUs, 4 MB L2 per XCD x 8; 256 MB Infinity Cache not counted)",
    ),
    GPUSpec(
        name="mi355x", num_sms=256, hbm_bandwidth_bytes_per_s=8000 * GB, bf16_dense_flops_per_s=2516.6e12,
        l2_bytes=8 * 4 * MiB, compute_capability=None, vendor="amd", memory_bytes=288 * GB_INT, gfx_arch="gfx950",
        source="AMD Instinct MI355X datasheet (8.0 TB/s, 2,516.6 TFLOP/s dense BF16, 288 GB); ROCm GPU specifications "
        "(256 CUs = 32 per XCD x 8, 4 MB L2 per XCD; 256 MB Infinity Cache not counted); aiter#5212",
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
    # "NVIDIA H100_SXM", "h100 sxm" and "h100-sxm" name the same row
    # (nvidia-smi and torch.cuda.get_device_name write "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB")
    key = "-".join(name.strip().lower().replace("_", "-").split())
    while "--" in key:
        key = key.replace("--", "-")
    for vendor_prefix in ("nvidia-", "amd-instinct-", "amd-"):
        key = key.removeprefix(vendor_prefix)
    gpu = table.get(key)
    if gpu is None:
        raise UnknownNameError("GPU", name, [g.name for g in GPUS])
    changes: dict[str, Any] = {}
    if sms is not None:
        if sms <= 0:
            raise ConfigError(f"--sms must be a positive SM count, got {sms}")
        if sms > MAX_SMS:
            raise ConfigError(f"--sms {sms} is over the supported {MAX_SMS:,}")
        changes["num_sms"] = sms
    if bandwidth_bytes_per_s is not None:
        if not math.isfinite(bandwidth_bytes_per_s) or bandwidth_bytes_per_s <= 0:
            raise ConfigError(f"--bandwidth must be a positive finite number of bytes/s, got {bandwidth_bytes_per_s}")
        changes["hbm_bandwidth_bytes_per_s"] = bandwidth_bytes_per_s
    return dataclasses.replace(gpu, **changes) if changes else gpu
