"""The shipped H200 profile rebuilds from the repository alone (issue 44): ``python -m benchmarks.fit_timemodel --check``.

benchmarks/fit_timemodel.py owns the Triton families, the GPU-wide numbers, the residual map and their scores in
decodecalc/profiles/h200.yaml. Its rebuild reads only committed files (the development grid, the other shape timings,
the workload steps and the fit's record of its held-out split and physics), builds the residual map and rescores
without the optimiser, and must write the shipped file byte for byte. The other scripts' parts of the file (the
backends' families, the expected error, the domains, the in-graph costs) are kept as they are, not clobbered.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

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
