"""The one table of backends (launchers/registry.py BACKEND_SPECS): everything that lists backends reads it, and every
entry is complete where it claims to be (a time model has its work function, a profiled backend its install hint, a
new family a known family to start from)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from decodecalc.cli import app
from decodecalc.launchers.names import Backend, Engine
from decodecalc.launchers.registry import BACKEND_SPECS, POLICY_NAMES, PROFILED_BACKENDS, TIMED_BACKENDS
from decodecalc.timemodel import backends as tb
from decodecalc.timemodel.domain import BLOCKLESS_KERNELS
from decodecalc.timemodel.profile import FAMILIES, FAMILY_FALLBACKS, KERNEL_FAMILIES


def test_every_backend_is_registered_once_under_its_cli_name():
    assert set(BACKEND_SPECS) == set(Backend)
    assert POLICY_NAMES == tuple(b.value for b in BACKEND_SPECS)


def test_every_timed_backend_has_its_work_function_and_families():
    for b in TIMED_BACKENDS:
        assert b in tb.WORK, b
        assert set(BACKEND_SPECS[b].families) <= set(FAMILIES), b
        assert KERNEL_FAMILIES[b.value] == BACKEND_SPECS[b].families
    assert tb.BACKEND_KERNELS == tuple(b.value for b in TIMED_BACKENDS)


def test_new_families_start_from_known_ones():
    for spec in BACKEND_SPECS.values():
        for new, old in spec.family_fallbacks:
            assert new in spec.families and old in FAMILIES and FAMILY_FALLBACKS[new] == old


def test_profiled_backends_say_what_to_install_and_what_to_capture():
    from decodecalc.commands.verify import PROFILED
    from decodecalc.verify.profiler import BACKENDS, ROLES

    assert PROFILED == tuple(BACKENDS) == tuple(b.value for b in PROFILED_BACKENDS)
    for b in PROFILED_BACKENDS:
        assert BACKEND_SPECS[b].install and "main" in ROLES[b.value]


def test_block_size_rule_and_engine_uses_come_from_the_table():
    assert BLOCKLESS_KERNELS == {s.name for s in BACKEND_SPECS.values() if s.blockless}
    from decodecalc.reports.tune_backends import levers

    names = {(lv.engine, lv.name) for lv in levers(["vllm", "sglang", "trtllm"])}
    assert (Engine.VLLM, "FLASHINFER") in names and (Engine.SGLANG, "trtllm_mha") in names
    assert (Engine.TRTLLM, "xqa") in names
    assert not any(n == "FLASHMLA" for _, n in names)  # an MLA backend is no lever for an MHA / GQA model


def test_tune_on_an_mla_model_compares_its_backends_without_a_traceback():
    r = CliRunner().invoke(app, ["tune", "-w", "chat", "-m", "deepseek-v3", "--tp", "8", "--heuristics", "none",
                                 "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert set(data["skipped"]) == {"vllm", "sglang"}
    assert data["default_backends"]["vllm"]["selection"]["name"] == "FLASH_ATTN_MLA"
    timed = {b["backend"]: b for b in data["backends"] if "total_s" in b}
    assert "FlashMLA" in timed
