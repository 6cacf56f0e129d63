"""Import the real upstream decode-attention launchers from file (sources found by
:mod:`decodecalc.verify.locate`).

The kernel modules are imported *from file*, never through ``import vllm`` or
``import sglang`` (those packages pull in most of the engine).  Their few
package-level imports are answered by small shim modules that are put into
``sys.modules`` only while the upstream file executes, then removed again:

* vLLM: ``vllm.envs`` (the real ``vllm/envs.py`` from the same tree when present:
  it imports only the standard library), ``vllm.logger.init_logger``,
  ``vllm.platforms.current_platform`` (fp8 dtype, compute-capability queries),
  ``vllm.triton_utils`` (the real ``triton`` / ``triton.language``),
  ``vllm.v1.kv_cache_interface.KVQuantMode`` (the enum's class body, executed from the
  upstream file) and ``vllm.v1.attention.ops.triton_attention_helpers`` (the real file).
* SGLang: ``sglang.srt.utils`` (``is_hip`` and friends: False; ``get_device_core_count``),
  ``sglang.srt.environ.envs`` (defaults), ``sglang.kernels.ops.attention.score_mod``
  (the real file).

vLLM reads ``VLLM_BATCH_INVARIANT`` once, when ``triton_unified_attention`` is
imported (``is_batch_invariant = envs.VLLM_BATCH_INVARIANT``), so
:func:`load_vllm` imports one module instance per setting, with the variable set
while the module executes.
"""

from __future__ import annotations

import ast
import contextlib
import enum
import importlib.util
import logging
import os
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from decodecalc.errors import ConfigError, DecodecalcError
from decodecalc.verify.locate import UpstreamSource, locate, require_torch_triton

__all__ = ["VllmKernels", "SglangKernels", "load_vllm", "load_sglang"]


def _package(name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__path__ = []  # a package, but nothing is importable from it except what we inject
    return mod


def _link_parents(mods: dict[str, types.ModuleType]) -> None:
    """Make ``a.b.c`` reachable as an attribute of ``a.b`` (needed for ``import a.b as x``)."""
    for full, mod in mods.items():
        if "." in full:
            parent, child = full.rsplit(".", 1)
            if parent in mods:
                setattr(mods[parent], child, mod)


@contextlib.contextmanager
def _injected(mods: dict[str, types.ModuleType], env: dict[str, str] | None = None) -> Iterator[None]:
    saved_mods = {k: sys.modules.get(k) for k in mods}
    saved_env = {k: os.environ.get(k) for k in (env or {})}
    sys.modules.update(mods)
    os.environ.update(env or {})
    try:
        yield
    finally:
        for k in list(mods):  # includes modules added to ``mods`` while inside
            v = saved_mods.get(k)
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
        for k, val in saved_env.items():
            if val is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = val


_COUNTER = [0]


def _exec_file(private_name: str, path: Path) -> types.ModuleType:
    """Execute ``path`` as a module registered under a private, unique name."""
    spec = importlib.util.spec_from_file_location(private_name, path)
    if spec is None or spec.loader is None:  # pragma: no cover
        raise ConfigError(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[private_name] = mod  # dataclasses / typing look the module up here
    try:
        spec.loader.exec_module(mod)
    except Exception:
        sys.modules.pop(private_name, None)
        raise
    return mod


def _private(prefix: str, stem: str) -> str:
    _COUNTER[0] += 1
    return f"decodecalc._upstream.{prefix}_{_COUNTER[0]}.{stem}"


class _Platform:
    """Stand-in for ``vllm.platforms.current_platform`` (CUDA, a chosen compute capability)."""

    def __init__(self, capability: tuple[int, int] = (9, 0)) -> None:
        self.capability = capability

    def fp8_dtype(self) -> Any:
        import torch

        return torch.float8_e4m3fn

    def is_cuda(self) -> bool:
        return True

    def is_rocm(self) -> bool:
        return False

    def is_xpu(self) -> bool:
        return False

    def is_cpu(self) -> bool:
        return False

    def get_device_capability(self, device_id: int = 0) -> Any:
        return types.SimpleNamespace(major=self.capability[0], minor=self.capability[1])

    def is_device_capability(self, capability: Any, device_id: int = 0) -> bool:
        if isinstance(capability, int):
            return self.capability[0] * 10 + self.capability[1] == capability
        return tuple(capability) == self.capability

    def is_device_capability_family(self, capability: int, device_id: int = 0) -> bool:
        # vllm/platforms/interface.py: to_int() // 10 == capability // 10
        return (self.capability[0] * 10 + self.capability[1]) // 10 == capability // 10

    def has_device_capability(self, capability: Any, device_id: int = 0) -> bool:
        if isinstance(capability, int):
            return self.capability[0] * 10 + self.capability[1] >= capability
        return self.capability >= tuple(capability)


class _OnceLogger(logging.LoggerAdapter[logging.Logger]):
    def __init__(self, logger: logging.Logger) -> None:
        super().__init__(logger, {})
        self._seen: set[tuple[str, str]] = set()

    def _once(self, level: int, msg: str, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("scope", None)
        key = (str(level), msg)
        if key not in self._seen:
            self._seen.add(key)
            self.log(level, msg, *args, **kwargs)

    def debug_once(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self._once(logging.DEBUG, msg, *args, **kwargs)

    def info_once(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self._once(logging.INFO, msg, *args, **kwargs)

    def warning_once(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self._once(logging.WARNING, msg, *args, **kwargs)


def _kv_quant_mode_module(path: Path) -> types.ModuleType:
    """``vllm.v1.kv_cache_interface`` with only ``KVQuantMode``, its class body run from ``path``.

    The real module imports much of vLLM; the enum itself needs only ``enum``.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    cls = next(
        (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "KVQuantMode"),
        None,
    )
    if cls is None:
        raise ConfigError(f"{path} defines no KVQuantMode enum")
    mod = types.ModuleType("vllm.v1.kv_cache_interface")
    mod.__dict__.update({"IntEnum": enum.IntEnum, "Enum": enum.Enum, "__name__": mod.__name__})
    code = compile(ast.Module(body=[cls], type_ignores=[]), str(path), "exec")
    exec(code, mod.__dict__)  # noqa: S102 - upstream enum definition, see docstring
    return mod


def _vllm_envs_module(root: Path) -> types.ModuleType:
    real = root / "vllm" / "envs.py"
    if real.is_file():
        try:
            return _exec_file(_private("vllm", "envs"), real)
        except Exception:  # pragma: no cover - fall back to a shim
            pass
    mod = types.ModuleType("vllm.envs")

    def __getattr__(name: str) -> Any:  # same parse as vllm/envs.py for the flags used here
        if name == "VLLM_BATCH_INVARIANT":
            return bool(int(os.getenv("VLLM_BATCH_INVARIANT", "0")))
        raise AttributeError(name)

    mod.__getattr__ = __getattr__  # type: ignore[method-assign]  # module-level __getattr__ (PEP 562)
    return mod


def _want_interpreter(interpret: bool | None) -> bool:
    if interpret is not None:
        return interpret
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return True
    try:
        import torch

        return not torch.cuda.is_available()
    except Exception:  # pragma: no cover
        return True


@dataclass
class VllmKernels:
    """The loaded vLLM 0.33 unified-attention module and what it was loaded with."""

    source: UpstreamSource
    module: types.ModuleType  # triton_unified_attention
    helpers: types.ModuleType
    platform: _Platform
    batch_invariant: bool
    interpret: bool

    @property
    def unified_attention(self) -> Any:
        return self.module.unified_attention

    @property
    def KVQuantMode(self) -> Any:  # noqa: N802 - upstream name
        return self.module.KVQuantMode

    @property
    def max_3d_query_len(self) -> int | None:
        return getattr(self.module, "MAX_3D_QUERY_LEN", None)


@dataclass
class SglangKernels:
    """The loaded SGLang decode-attention and metadata modules."""

    source: UpstreamSource
    decode: types.ModuleType  # decode_attention
    metadata: types.ModuleType  # get_num_kv_splits_triton
    interpret: bool

    @property
    def decode_attention_fwd(self) -> Any:
        return self.decode.decode_attention_fwd

    @property
    def get_num_kv_splits_triton(self) -> Any:
        return self.metadata.get_num_kv_splits_triton


_CACHE: dict[tuple[Any, ...], Any] = {}


def _interpret_env(interpret: bool) -> dict[str, str]:
    # triton.jit decides at decoration time whether it builds an InterpretedFunction.
    return {"TRITON_INTERPRET": "1" if interpret else "0"}


def _prepare_triton(interpret: bool) -> None:
    """Make sure ``triton`` is (or gets) imported in the wanted mode.

    Under the interpreter, Triton's own library functions (``tl.max``, ``tl.cdiv``...)
    must also be interpreted, and ``triton.jit`` decides that when ``triton.language``
    is imported: so ``TRITON_INTERPRET=1`` must be set before the first ``import triton``.
    """
    if interpret:
        # Process-wide on purpose: Triton also reads it when it lazily imports more of
        # itself later (e.g. triton.experimental.gluon while converting arguments).
        os.environ["TRITON_INTERPRET"] = "1"
    import triton.language as tl

    lib_fn = getattr(tl, "max", None)
    interpreted = type(lib_fn).__name__ == "InterpretedFunction"
    if interpret and lib_fn is not None and not interpreted:
        raise DecodecalcError(
            "triton was imported before TRITON_INTERPRET=1 was set; the interpreter needs it set "
            "before the first 'import triton' (export TRITON_INTERPRET=1, or load the upstream "
            "kernels before anything imports triton)"
        )


def load_vllm(
    path: str | os.PathLike[str] | None = None,
    *,
    batch_invariant: bool = False,
    capability: tuple[int, int] = (9, 0),
    interpret: bool | None = None,
    source: UpstreamSource | None = None,
) -> VllmKernels:
    """Import vLLM's ``triton_unified_attention`` from file (see module docstring).

    ``capability`` is what the platform shim reports (vLLM reads it for the SM100
    large-head tuning); ``batch_invariant`` sets ``VLLM_BATCH_INVARIANT`` while the
    module is imported, which is when vLLM reads it.
    """
    require_torch_triton()
    src = source or locate("vllm", path)
    interp = _want_interpreter(interpret)
    key = ("vllm", str(src.root), batch_invariant, capability, interp)
    if key in _CACHE:
        return _CACHE[key]
    _prepare_triton(interp)

    import triton
    import triton.language as tl

    platform = _Platform(capability)
    envs = _vllm_envs_module(src.root)
    logger_mod = types.ModuleType("vllm.logger")
    # stand-in modules: their attributes are set through __dict__ (a ModuleType declares none)
    logger_mod.__dict__.update(init_logger=lambda name: _OnceLogger(logging.getLogger(name)))
    platforms_mod = types.ModuleType("vllm.platforms")
    platforms_mod.__dict__.update(current_platform=platform)
    tu = types.ModuleType("vllm.triton_utils")
    tu.__dict__.update(triton=triton, tl=tl, HAS_TRITON=True)
    kvi = _kv_quant_mode_module(src.file("vllm/v1/kv_cache_interface.py"))

    mods: dict[str, types.ModuleType] = {
        "vllm": _package("vllm"),
        "vllm.envs": envs,
        "vllm.logger": logger_mod,
        "vllm.platforms": platforms_mod,
        "vllm.triton_utils": tu,
        "vllm.v1": _package("vllm.v1"),
        "vllm.v1.kv_cache_interface": kvi,
        "vllm.v1.attention": _package("vllm.v1.attention"),
        "vllm.v1.attention.ops": _package("vllm.v1.attention.ops"),
    }
    env = _interpret_env(interp) | {"VLLM_BATCH_INVARIANT": "1" if batch_invariant else "0"}
    prefix = f"vllm_{src.version.replace('.', '_')}"
    with _injected(mods, env):
        helpers = _exec_file(
            _private(prefix, "triton_attention_helpers"),
            src.file("vllm/v1/attention/ops/triton_attention_helpers.py"),
        )
        mods["vllm.v1.attention.ops.triton_attention_helpers"] = helpers
        sys.modules["vllm.v1.attention.ops.triton_attention_helpers"] = helpers
        _link_parents(mods)
        module = _exec_file(
            _private(prefix, "triton_unified_attention"),
            src.file("vllm/v1/attention/ops/triton_unified_attention.py"),
        )
    got = getattr(module, "is_batch_invariant", None)
    if got is not None and bool(got) != batch_invariant:  # pragma: no cover - defensive
        raise DecodecalcError(f"vLLM read VLLM_BATCH_INVARIANT={got}, expected {batch_invariant}")
    kernels = VllmKernels(src, module, helpers, platform, batch_invariant, interp)
    _CACHE[key] = kernels
    return kernels


class _EnvFlag:
    def __init__(self, name: str, default: Any) -> None:
        self.name, self.default = name, default

    def get(self) -> Any:
        raw = os.environ.get(self.name)
        if raw is None:
            return self.default
        if isinstance(self.default, bool):
            return raw.strip().lower() in ("1", "true", "yes", "on")
        if isinstance(self.default, float):
            return float(raw)
        if isinstance(self.default, int):
            return int(raw)
        return raw


class _SglangEnvs:
    _DEFAULTS = {
        "SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS": False,
        "SGLANG_MLA_DECODE_TUNE": False,
        "SGLANG_FORCE_LEAN_GRID_CU_MULT": 1.0,
    }

    def __getattr__(self, name: str) -> _EnvFlag:
        if name.startswith("__"):
            raise AttributeError(name)
        return _EnvFlag(name, self._DEFAULTS.get(name))


def _device_core_count(device_id: int = 0) -> int:
    try:
        import torch

        if torch.cuda.is_available():
            return int(torch.cuda.get_device_properties(device_id).multi_processor_count)
    except Exception:  # pragma: no cover
        pass
    return 0


def load_sglang(
    path: str | os.PathLike[str] | None = None,
    *,
    interpret: bool | None = None,
    source: UpstreamSource | None = None,
) -> SglangKernels:
    """Import SGLang's ``decode_attention`` and ``metadata`` modules from file (CUDA view: not HIP)."""
    require_torch_triton()
    src = source or locate("sglang", path)
    interp = _want_interpreter(interpret)
    key = ("sglang", str(src.root), interp)
    if key in _CACHE:
        return _CACHE[key]
    _prepare_triton(interp)

    utils = types.ModuleType("sglang.srt.utils")
    utils.__dict__.update(is_hip=lambda: False, is_gfx95_supported=lambda: False, is_gfx1250_supported=lambda: False,
                          get_device_core_count=_device_core_count)
    environ = types.ModuleType("sglang.srt.environ")
    environ.__dict__.update(envs=_SglangEnvs())
    mods: dict[str, types.ModuleType] = {
        "sglang": _package("sglang"),
        "sglang.srt": _package("sglang.srt"),
        "sglang.srt.utils": utils,
        "sglang.srt.environ": environ,
        "sglang.kernels": _package("sglang.kernels"),
        "sglang.kernels.ops": _package("sglang.kernels.ops"),
        "sglang.kernels.ops.attention": _package("sglang.kernels.ops.attention"),
    }
    prefix = f"sglang_{src.version.replace('.', '_')}"
    with _injected(mods, _interpret_env(interp)):
        score_mod = _exec_file(_private(prefix, "score_mod"), src.file("sglang/kernels/ops/attention/score_mod.py"))
        mods["sglang.kernels.ops.attention.score_mod"] = score_mod
        sys.modules["sglang.kernels.ops.attention.score_mod"] = score_mod
        _link_parents(mods)
        metadata = _exec_file(_private(prefix, "metadata"), src.file("sglang/kernels/ops/attention/metadata.py"))
        decode = _exec_file(_private(prefix, "decode_attention"), src.file("sglang/kernels/ops/attention/decode_attention.py"))
    kernels = SglangKernels(src, decode, metadata, interp)
    _CACHE[key] = kernels
    return kernels
