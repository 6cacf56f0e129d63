"""Issue 43, "Bad input": time profiles whose numbers overflow the model, and a packaged profile's damaged parsed
copy. Each gives one ``Error:`` line (or the packaged YAML's times), never a traceback."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from decodecalc.errors import ConfigError
from decodecalc.timemodel import profile_sources
from decodecalc.timemodel.profile import BLEND_POWER_RANGE, profile_from_mapping
from test_hostile_inputs import H200_PROFILE, run


def _with_blend_power(p: float) -> str:
    data = yaml.safe_load(H200_PROFILE.read_text())
    data["families"]["vllm_2d"]["blend_power"] = p
    return yaml.safe_dump(data)


@pytest.mark.parametrize("power", [1e-300, 1e-3, 100.0])
def test_a_blend_power_that_overflows_is_refused_with_its_range(tmp_path: Path, power: float) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(_with_blend_power(power))
    lo, hi = BLEND_POWER_RANGE
    expected = f"between {lo:g} and {hi:g}"
    for args in (["recommend", "--profile", str(path)], ["tune", "-w", "chat", "--profile", str(path)]):
        r = run(args)
        assert r.exit_code == 1 and "blend_power" in r.stderr and expected in r.stderr, r.stderr
    # the user's installed profile: recommend and tune refuse it, grid and compare say why there is no time
    cfg = tmp_path / "cfg"
    (cfg / "decodecalc" / "profiles").mkdir(parents=True)
    (cfg / "decodecalc" / "profiles" / "h200.yaml").write_text(path.read_text())
    env = {"XDG_CONFIG_HOME": str(cfg), "COLUMNS": "250"}
    for args in (["recommend"], ["tune", "-w", "chat"]):
        r = run(args, env=env)
        assert r.exit_code == 1 and "blend_power" in r.stderr, r.stderr
    for cmd in ("grid", "compare"):
        r = run([cmd], env=env)
        flat = " ".join(r.stdout.split())
        assert r.exit_code == 0 and "no predicted time" in flat and "blend_power" in flat, flat[-400:]


def test_blend_powers_in_range_load() -> None:
    lo, hi = BLEND_POWER_RANGE
    for p in (0.0, lo, 0.2, 4.0, hi):
        prof = profile_from_mapping(yaml.safe_load(_with_blend_power(p)), origin="x")
        assert prof.families["vllm_2d"].blend_power == p


def test_an_overflow_in_the_time_model_is_a_config_error() -> None:
    """Past the loader (a profile built in code), the scalar path's overflow is still a ConfigError."""
    from decodecalc.timemodel.predict import IterationCost

    cost = IterationCost(latency_s=1e-6, bytes_per_iter=1e4, hbm_bytes_per_iter=1e4, sm_bandwidth=1e10,
                         hbm_bandwidth=1e12, blend_power=1e-300, saturated=4, occupancy=4, num_sms=132,
                         program_overhead_s=1e-6, idle_program_s=0.0)
    with pytest.raises(ConfigError, match="blend_power"):
        cost.t_it(2)


# ---------------------------------------------------------------------------------------------
# the packaged profile's parsed JSON copy, damaged with a matching checksum


def _packaged_folder(tmp_path: Path, data: object) -> Path:
    folder = tmp_path / "profiles"
    folder.mkdir()
    text = H200_PROFILE.read_text()
    (folder / "h200.yaml").write_text(text)
    (folder / "h200.json").write_text(json.dumps({"yaml_sha256": profile_sources._sha256(text), "data": data}))
    return folder


def _nan_data() -> dict:
    data = yaml.safe_load(H200_PROFILE.read_text())
    data["launch_overhead_s"] = math.nan
    return data


@pytest.mark.parametrize("what", ["null", "list", "nan"])
def test_a_damaged_parsed_copy_falls_back_to_the_yaml(tmp_path: Path, monkeypatch, what: str) -> None:
    data = {"null": None, "list": [1, 2], "nan": _nan_data()}[what]
    folder = _packaged_folder(tmp_path, data)
    monkeypatch.setattr(profile_sources.resources, "files", lambda _pkg: folder)
    profile_sources.packaged_profile.cache_clear()
    try:
        r = run(["grid"], env={"COLUMNS": "250"})
        flat = " ".join(r.stdout.split())
        assert r.exit_code == 0 and "is missing" not in flat + r.stderr, flat[-400:]
        assert "no predicted time" not in flat, flat[-400:]
        prof = profile_sources.packaged_profile("h200")
        assert prof is not None and math.isfinite(prof.launch_overhead_s)
    finally:
        profile_sources.packaged_profile.cache_clear()
