"""The shipped H200 profile rebuilds from the repository alone (issue 44): ``python -m benchmarks.fit_timemodel --check``
(the Triton part) and ``python -m benchmarks.fit_backends_h200 --check`` (the backends' part); ``python -m
benchmarks.rebuild_profile --check`` runs both.

benchmarks/fit_timemodel.py owns the Triton families, the GPU-wide numbers, the residual map and their scores in
decodecalc/profiles/h200.yaml. Its rebuild reads only committed files (the development grid, the other shape timings,
the workload steps and the fit's record of its held-out split and physics), builds the residual map and rescores
without the optimiser, and must write the shipped file byte for byte. The other scripts' parts of the file (the
backends' families, the expected error, the domains, the in-graph costs) are kept as they are, not clobbered.

benchmarks/fit_backends_h200.py owns the backends' bf16 families and fit.backend_families, fit_backends_fp8_h200.py
their fp8 families and fit.backend_fp8_families. Their rebuild replays, with the optimiser, the chain of fits that
shipped them (fit_backends_h200's docstring): FlashMLA and FA2 from the neutral start, FlashInfer and FA3 from the
committed start of commit be2be5f, FA3's tile overhead chosen, flashinfer_decode refitted, the fp8 families fitted
from those; the file and both records must come out byte for byte, from a copy whose backend part is scrambled.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import yaml

from benchmarks import fit_backends_fp8_h200 as fp8
from benchmarks import fit_backends_h200 as fb
from benchmarks import fit_timemodel as ft

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory) -> tuple[Path, dict, object]:
    """The rebuild (about 20 s), and what it wrote: the record and the all-data profile with its new map."""
    res, final = ft.rebuilt_fit()
    return ft.write_profile(res, final, tmp_path_factory.mktemp("rebuild") / "h200.yaml"), res, final


def test_the_data_is_in_the_repository():
    assert ft.DEV_GRID.is_file() and ft.DEV_GRID.stat().st_size < 200_000, "the committed grid stays small"
    assert all(p.resolve().is_relative_to(ROOT) for p in [*ft.shape_files(), *ft.step_files(), ft.RECORD])
    ms, _ = ft.load([ft.DEV_GRID])
    assert len({m.shape.key for m in ms}) == 40  # the development grid's 40 shapes


def test_the_shipped_profile_is_rebuilt_byte_for_byte(rebuilt):
    dest, _, _ = rebuilt
    assert dest.read_text() == ft.SHIPPED_PROFILE.read_text(), "run python -m benchmarks.fit_timemodel --check"


def test_the_rebuild_writes_its_own_part_and_keeps_the_rest(rebuilt, tmp_path):
    """A change to the fitted physics shows in the file (the check can fail); every other script's part stays."""
    _, res, final = rebuilt
    moved = dataclasses.replace(final, launch_overhead_s=final.launch_overhead_s * 1.5,
                                families={**final.families, "vllm_2d": dataclasses.replace(
                                    final.families["vllm_2d"], latency_s=final.families["vllm_2d"].latency_s * 2)})
    out = ft.write_profile(res, moved, tmp_path / "h200.yaml")
    got, shipped = (yaml.safe_load(p.read_text()) for p in (out, ft.SHIPPED_PROFILE))
    assert got["launch_overhead_s"] == pytest.approx(1.5 * shipped["launch_overhead_s"])
    assert got["families"]["vllm_2d"]["latency_s"] == pytest.approx(2 * shipped["families"]["vllm_2d"]["latency_s"])
    assert list(got["families"]) == list(shipped["families"])  # no family the loader filled in, the file's order
    for fam, params in shipped["families"].items():
        if not fam.startswith(ft.TRITON_PREFIXES) or fam in ft.FITTED_ELSEWHERE:
            assert got["families"][fam] == params, fam
    assert {k: v for k, v in got["fit"].items() if k not in ft.OWN_FIT_KEYS} == \
        {k: v for k, v in shipped["fit"].items() if k not in ft.OWN_FIT_KEYS}
    assert got["in_graph"] == shipped["in_graph"] and got["residuals"] == shipped["residuals"]


BACKEND_FAMILIES = (*fb.NEW_FAMILIES, *(f for fams in fp8.FP8_FAMILIES.values() for f in fams))


def scrambled(dest: Path) -> Path:
    """``dest`` with every backend family's numbers and scores wrong and a backend family wrongly listed uncalibrated:
    a rebuild that read any of them back would not write the shipped bytes."""
    from tools.update_profile_cache import as_written, write

    prof = as_written(dest)
    fams = {f: dataclasses.replace(p, latency_s=p.latency_s * 3, hbm_bandwidth_bytes_per_s=p.hbm_bandwidth_bytes_per_s / 2,
                                   tile_overhead_s=0.0) if f in BACKEND_FAMILIES else p for f, p in prof.families.items()}
    fit = copy.deepcopy(prof.fit)
    for rec in (fit["backend_families"]["heldout"], fit["backend_fp8_families"]["unseen"]):
        for k in rec:
            rec[k] = {**rec[k], "median_abs_err": 0.5}
    fit["uncalibrated_families"] = sorted({*fit["uncalibrated_families"], "flashinfer_tc", "fa3_fwd_fp8_wide"})
    return write(dest, dataclasses.replace(prof, families=fams, fit=fit))


@pytest.fixture(scope="module")
def backends_rebuilt(tmp_path_factory) -> Path:
    """The backends' chain replayed into a scrambled copy of the shipped profile, with both records (about 25 s)."""
    out = tmp_path_factory.mktemp("backends")
    dest = scrambled(Path(shutil.copy(fb.PROFILE, out / fb.PROFILE.name)))
    assert dest.read_text() != fb.PROFILE.read_text()
    fb.rebuild(dest, records=out)
    return out


def test_the_backend_families_are_rebuilt_byte_for_byte(backends_rebuilt):
    assert (backends_rebuilt / fb.PROFILE.name).read_text() == fb.PROFILE.read_text(), \
        "run python -m benchmarks.fit_backends_h200 --check"
    for rec in (fb.OUT, fp8.OUT):  # the records say what ships, from the same run
        assert (backends_rebuilt / rec.name).read_text() == rec.read_text(), \
            f"{rec.name} is stale: python -m benchmarks.fit_backends_h200 --rebuild"


def test_the_chain_starts_from_committed_data_not_from_its_answer(backends_rebuilt):
    """The start holds FlashInfer's and FA3's families only, as the be2be5f fit left them; the chain moves
    flashinfer_decode off it (the refit) and sets FA3's tile overhead, so the start is not the shipped numbers."""
    start = fb.start_families()
    assert set(start) == {"flashinfer_decode", "flashinfer_tc", "flashinfer_merge", "fa3_fwd", "fa3_combine"}
    assert json.loads(fb.START.read_text())["commit"].startswith("be2be5f")
    shipped = yaml.safe_load(fb.PROFILE.read_text())["families"]
    rebuilt = json.loads((backends_rebuilt / fb.OUT.name).read_text())
    assert start["flashinfer_decode"].as_dict() != shipped["flashinfer_decode"]
    assert start["flashinfer_tc"].as_dict() == shipped["flashinfer_tc"]  # held by every later step
    assert not start["fa3_fwd"].tile_overhead_s and shipped["fa3_fwd"]["tile_overhead_s"] == \
        rebuilt["chain"]["fa3_tile_overhead_s"]["chosen"] > 0
    assert rebuilt["chain"]["neutral_start"] == sorted(f for f in fb.NEW_FAMILIES if f not in start)


def test_a_rebuild_reads_no_backend_family_of_its_base():
    """What the rebuild fits under: the GPU-wide numbers and the Triton families, every backend family dropped."""
    base = fb.bf16_base(yaml_profile())
    assert not set(base.families) & set(BACKEND_FAMILIES)
    assert {f for f in yaml_profile().families if f.startswith(ft.TRITON_PREFIXES)} <= set(base.families)


def yaml_profile():  # type: ignore[no-untyped-def]
    from decodecalc.timemodel import load_profile_file

    return load_profile_file(fb.PROFILE)
