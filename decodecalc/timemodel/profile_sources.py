"""Where a time profile comes from: an explicit file, the user's calibrated file, the packaged one (read from its
parsed copy when that matches the YAML), or the uncalibrated datasheet fallback; and writing one. The profile itself
(its parameters and their checks): :mod:`decodecalc.timemodel.profile`."""

from __future__ import annotations

import dataclasses
import functools
import os
from importlib import resources
from pathlib import Path
from typing import Any

from decodecalc.errors import ConfigError
from decodecalc.specs.gpus import GPUSpec, resolve_gpu
from decodecalc.timemodel.profile import TimeProfile, gpu_key, profile_from_mapping
from decodecalc.yamlio import load_yaml_file, safe_load


def load_profile_file(path: Path, *, expect_gpu: str | None = None) -> TimeProfile:
    data = load_yaml_file(path, "time profile")
    return profile_from_mapping(data, origin=str(path), expect_gpu=expect_gpu)


def dump_profile(profile: TimeProfile) -> str:
    import yaml

    header = ("# decodecalc time-model profile (see decodecalc/timemodel/__init__.py for what each number means)\n"
              "# units: seconds, bytes/s; max_programs_per_sm is resident programs per SM\n")
    # leaf collections (a residual point, an occupancy table) on one line each: the residual map has thousands
    return header + yaml.safe_dump(profile.to_mapping(), sort_keys=False, default_flow_style=None, width=120)


def user_profile_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "decodecalc" / "profiles"


def parsed_copy(yaml_text: str, data: Any) -> str:
    """The JSON a packaged profile's parsed copy holds: ``data`` (the YAML's mapping) and the SHA-256 of the YAML text
    it was parsed from (``tools/update_profile_cache.py`` writes it). ConfigError if JSON cannot hold ``data`` exactly
    (read back with :func:`_read_copy`)."""
    import json

    text = json.dumps({"yaml_sha256": _sha256(yaml_text), "data": data}, separators=(",", ":")) + "\n"
    if _read_copy(text).get("data") != data:
        raise ConfigError("this profile does not survive a round trip through JSON; keep the YAML alone")
    return text


def _int_keys(pairs: list[tuple[str, Any]]) -> dict[Any, Any]:
    # JSON has string keys only; a profile's integer keys (occupancy by head dim) are written as digits
    return {int(k) if k.isascii() and k.isdigit() else k: v for k, v in pairs}


def _read_copy(text: str) -> Any:
    import json

    return json.loads(text, object_pairs_hook=_int_keys)


def _sha256(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


def _packaged_mapping(key: str, folder: Any = None, *, use_copy: bool = True) -> Any:
    """The mapping of ``decodecalc/profiles/<key>.yaml``, None where there is none. The YAML is the source; its parsed
    copy ``<key>.json`` is read instead (unless not ``use_copy``) when it was parsed from exactly this text (its
    SHA-256) and holds a mapping, because the H200 profile's residual map takes 60 ms of CPU to parse as YAML and 2 ms
    as JSON (grid's start-up: benchmarks/bench_cli_startup.py)."""
    folder = folder or resources.files("decodecalc.profiles")
    ref = folder.joinpath(f"{key}.yaml")
    if not ref.is_file():
        return None
    text = ref.read_text()
    copy = folder.joinpath(f"{key}.json")
    if use_copy and copy.is_file():
        try:
            cached = _read_copy(copy.read_text())
        except ValueError:
            cached = None
        # a copy whose checksum matches but whose data is not a mapping (null, a list) was damaged after it was
        # written: the YAML is there, so it is read (a null here once made grid say the YAML "is missing")
        if isinstance(cached, dict) and cached.get("yaml_sha256") == _sha256(text) and isinstance(cached.get("data"),
                                                                                                  dict):
            return cached["data"]
    return safe_load(text)


@functools.cache
def packaged_profile(gpu_name: str) -> TimeProfile | None:
    key = gpu_key(gpu_name)
    origin = f"decodecalc/profiles/{key}.yaml (packaged)"
    try:
        data = _packaged_mapping(key)
    except (ModuleNotFoundError, FileNotFoundError):
        return None
    if data is None:
        return None
    try:
        return profile_from_mapping(data, origin=origin, expect_gpu=gpu_name)
    except ConfigError:
        # the parsed copy matched the YAML's checksum yet holds no valid profile (NaN or null numbers: edited or
        # damaged after tools/update_profile_cache.py wrote it): the YAML, the source, decides
        source = _packaged_mapping(key, use_copy=False)
        if source is None or source is data:
            raise
        return profile_from_mapping(source, origin=origin, expect_gpu=gpu_name)


def prior_profile(gpu: GPUSpec) -> TimeProfile:
    """What decodecalc knows of ``gpu`` before a user calibrates it: its packaged profile (calibrated by us), else the
    datasheet fallback (uncalibrated). ``calibrate`` starts from it, and a family a calibration does not fit keeps its
    values."""
    return packaged_profile(gpu.name) or datasheet_profile(gpu)


#: the GPU whose packaged, fitted profile the datasheet fallback scales to every other GPU
DATASHEET_SOURCE_GPU = "h200"


def datasheet_profile(gpu: GPUSpec) -> TimeProfile:
    """Uncalibrated fallback: the H200's fitted latencies, overheads and occupancies, this GPU's SM count,
    and its datasheet bandwidth scaled by the share of the datasheet the H200 achieves."""
    base = _builtin_h200()
    src = resolve_gpu(DATASHEET_SOURCE_GPU)
    bw_ratio = gpu.hbm_bandwidth_bytes_per_s / src.hbm_bandwidth_bytes_per_s
    scale = bw_ratio * src.num_sms / gpu.num_sms  # the datasheet bandwidth per SM, against the H200's
    fams = {k: dataclasses.replace(v, sm_bandwidth_bytes_per_s=v.sm_bandwidth_bytes_per_s * scale,
                                   hbm_bandwidth_bytes_per_s=v.hbm_bandwidth_bytes_per_s * bw_ratio)
            for k, v in base.families.items()}
    hbm = base.hbm_bandwidth_bytes_per_s * bw_ratio  # same achievable share
    return TimeProfile(gpu=gpu.name, num_sms=gpu.num_sms, launch_overhead_s=base.launch_overhead_s,
                       idle_program_s=base.idle_program_s, families=fams, calibrated=False,
                       hbm_bandwidth_bytes_per_s=hbm,
                       source=f"datasheet fallback: {gpu.name} SM count and bandwidth, H200 latencies (uncalibrated)")


def _builtin_h200() -> TimeProfile:
    prof = packaged_profile(DATASHEET_SOURCE_GPU)
    if prof is None:  # pragma: no cover - the wheel always ships it
        raise ConfigError("the packaged H200 time profile decodecalc/profiles/h200.yaml is missing")
    return prof


def calibration_of(gpu: GPUSpec) -> str | None:
    """Where ``gpu``'s calibrated time profile would come from (what :func:`resolve_profile` picks, without
    loading it): ``"user"`` (``decodecalc calibrate``'s file), ``"packaged"``, or None (the uncalibrated datasheet
    fallback)."""
    if (user_profile_dir() / f"{gpu_key(gpu.name)}.yaml").is_file():
        return "user"
    for name in (gpu.name, *getattr(gpu, "aliases", ())):
        try:
            if resources.files("decodecalc.profiles").joinpath(f"{gpu_key(name)}.yaml").is_file():
                return "packaged"
        except ModuleNotFoundError:  # pragma: no cover - the package always has the folder
            return None
    return None


def resolve_profile(gpu: GPUSpec, *, profile_path: Path | None = None) -> TimeProfile:
    """The profile for ``gpu`` (a GPUSpec): an explicit file, else the user's calibrated file,
    else the packaged one, else the uncalibrated datasheet fallback."""
    if profile_path is not None:
        return load_profile_file(Path(profile_path), expect_gpu=gpu.name)
    user = user_profile_dir() / f"{gpu_key(gpu.name)}.yaml"
    if user.is_file():
        try:
            return load_profile_file(user, expect_gpu=gpu.name)
        except ConfigError as exc:  # the user's own file breaks every command that times: say how to get out
            raise ConfigError(f"{exc} (your calibrated profile: remove {user}, or run `decodecalc calibrate` again, "
                              "to use the packaged one)") from None
    for name in (gpu.name, *getattr(gpu, "aliases", ())):
        prof = packaged_profile(name)
        if prof is not None:
            if prof.num_sms != gpu.num_sms:  # --sms override: same kernels, other chip size
                prof = dataclasses.replace(prof, num_sms=gpu.num_sms)
            return prof
    return datasheet_profile(gpu)
