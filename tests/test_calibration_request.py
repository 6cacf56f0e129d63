"""calibrate's request, plan and runner without the CLI (issue 44, item 6): a CalibrationRequest refuses each option
conflict with the message the command prints, plan_for resolves what the options name, and the runner carries a plan
out through a UI a test can record, with the GPU half faked."""

from __future__ import annotations

import dataclasses
import gzip
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from decodecalc.commands.calibrate_run import CalibrationOutcome, StageProgress, run_calibration_plan, save_measurements
from decodecalc.errors import ConfigError, DecodecalcError
from decodecalc.reports.calibrate_request import (MAX_SAMPLE_STEPS, CalibrationRequest, TrafficOptions, plan_for,
                                                  times_backends)
from decodecalc.timemodel import packaged_profile
from decodecalc.timemodel.calibration_fit import DEFAULT_MAP_STEPS, MAX_FOLDS, MAX_MAP_STEPS, MIN_FOLDS
from helpers import modules_loaded_by

SAVED = Path(__file__).resolve().parent / "data" / "calibrate_h200_quick_rows.json"
CHAT = TrafficOptions(workload="chat")

# (options, the whole message): each conflict the command checked inline, in the words docs and tests quote
CONFLICTS = [
    (dict(quick=True, grid=True), "--quick, --thorough and --grid are three plans: choose one (three shapes, fifty, or "
                                  "the 75 of the grid)"),
    (dict(thorough=True, quick=True), "--quick, --thorough and --grid are three plans: choose one (three shapes, "
                                      "fifty, or the 75 of the grid)"),
    (dict(keep_physics=True, models=("llama3-8b",), from_scratch=True),
     "--keep-physics with --from-scratch, --quick, --thorough or --grid: --keep-physics fits nothing"),
    (dict(keep_physics=True, models=("llama3-8b",), grid=True),
     "--keep-physics with --from-scratch, --quick, --thorough or --grid: --keep-physics fits nothing"),
    (dict(keep_physics=True, models=("llama3-8b",), backends="fa3"),
     "--backends fa3 with --keep-physics: --keep-physics fits nothing"),
    (dict(from_measurements=(Path("m.json"),), backends="none"),
     "--backends none with --from-measurements: the saved timings say which backends were timed"),
    (dict(map_steps=MAX_MAP_STEPS + 1), f"--map-steps {MAX_MAP_STEPS + 1}: expected an integer in [0, {MAX_MAP_STEPS}]"),
    (dict(map_steps=-1), f"--map-steps -1: expected an integer in [0, {MAX_MAP_STEPS}]"),
    (dict(map_steps=4, quick=True), "--map-steps 4 with --quick: --quick fits no map of its own"),
    (dict(map_steps=4, keep_physics=True, models=("llama3-8b",)),
     "--map-steps 4 with --keep-physics: --keep-physics fits no map of its own"),
    (dict(map_steps=4, from_measurements=(Path("m.json"),)),
     "--map-steps 4 with --from-measurements: the saved timings say which steps were timed"),
    (dict(left_out_folds=MIN_FOLDS - 1),
     f"--left-out-folds {MIN_FOLDS - 1}: expected 0 or an integer in [{MIN_FOLDS}, {MAX_FOLDS}]"),
    (dict(left_out_folds=MAX_FOLDS + 1),
     f"--left-out-folds {MAX_FOLDS + 1}: expected 0 or an integer in [{MIN_FOLDS}, {MAX_FOLDS}]"),
    (dict(left_out_folds=3, keep_physics=True, models=("llama3-8b",)),
     "--left-out-folds 3 with --keep-physics: --keep-physics fits nothing"),
    (dict(keep_physics=True), "--keep-physics needs --model: it times only the models' own head layouts"),
    (dict(traffic=TrafficOptions(requests=Path("t.csv")), from_measurements=(Path("m.json"),)),
     "--requests with --from-measurements: the saved timings say which workload was sampled"),
    (dict(traffic=CHAT), "--workload needs exactly one --model (the model serving that traffic), got 0"),
    (dict(traffic=TrafficOptions(steps=Path("s.jsonl"), metrics="m.txt"), models=("a", "b")),
     "--steps needs exactly one --model (the model serving that traffic), got 2"),
    (dict(sample_steps=4, models=("llama3-8b",)),
     "--sample-steps applies to a workload (--requests, --steps, --workload or --metrics)"),
    (dict(sample_steps=0, models=("llama3-8b",), traffic=CHAT),
     f"--sample-steps 0: expected an integer in [1, {MAX_SAMPLE_STEPS}]"),
    (dict(sample_steps=MAX_SAMPLE_STEPS + 1, models=("llama3-8b",), traffic=CHAT),
     f"--sample-steps {MAX_SAMPLE_STEPS + 1}: expected an integer in [1, {MAX_SAMPLE_STEPS}]"),
    (dict(from_measurements=(Path("m.json"),), save_measurements=Path("again.json")),
     "--save-measurements with --from-measurements: the timings are already saved"),
    (dict(from_measurements=(Path("m.json"),), models=("qwen3-32b",)),
     "--model with --from-measurements: the saved timings say which layouts were timed"),
]


@pytest.mark.parametrize("options, message", CONFLICTS)
def test_each_conflict_is_refused_with_the_commands_message(options, message):
    with pytest.raises(ConfigError) as err:
        CalibrationRequest(**options)
    assert str(err.value) == message


def test_a_bad_backend_name_fails_first_among_the_backend_checks():
    with pytest.raises(ConfigError, match=r"--backends fa9: fa9; valid: auto, none"):
        CalibrationRequest(backends="fa9", keep_physics=True, models=("llama3-8b",))


def test_the_first_conflict_found_is_the_error():
    with pytest.raises(ConfigError, match="three plans"):  # the plans' conflict before --keep-physics's
        CalibrationRequest(quick=True, grid=True, keep_physics=True)


def test_a_replaced_option_is_checked_again():
    ok = CalibrationRequest(models=("llama3-8b",), traffic=CHAT)
    with pytest.raises(ConfigError, match="--workload needs exactly one --model"):
        dataclasses.replace(ok, models=())


@pytest.mark.parametrize("options", [
    {}, dict(quick=True), dict(grid=True, map_steps=0), dict(thorough=True, from_scratch=True),
    dict(keep_physics=True, models=("llama3-8b",), backends="none"),
    dict(from_measurements=(Path("a.json"), Path("b.json")), keep_physics=True),
    dict(from_measurements=(Path("a.json"),), from_scratch=True, left_out_folds=MAX_FOLDS),
    dict(models=("llama3-8b",), traffic=CHAT, sample_steps=MAX_SAMPLE_STEPS, keep_physics=True),
])
def test_compatible_options_make_a_request(options):
    req = CalibrationRequest(**options)
    assert all(getattr(req, k) == v for k, v in options.items())


def test_what_the_options_decide():
    assert [CalibrationRequest(**o).shapes for o in ({}, dict(quick=True), dict(thorough=True), dict(grid=True))] == [
        "default", "quick", "thorough", "grid"]
    assert CalibrationRequest(grid=True).map_steps_per_workload == DEFAULT_MAP_STEPS > 0
    assert CalibrationRequest(grid=True, map_steps=3).map_steps_per_workload == 3
    assert CalibrationRequest(map_steps=5).map_steps_per_workload == 5 and CalibrationRequest().map_steps_per_workload == 0
    assert CalibrationRequest().times_backends and not CalibrationRequest(quick=True).times_backends
    assert CalibrationRequest(quick=True, backends="auto").times_backends
    assert not CalibrationRequest(backends="none").times_backends
    assert not CalibrationRequest(from_measurements=(Path("m.json"),)).times_backends  # the saved timings say
    assert times_backends("fa3", quick=True, keep_physics=False) and not times_backends(None, quick=False,
                                                                                        keep_physics=True)


def test_the_plan_resolves_the_gpu_the_layouts_and_the_destination(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    plan = plan_for(CalibrationRequest(gpu="h100-sxm", models=("llama3-8b",), tp=8))
    # Llama-3-8B: 32 query heads, 8 KV heads of 128 -> 4 and 1 per rank at TP8
    assert plan.gpu.name == "h100-sxm" and plan.layouts == ((4, 1, 128),) and plan.workload is None
    assert plan.dest == tmp_path / "decodecalc" / "profiles" / "h100-sxm.yaml"
    assert plan.phases == ("Triton plan", "backends", "fit", "write")
    out = tmp_path / "p.yaml"
    assert plan_for(CalibrationRequest(output=out, quick=True)).dest == out


def test_a_workload_replaces_the_layouts_shapes_and_names_its_sampling():
    plan = plan_for(CalibrationRequest(models=("llama3-8b",), traffic=CHAT, grid=True, backends="none"))
    assert plan.layouts == () and plan.workload is not None
    assert (plan.workload.model, plan.workload.tp, plan.workload.traffic.source) == ("llama3-8b", 1, "chat")
    assert plan.workload.steps > 0 and plan.map_steps == DEFAULT_MAP_STEPS
    assert plan.phases == ("workload sample", "map steps", "Triton plan", "fit", "write")
    assert plan_for(CalibrationRequest(models=("llama3-8b",), traffic=CHAT, sample_steps=9)).workload.steps == 9


def test_a_refit_plans_no_gpu_phase():
    plan = plan_for(CalibrationRequest(from_measurements=(Path("m.json"),), grid=True))
    assert plan.phases == ("read measurements", "fit", "write") and plan.map_steps == 0


@pytest.mark.parametrize("model, says", [("deepseek-v3", "uses MLA"), ("no-such-model", "no-such-model")])
def test_a_model_calibrate_cannot_time_fails_in_the_plan(model, says):
    req = CalibrationRequest(models=(model,))  # the options agree; the model library decides
    with pytest.raises(DecodecalcError, match=says):  # (an unknown name is the library's UnknownNameError)
        plan_for(req)


def test_request_and_runner_import_no_presentation_library():
    code = "import decodecalc.reports.calibrate_request, decodecalc.commands.calibrate_run"
    assert modules_loaded_by(code, packages=("typer", "rich", "click", "torch")) == []


# ---- the runner, through a UI that records what it is told (the GPU half faked)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, ...]] = []

    def note(self, line: str) -> None:
        self.events.append(("note", line))

    @contextmanager
    def stage(self, stage: str) -> Iterator[StageProgress]:
        self.events.append(("open", stage))
        yield StageProgress(phase=lambda what: self.events.append(("phase", what)),
                            step=lambda done, total, what: self.events.append(("step", f"{done}/{total} {what}")),
                            fit=lambda line: self.events.append(("fit", line)))
        self.events.append(("close", stage))


@pytest.fixture
def fake_gpu(monkeypatch):
    """run_calibration hands its timings to ``measured`` and reports as the device's does, then "fits"."""
    from decodecalc.verify import backend_calibration, calibration

    seen: dict = {}

    def fake_run(gpu, *, measured, progress, fit_progress, **kw):
        seen.update(kw, gpu=gpu.name)
        progress(1, 2, "vllm 32:8")
        measured({"cases": [{"t_us": 5.0}], "pending": ["backends"], "elapsed": {"triton_s": 30.0}})
        measured({"cases": [{"t_us": 5.0}], "backend_cases": [], "elapsed": {"triton_s": 30.0, "backends_s": 90.0}})
        fit_progress("vllm_2d: 3 rows")
        return packaged_profile("h200"), []

    monkeypatch.setattr(calibration, "cuda_or_error", lambda: None)
    monkeypatch.setattr(calibration, "run_calibration", fake_run)
    monkeypatch.setattr(backend_calibration, "resolve_backends", lambda b: (["fa3"], {"flashinfer": "not here"}))
    return seen


def test_the_gpu_run_reports_in_order_saves_before_the_fit_and_writes_the_profile(tmp_path, fake_gpu):
    out, rows = tmp_path / "p.yaml", tmp_path / "m.json"
    ui = Recorder()
    got = run_calibration_plan(plan_for(CalibrationRequest(output=out, save_measurements=rows, models=("llama3-8b",))),
                               ui)
    assert isinstance(got, CalibrationOutcome) and got.dest == out and out.is_file()
    assert got.elapsed == {"triton_s": 30.0, "backends_s": 90.0} and got.took_s is not None and got.took_s >= 0
    assert fake_gpu["backends"] == ["fa3"] and fake_gpu["layouts"] == [(32, 8, 128)] and fake_gpu["gpu"] == "h200"
    assert ui.events == [
        ("note", "backends not timed (their families keep the starting profile's values, uncalibrated): "
                 "flashinfer: not here"),
        ("open", "timing"), ("step", "1/2 vllm 32:8"), ("phase", "fitting"), ("fit", "vllm_2d: 3 rows"),
        ("close", "timing")]  # "fitting" once: the pending save (before the backends) is no fit yet
    assert json.loads(rows.read_text())["gpu"] == "h200" and "pending" not in json.loads(rows.read_text())


def test_a_missing_gpu_fails_before_the_timing_opens(tmp_path, fake_gpu, monkeypatch):
    from decodecalc.verify import calibration

    def no_cuda() -> None:
        raise ConfigError("no CUDA device")

    monkeypatch.setattr(calibration, "cuda_or_error", no_cuda)
    ui = Recorder()
    with pytest.raises(ConfigError, match="no CUDA device"):
        run_calibration_plan(plan_for(CalibrationRequest(output=tmp_path / "p.yaml", quick=True)), ui)
    assert ui.events == [] and not (tmp_path / "p.yaml").exists()


def test_an_unwritable_destination_fails_before_any_stage(tmp_path, fake_gpu):
    ui = Recorder()
    with pytest.raises(ConfigError, match="--save-measurements"):
        run_calibration_plan(plan_for(CalibrationRequest(save_measurements=tmp_path / "no" / "m.json",
                                                         output=tmp_path / "p.yaml")), ui)
    assert ui.events == [] and fake_gpu == {}


def test_saved_timings_are_gzipped_by_their_name_and_byte_stable(tmp_path):
    data = {"gpu": "h200", "cases": [{"t_us": 1.5}]}
    for name in ("a.json.gz", "b.json.gz"):
        save_measurements(tmp_path / name, data)
    save_measurements(tmp_path / "c.json", data)
    assert json.loads(gzip.decompress((tmp_path / "a.json.gz").read_bytes())) == data
    assert (tmp_path / "a.json.gz").read_bytes() == (tmp_path / "b.json.gz").read_bytes()  # no timestamp inside
    assert json.loads((tmp_path / "c.json").read_text()) == data


def test_a_refit_reads_fits_and_writes_without_the_gpu(tmp_path):
    out = tmp_path / "p.yaml"
    ui = Recorder()
    got = run_calibration_plan(plan_for(CalibrationRequest(from_measurements=(SAVED,), output=out)), ui)
    n = len(json.loads(SAVED.read_text())["cases"])
    assert got.took_s is None and out.is_file() and got.profile.fit["rows"] == n
    assert ui.events[:3] == [("open", "refit"), ("phase", "reading the measurements"), ("phase", f"fitting {n} timings")]
    assert ui.events[-1] == ("close", "refit") and all(kind == "fit" for kind, _ in ui.events[3:-1])


def test_a_refit_of_timings_saved_before_the_backends_says_so(tmp_path):
    data = json.loads(SAVED.read_text())
    data["pending"] = ["backends"]
    path = tmp_path / "killed.json"
    path.write_text(json.dumps(data))
    ui = Recorder()
    run_calibration_plan(plan_for(CalibrationRequest(from_measurements=(path,), output=tmp_path / "p.yaml")), ui)
    notes = [line for kind, line in ui.events if kind == "note"]
    assert notes == [f"note: {path} was saved before the compiled backends ran (the run stopped there): fitting its "
                     "Triton timings alone"]
