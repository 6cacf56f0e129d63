"""Record every Triton kernel launch: kernel name, grid, constexprs.

Triton launches a ``@triton.jit`` kernel as ``kernel[grid](*args, **kwargs)``;
``__getitem__`` returns a proxy that calls ``kernel.run(*args, grid=grid,
warmup=False, **kwargs)``.  :class:`LaunchRecorder` wraps ``run`` on the two
classes that implement it in Triton 3.x:

* ``triton.runtime.jit.JITFunction`` (compiled launches on a GPU), and
* ``triton.runtime.interpreter.InterpretedFunction`` (``TRITON_INTERPRET=1``,
  the CPU interpreter).

Autotuned or heuristics-wrapped kernels end in one of those ``run`` methods too,
so they are seen with their final configuration.

Triton's own launch hook (``triton.knobs.runtime.launch_enter_hook``, Triton
3.6) is called only for compiled launches and is handed just the kernel name,
function handle and stream, not the grid, and the interpreter never calls it.
The ``run`` wrapper is therefore the primary record in both modes; on a GPU the
recorder also registers the launch hook and counts the compiled launches it
sees (``hook_names``), to confirm that the recorded launches really ran.

Two modes:

* ``execute=False`` -- intercept: record the launch and return without running
  the kernel (fast; enough for grids and constexprs).
* ``execute=True`` -- record, then run the kernel as usual.
* ``execute=<callable(name) -> bool>`` -- choose per kernel name (for example,
  run SGLang's tiny split-count kernel but intercept the attention kernels).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from decodecalc.errors import DecodecalcError
from decodecalc.extras import install_hint

__all__ = ["LaunchRecorder", "RecordedLaunch"]

_LOCK = threading.RLock()
_ACTIVE: list["LaunchRecorder"] = []
_ORIGINALS: dict[type, Callable[..., Any]] = {}


@dataclass(frozen=True)
class RecordedLaunch:
    """One ``kernel[grid](...)`` call as a launcher issued it (what ran; the prediction is
    :class:`decodecalc.launchers.base.KernelLaunch`)."""

    name: str
    grid: tuple[int, ...]
    constexprs: dict[str, Any]
    num_warps: int | None = None
    num_stages: int | None = None
    executed: bool = False

    def to_json(self, keys: tuple[str, ...] | None = None) -> dict[str, Any]:
        cx = self.constexprs if keys is None else {k: self.constexprs[k] for k in keys if k in self.constexprs}
        out: dict[str, Any] = {"kernel": self.name, "grid": list(self.grid), "constexprs": cx}
        if self.num_warps is not None:
            out["num_warps"] = self.num_warps
        if self.num_stages is not None:
            out["num_stages"] = self.num_stages
        return out


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "value") and isinstance(getattr(value, "value"), (bool, int, float, str)):
        return value.value  # tl.constexpr wrapper, IntEnum
    return repr(value)


def _is_constexpr_annotation(ann: Any) -> bool:
    if ann is inspect.Parameter.empty:
        return False
    if isinstance(ann, str):
        return ann.split(".")[-1] == "constexpr"
    try:
        import triton.language as tl

        return ann is tl.constexpr or (isinstance(ann, type) and issubclass(ann, tl.constexpr))
    except Exception:  # pragma: no cover - defensive
        return False


def _kernel_fn(kernel: Any) -> Callable[..., Any]:
    return getattr(kernel, "fn", kernel)


def _kernel_name(kernel: Any) -> str:
    fn = _kernel_fn(kernel)
    return getattr(fn, "__name__", type(kernel).__name__)


def _describe(kernel: Any, args: tuple[Any, ...], grid: Any, kwargs: dict[str, Any]) -> RecordedLaunch:
    fn = _kernel_fn(kernel)
    sig = inspect.signature(fn)
    params = sig.parameters
    call_kwargs = {k: v for k, v in kwargs.items() if k in params}
    options = {k: v for k, v in kwargs.items() if k not in params}
    bound = sig.bind_partial(*args, **call_kwargs)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    if callable(grid):
        grid = grid(arguments | options)
    grid_t = tuple(int(g) for g in grid)
    constexprs = {
        name: _jsonable(arguments.get(name))
        for name, p in params.items()
        if _is_constexpr_annotation(p.annotation)
    }
    nw = options.get("num_warps")
    ns = options.get("num_stages")
    return RecordedLaunch(
        name=_kernel_name(kernel),
        grid=grid_t,
        constexprs=constexprs,
        num_warps=int(nw) if nw is not None else None,
        num_stages=int(ns) if ns is not None else None,
    )


def _make_wrapper(cls: type) -> Callable[..., Any]:
    original = _ORIGINALS[cls]

    def run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        recorder = _ACTIVE[-1] if _ACTIVE else None
        if recorder is None or warmup:
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)
        launch = _describe(self, args, grid, kwargs)
        run_it = recorder.should_execute(launch.name)
        if run_it:
            launch = RecordedLaunch(**{**launch.__dict__, "executed": True})
        recorder.launches.append(launch)
        if not run_it:
            return None
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)

    run.__wrapped__ = original  # type: ignore[attr-defined]  # functools' convention: the method it wraps
    return run


def _patch_classes() -> None:
    try:
        from triton.runtime.jit import JITFunction
    except ImportError as exc:  # pragma: no cover - caller checks availability first
        raise DecodecalcError(
            f"decodecalc verify needs triton: {install_hint('verify')}"
        ) from exc
    classes: list[type] = [JITFunction]
    try:
        from triton.runtime.interpreter import InterpretedFunction

        classes.append(InterpretedFunction)
    except ImportError:  # pragma: no cover - very old triton
        pass
    for cls in classes:
        if cls not in _ORIGINALS:
            _ORIGINALS[cls] = cls.__dict__["run"]
            cls.run = _make_wrapper(cls)  # type: ignore[attr-defined]  # triton JITFunction/InterpretedFunction.run


def _unpatch_classes() -> None:
    for cls, original in list(_ORIGINALS.items()):
        cls.run = original  # type: ignore[attr-defined]  # restores the triton method saved above
        del _ORIGINALS[cls]


@dataclass
class LaunchRecorder:
    """Context manager that records (and optionally suppresses) Triton launches.

    >>> with LaunchRecorder(execute=False) as rec:   # doctest: +SKIP
    ...     unified_attention(...)
    >>> rec.launches[0].grid
    """

    execute: bool | Callable[[str], bool] = False
    launches: list[RecordedLaunch] = field(default_factory=list)
    hook_names: list[str] = field(default_factory=list)
    use_launch_hook: bool = True
    _hook: Callable[..., Any] | None = field(default=None, repr=False)

    def should_execute(self, name: str) -> bool:
        if callable(self.execute):
            return bool(self.execute(name))
        return bool(self.execute)

    def _launch_hook(self, metadata: Any) -> None:
        data = metadata.get() if hasattr(metadata, "get") else metadata
        try:
            self.hook_names.append(str(data["name"]))
        except Exception:  # pragma: no cover - metadata layout differs
            self.hook_names.append(repr(data))

    def __enter__(self) -> "LaunchRecorder":
        with _LOCK:
            _patch_classes()
            _ACTIVE.append(self)
            if self.use_launch_hook:
                try:
                    from triton import knobs

                    chain = knobs.runtime.launch_enter_hook
                    if hasattr(chain, "add"):
                        self._hook = self._launch_hook
                        chain.add(self._hook)
                except (ImportError, AttributeError):  # older triton: no knobs
                    self._hook = None
        return self

    def __exit__(self, *exc: Any) -> None:
        with _LOCK:
            if self._hook is not None:
                from triton import knobs

                knobs.runtime.launch_enter_hook.remove(self._hook)
                self._hook = None
            _ACTIVE.remove(self)
            if not _ACTIVE:
                _unpatch_classes()
