"""tune's candidate settings as typed records (issue 44, item 4): VllmCandidate and SglangCandidate in place of dicts
keyed by upstream flag names; the JSON keeps those names through to_dict()."""

from __future__ import annotations

import dataclasses

import pytest

import decodecalc
from decodecalc.launchers.sglang_triton import SglangSettings
from decodecalc.launchers.vllm_triton_backend import VllmSettings
from decodecalc.reports.tune_space import SglangCandidate, VllmCandidate, candidate_of

WORKLOAD = "mix:prompt=3000,output=120,steps=60"


def test_the_json_names_are_the_upstream_constants_and_flags():
    assert VllmCandidate(segments=32, min_grid=256).to_dict() == {"NUM_PAR_SOFTMAX_SEGMENTS": 32,
                                                                  "MIN_LAUNCH_GRID_SIZE_2D": 256}
    assert SglangCandidate(max_kv_splits=16, static=True).to_dict() == {"triton_attention_num_kv_splits": 16,
                                                                        "static_kv_splits": True}


@pytest.mark.parametrize("cand", [VllmCandidate(segments=64, min_grid=0), VllmCandidate(segments=2, min_grid=8192),
                                  SglangCandidate(max_kv_splits=1, static=False),
                                  SglangCandidate(max_kv_splits=4096, static=True)])
def test_a_candidate_round_trips_through_its_json_and_is_a_value(cand):
    back = candidate_of(cand.engine, cand.to_dict())
    assert back == cand and hash(back) == hash(cand) and back is not cand
    assert candidate_of(cand.engine, cand) is cand
    with pytest.raises(dataclasses.FrozenInstanceError):
        cand.static = True  # type: ignore[union-attr,misc]
    other = "sglang" if cand.engine == "vllm" else "vllm"
    with pytest.raises(ValueError, match=f"a {cand.engine} setting given for {other}"):
        candidate_of(other, cand)


def test_records_are_keyword_only():
    with pytest.raises(TypeError):
        VllmCandidate(32, 256)  # type: ignore[misc]


def test_a_candidate_sets_only_its_engines_knobs():
    base = VllmSettings()
    got = VllmCandidate(segments=128, min_grid=512).settings(base)
    assert (got.num_par_softmax_segments, got.min_launch_grid_size_2d) == (128, 512)
    assert dataclasses.replace(got, num_par_softmax_segments=base.num_par_softmax_segments,
                               min_launch_grid_size_2d=base.min_launch_grid_size_2d) == base
    sbase = SglangSettings()
    sgot = SglangCandidate(max_kv_splits=32, static=True).settings(sbase)
    assert (sgot.max_kv_splits, sgot.static_kv_splits) == (32, True)
    assert dataclasses.replace(sgot, max_kv_splits=sbase.max_kv_splits, static_kv_splits=sbase.static_kv_splits) == sbase


def test_a_tune_result_holds_records_and_prints_their_dicts():
    r = decodecalc.tune(workload=WORKLOAD, heuristics="none")
    data = r.to_dict()
    for engine, kind, keys in (("vllm", VllmCandidate, {"NUM_PAR_SOFTMAX_SEGMENTS", "MIN_LAUNCH_GRID_SIZE_2D"}),
                               ("sglang", SglangCandidate, {"triton_attention_num_kv_splits", "static_kv_splits"})):
        e = r.engines[engine]
        assert all(type(c.setting) is kind for c in e.candidates)
        assert len({c.setting for c in e.candidates}) == len(e.candidates)  # each setting searched once
        shown = data["engines"][engine]
        assert set(shown["default"]["setting"]) == keys and shown["default"]["setting"] == e.default.setting.to_dict()
        assert shown["best"]["setting"] == e.best.setting.to_dict()
