"""The settings tune searches: each engine's whole legal range, and every candidate's per-step times.

vLLM (0.33.0): ``NUM_PAR_SOFTMAX_SEGMENTS`` takes the powers of two its kernels compile
(:func:`~decodecalc.launchers.vllm_triton_backend.max_num_par_softmax_segments`: 8,192 at head size 128), up to the
first count at which every segment of the workload's longest sequence holds one tile (more only adds programs that
exit at once); ``MIN_LAUNCH_GRID_SIZE_2D`` matters only through ``seq_threshold_3D = MIN_LAUNCH_GRID_SIZE_2D //
num_kv_heads`` (snapped to a CUDA-graph capture size), so it takes 0 and ``num_kv_heads`` times every power of two up
to ``max_num_seqs`` (and the default). A candidate's step runs the 3D kernel with its segments where the engine's gate
sends it (:func:`~decodecalc.launchers.vllm_unified.plan_vllm`, per batch), else the 2D kernel: so every candidate is
composed from the 2D launch and one 3D launch per segment count, each timed once over the workload.

SGLang (0.5.23): ``--triton-attention-num-kv-splits`` takes any count up to
:data:`~decodecalc.launchers.sglang_triton.MAX_KV_SPLITS_GRID_Z`; tune tries the powers of two (and the default) up to
the first count at which the longest sequence has one 32-key block per split, adaptive and static.

Each candidate carries the split-K scratch it allocates; one the GPU's memory cannot hold is left out, and the result
says where the best candidate sits on the edge of the range and why the range ends there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Union

from decodecalc.derived import cdiv, next_power_of_2
from decodecalc.errors import UnsupportedError
from decodecalc.launchers import sglang_triton as sg
from decodecalc.launchers import vllm_triton_backend as vtb
from decodecalc.launchers import vllm_unified as vu

if TYPE_CHECKING:
    from decodecalc.batch.arrays import FloatArray


@dataclass(frozen=True, kw_only=True)
class VllmCandidate:
    """One vLLM setting tune tries: the two constants of vLLM 0.33.0's ``triton_attn.py`` (L58-59)."""

    engine: ClassVar[str] = "vllm"
    segments: int  # NUM_PAR_SOFTMAX_SEGMENTS: the 3D kernel's KV segments
    min_grid: int  # MIN_LAUNCH_GRID_SIZE_2D: seq_threshold_3D = min_grid // num_kv_heads

    @property
    def knob(self) -> int:
        """The value of the knob whose range is searched (:attr:`EngineSpace.knob`)."""
        return self.segments

    def key(self) -> tuple[int, ...]:
        """Smaller is fewer programs: the last tie-break between candidates."""
        return self.segments, self.min_grid

    def to_dict(self) -> dict[str, Any]:
        """The setting as the JSON shows it, keyed by the upstream constants' names."""
        return {"NUM_PAR_SOFTMAX_SEGMENTS": self.segments, "MIN_LAUNCH_GRID_SIZE_2D": self.min_grid}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> VllmCandidate:
        return cls(segments=int(d["NUM_PAR_SOFTMAX_SEGMENTS"]), min_grid=int(d["MIN_LAUNCH_GRID_SIZE_2D"]))

    def settings(self, base: vtb.VllmSettings) -> vtb.VllmSettings:
        """``base`` (the context's engine settings) with this candidate's constants."""
        return dataclasses.replace(base, num_par_softmax_segments=self.segments, min_launch_grid_size_2d=self.min_grid)


@dataclass(frozen=True, kw_only=True)
class SglangCandidate:
    """One SGLang setting tune tries: the server's ``--triton-attention-num-kv-splits`` (0.5.23) and whether
    SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS fixes every sequence's split count at it."""

    engine: ClassVar[str] = "sglang"
    max_kv_splits: int
    static: bool

    @property
    def knob(self) -> int:
        return self.max_kv_splits

    def key(self) -> tuple[int, ...]:
        return self.max_kv_splits, int(self.static)

    def to_dict(self) -> dict[str, Any]:
        return {"triton_attention_num_kv_splits": self.max_kv_splits, "static_kv_splits": self.static}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SglangCandidate:
        return cls(max_kv_splits=int(d["triton_attention_num_kv_splits"]), static=bool(d["static_kv_splits"]))

    def settings(self, base: sg.SglangSettings) -> sg.SglangSettings:
        return dataclasses.replace(base, max_kv_splits=self.max_kv_splits, static_kv_splits=self.static)


#: a candidate setting of either engine
EngineCandidate = Union[VllmCandidate, SglangCandidate]
CANDIDATES: dict[str, type[VllmCandidate] | type[SglangCandidate]] = {"vllm": VllmCandidate, "sglang": SglangCandidate}


def candidate_of(engine: str, setting: EngineCandidate | Mapping[str, Any]) -> EngineCandidate:
    """``setting`` as ``engine``'s record: a record as it is, a mapping as the JSON (or saved timings) shows it."""
    if isinstance(setting, (VllmCandidate, SglangCandidate)):
        if setting.engine != engine:
            raise ValueError(f"a {setting.engine} setting given for {engine}")
        return setting
    return CANDIDATES[engine].from_dict(setting)


@dataclass(frozen=True, eq=False)
class Option:
    """One candidate setting and its per-step times (arrays over the workload's steps)."""

    setting: EngineCandidate
    label: str
    times: FloatArray  # seconds per step, one layer
    score: FloatArray  # the ranking score per step (timemodel.robust_time_s)
    scratch_bytes: int
    steps_2d: int | None = None  # vLLM: weighted steps on the 2D kernel
    exact: Any = None  # bool per step: the scalar model's value (not estimated)
    recipes: tuple = ()  # the timer's recipe keys whose estimates make these times
    uses: tuple = ()  # per recipe, the steps whose times it gives (bool arrays; empty: every step, one recipe)
    refresh: Callable[[], Option] | None = None  # the same option rebuilt from the timer's current estimates

    def refreshed(self) -> Option:
        return self.refresh() if self.refresh is not None else self


def vllm_setting(segments: int, min_grid: int) -> VllmCandidate:
    return VllmCandidate(segments=segments, min_grid=min_grid)


def sglang_setting(max_kv_splits: int, static: bool) -> SglangCandidate:
    return SglangCandidate(max_kv_splits=max_kv_splits, static=static)


def engine_settings(ctx: Any, engine: str, setting: EngineCandidate | Mapping[str, Any]) -> Any:
    """The engine settings of one candidate ``setting`` (a record, or a mapping as the JSON shows it) over the
    context's."""
    cand = candidate_of(engine, setting)
    if isinstance(cand, VllmCandidate):
        return cand.settings(ctx.vllm)
    return cand.settings(ctx.sglang)


def powers_of_two(upto: int) -> list[int]:
    return [1 << k for k in range(max(upto, 1).bit_length()) if 1 << k <= upto]


def vllm_segment_range(ctx: Any) -> tuple[list[int], str]:
    """The segment counts searched and why the range stops where it does."""
    w = ctx.work
    legal = vtb.max_num_par_softmax_segments(w.head_size)
    tile = vu.get_tile_size(w.head_size, 0, min(w.q_bytes, w.kv_bytes_per_element), is_prefill=False)
    useful = next_power_of_2(cdiv(ctx.max_seq_len, tile))
    if useful < legal:
        top, why = useful, (f"{useful} segments give the longest sequence ({ctx.max_seq_len:,} tokens) one {tile}-token "
                            "tile per segment: more only add programs that exit at once")
    else:
        top, why = legal, (f"{legal} is the largest count vLLM's reduce_segments compiles at head size {w.head_size} "
                           "(an (segments, head size) tile of at most 2^20 elements; powers of two only)")
    default = ctx.vllm.num_par_softmax_segments or vtb.NUM_PAR_SOFTMAX_SEGMENTS
    # 1 segment would be the 3D kernel with one segment and a reduce: never better than the 2D kernel it replaces
    return sorted({p for p in powers_of_two(top) if p >= 2} | {default}), why


def vllm_grid_range(ctx: Any) -> list[int]:
    """MIN_LAUNCH_GRID_SIZE_2D values with distinct thresholds: 0, h_kv x 2^k up to max_num_seqs, the default."""
    h_kv = ctx.work.num_kv_heads
    default = vtb.MIN_LAUNCH_GRID_SIZE_2D if ctx.vllm.min_launch_grid_size_2d is None else ctx.vllm.min_launch_grid_size_2d
    return sorted({0, default} | {h_kv * p for p in powers_of_two(ctx.vllm.max_num_seqs)})


def vllm_options(ctx: Any) -> tuple[list[Option], str]:
    """Every (segments, MIN_LAUNCH_GRID_SIZE_2D) candidate, the default first, composed from the 2D launch and one 3D
    launch per segment count (module doc); and why the segment range ends where it does."""
    segments, why = vllm_segment_range(ctx)
    d_seg, d_grid = _vllm_defaults(ctx)
    out = [vllm_option(ctx, s, g) for g in vllm_grid_range(ctx) for s in segments]
    out.sort(key=lambda o: o.setting != vllm_setting(d_seg, d_grid))  # the default first
    return out, why


def _vllm_defaults(ctx: Any) -> tuple[int, int]:
    base = ctx.vllm
    return (base.num_par_softmax_segments or vtb.NUM_PAR_SOFTMAX_SEGMENTS,
            vtb.MIN_LAUNCH_GRID_SIZE_2D if base.min_launch_grid_size_2d is None else base.min_launch_grid_size_2d)


def vllm_option(ctx: Any, segments: int, grid: int) -> Option:
    """vLLM with NUM_PAR_SOFTMAX_SEGMENTS ``segments`` and MIN_LAUNCH_GRID_SIZE_2D ``grid``: each step on the kernel
    the engine's gate sends it to (per batch: :func:`~decodecalc.launchers.vllm_unified.plan_vllm`, graph padding
    included), timed by the shared 2D and 3D launches."""
    from decodecalc.batch.launches import VllmRecipe
    from decodecalc.batch.stats import compose, gate_mask

    d_seg, d_grid = _vllm_defaults(ctx)
    st = engine_settings(ctx, "vllm", vllm_setting(segments, grid))
    # the gate does not depend on the segment count: planned once per threshold with the default count
    got = ctx.memo.get(("vllm-gate", grid))
    if got is None:
        recipe = VllmRecipe(ctx.work, ctx.gpu, dataclasses.replace(st, num_par_softmax_segments=d_seg))
        shapes = [recipe.shape_of(k) for k in ctx.query_keys.patterns]
        got = ctx.memo[("vllm-gate", grid)] = (shapes, gate_mask([s.use_3d for s in shapes], ctx.query_keys.index))
    shapes, use_3d = got
    label = f"S={segments} grid={grid}" + (" (default)" if (segments, grid) == (d_seg, d_grid) else "")
    common: dict[str, Any] = dict(setting=vllm_setting(segments, grid), label=label,
                  scratch_bytes=vtb.build_backend(ctx.work, ctx.gpu, st).scratch_bytes(ctx.work.num_heads),
                  steps_2d=int(ctx.steps.weights[~use_3d].sum()))
    if any(sh.use_3d and sh.segments != d_seg for sh in shapes):  # the backend overrode the count (SM 12.0)
        est = ctx.timer.vllm(st)
        return Option(times=est.time, score=est.score, exact=est.exact, recipes=("own",), **common)
    # only the launches some step runs: a threshold no batch reaches never times the 3D kernel
    parts = [(("vllm-forced", segments), use_3d), (("vllm-forced", 1), ~use_3d)]
    parts = [(k, m) for k, m in parts if m.any()]
    for (_, n), _m in parts:
        ctx.timer.vllm_forced(n)

    def rebuild() -> Option:
        ests = [ctx.timer.estimate_of(k) for k, _ in parts]
        if len(ests) == 1:
            e = ests[0]
            times, score, exact = e.time, e.score, e.exact
        else:
            times, score, exact = compose(use_3d, ests[0], ests[1])
        return Option(times=times, score=score, exact=exact, recipes=tuple(k for k, _ in parts),
                      uses=tuple(m for _, m in parts), refresh=rebuild, **common)
    return rebuild()


def sglang_split_range(ctx: Any) -> tuple[list[int], str]:
    legal = sg.MAX_KV_SPLITS_GRID_Z
    useful = next_power_of_2(cdiv(ctx.max_seq_len, sg._MIN_BLOCK_KV))
    if useful < legal:
        top, why = useful, (f"{useful} splits give the longest sequence ({ctx.max_seq_len:,} tokens) one "
                            f"{sg._MIN_BLOCK_KV}-key block per split: more only add programs that exit at once")
    else:
        top, why = legal, f"{legal:,} is CUDA's largest grid z dimension (stage 1's split dimension)"
    default = ctx.sglang.max_kv_splits or sg.DEFAULT_MAX_KV_SPLITS
    return sorted(set(powers_of_two(top)) | {default}), why


def sglang_options(ctx: Any) -> tuple[list[Option], str]:
    splits, why = sglang_split_range(ctx)
    d_max, d_static = _sglang_defaults(ctx)
    combos = [(d_max, d_static)] + [(m, st) for st in (False, True) for m in splits
                                    if (m, st) != (d_max, d_static) and not (m == 1 and st)]
    return [sglang_option(ctx, m, st) for m, st in combos], why


def _sglang_defaults(ctx: Any) -> tuple[int, bool]:
    return ctx.sglang.max_kv_splits or sg.DEFAULT_MAX_KV_SPLITS, ctx.sglang.static_kv_splits


def sglang_option(ctx: Any, max_kv_splits: int, static: bool) -> Option:
    """SGLang with ``--triton-attention-num-kv-splits max_kv_splits``, static or adaptive split counts."""
    s = engine_settings(ctx, "sglang", sglang_setting(max_kv_splits, static))
    ctx.timer.sglang(s)
    default = (max_kv_splits, static) == _sglang_defaults(ctx)
    common: dict[str, Any] = dict(setting=sglang_setting(max_kv_splits, static), recipes=(("sglang", s),),
                  label=f"{'static' if static else 'adaptive'} {max_kv_splits}" + (" (default)" if default else ""),
                  scratch_bytes=sg.scratch_bytes(ctx.vllm.max_num_seqs, ctx.work.num_heads, max_kv_splits,
                                                 ctx.work.head_size_v))

    def rebuild() -> Option:
        est = ctx.timer.estimate_of(common["recipes"][0])
        return Option(times=est.time, score=est.score, exact=est.exact, refresh=rebuild, **common)
    return rebuild()


def _vllm_setting_option(ctx: Any, setting: EngineCandidate) -> Option:
    assert isinstance(setting, VllmCandidate)
    return vllm_option(ctx, setting.segments, setting.min_grid)


def _sglang_setting_option(ctx: Any, setting: EngineCandidate) -> Option:
    assert isinstance(setting, SglangCandidate)
    return sglang_option(ctx, setting.max_kv_splits, setting.static)


def _vllm_refusals(ctx: Any) -> None:
    """vLLM's own start-up checks of the workload's shape (block size, head size...)."""
    vu.check_supported(ctx.work, ctx.vllm)


def _sglang_refusals(ctx: Any) -> None:
    if ctx.work.model.is_mla:
        raise UnsupportedError(f"{ctx.work.model.name} is an MLA model: SGLang's Triton MLA decode (its max_kv_splits "
                               "sized from the context length) is not in tune's batch evaluator; the MLA backends are "
                               "compared below")
    if bool((ctx.steps.query_lens > 1).any()):
        raise UnsupportedError("query lengths > 1: SGLang runs prefill, mixed and speculative-verify batches through "
                               "extend_attention, which does not split the KV (triton_backend.py L1059, L1127)")


@dataclass(frozen=True)
class EngineSpace:
    """One engine's settings as tune searches them: the knob whose range is searched, the candidates, the default,
    the option of any setting, and the engine's own refusals of a workload (raised before any option is built)."""

    name: str
    knob: str
    options: Callable[[Any], tuple[list[Option], str]]
    default_setting: Callable[[Any], EngineCandidate]
    option_of: Callable[[Any, EngineCandidate], Option]
    refuses: Callable[[Any], None]


#: the engines tune knows, by name (the one place that says which function serves which engine)
SPACES: dict[str, EngineSpace] = {
    "vllm": EngineSpace("vllm", "NUM_PAR_SOFTMAX_SEGMENTS", vllm_options,
                        lambda ctx: vllm_setting(*_vllm_defaults(ctx)), _vllm_setting_option, _vllm_refusals),
    "sglang": EngineSpace("sglang", "triton_attention_num_kv_splits", sglang_options,
                          lambda ctx: sglang_setting(*_sglang_defaults(ctx)), _sglang_setting_option, _sglang_refusals),
}


def default_setting(ctx: Any, engine: str) -> EngineCandidate:
    """The engine's default setting."""
    return SPACES[engine].default_setting(ctx)


def option_like(ctx: Any, engine: str, setting: EngineCandidate | Mapping[str, Any]) -> Option:
    """The option of ``setting`` (a record, or a mapping as the JSON shows it) over ``ctx``'s steps."""
    return SPACES[engine].option_of(ctx, candidate_of(engine, setting))


def too_big(options: Sequence[Option], memory_bytes: int) -> list[Option]:
    """Options whose scratch the GPU's memory cannot hold (a quarter of it: the KV cache and weights need the rest)."""
    return [o for o in options if memory_bytes and o.scratch_bytes > memory_bytes // 4]
