"""Find the upstream decode-attention sources (vLLM, SGLang) without importing anything from them.

Sources can come from

1. a user path: a source checkout (``<repo>/vllm/...``, ``<repo>/python/sglang/...``),
   an unpacked wheel directory, or the package directory itself;
2. an installed ``vllm`` / ``sglang`` package (found with ``importlib.util.find_spec``,
   which does not import it);
3. the default ``./upstream/<name>-<version>`` written by ``tools/fetch_upstream.sh``
   (looked up in the current directory, then next to this repository).

:mod:`decodecalc.verify.upstream` then imports the kernel modules from the files found here.
"""

from __future__ import annotations

import importlib.util
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from decodecalc.errors import ConfigError, DecodecalcError
from decodecalc.extras import install_hint

__all__ = ["EXPECTED_VERSIONS", "REQUIRED_FILES", "UpstreamSource", "UpstreamVersionWarning", "default_roots",
           "locate", "require_torch_triton"]

EXPECTED_VERSIONS = {"vllm": "0.33.0", "sglang": "0.5.23"}

# Files each loader needs, relative to the directory that holds the package folder.
REQUIRED_FILES: dict[str, tuple[str, ...]] = {
    "vllm": (
        "vllm/v1/attention/ops/triton_unified_attention.py",
        "vllm/v1/attention/ops/triton_attention_helpers.py",
        "vllm/v1/kv_cache_interface.py",
    ),
    "sglang": (
        "sglang/kernels/ops/attention/decode_attention.py",
        "sglang/kernels/ops/attention/metadata.py",
        "sglang/kernels/ops/attention/score_mod.py",
    ),
}
VERSION_FILES = {"vllm": ("vllm/_version.py",), "sglang": ("sglang/_version.py", "sglang/version.py")}

_REPO_ROOT = Path(__file__).resolve().parents[2]


class UpstreamVersionWarning(UserWarning):
    """The upstream sources are not the version the recordings and models were made for."""


def require_torch_triton() -> None:
    """Raise a :class:`DecodecalcError` with the install hint when torch or triton is missing."""
    from decodecalc.verify import missing_requirements

    missing = missing_requirements()
    if missing:
        raise DecodecalcError(
            f"{' and '.join(missing)} not installed; the verify machinery needs torch and triton: "
            f"{install_hint('verify')} (on a CPU-only machine install torch==2.13.0 first)"
        )


@dataclass(frozen=True)
class UpstreamSource:
    """Where one upstream package's sources are, and which version they are."""

    name: str  # "vllm" or "sglang"
    root: Path  # directory that contains the package folder ``<name>/``
    version: str  # "unknown" when no version file could be read
    origin: str  # "path", "installed" or "default"

    def file(self, rel: str) -> Path:
        return self.root / rel

    @property
    def expected(self) -> bool:
        return self.version == EXPECTED_VERSIONS[self.name]


def _read_version(name: str, root: Path) -> str:
    for rel in VERSION_FILES[name]:
        path = root / rel
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        m = re.search(r"^__version__\s*(?::\s*str\s*)?=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]", text, re.M)
        if m:
            return m.group(1)
    try:  # installed package: its distribution metadata
        import importlib.metadata

        dist_root = importlib.util.find_spec(name)
        if dist_root is not None and dist_root.submodule_search_locations:
            if Path(next(iter(dist_root.submodule_search_locations))).parent == root:
                return importlib.metadata.version(name)
    except Exception:
        pass
    return "unknown"


def _candidate_roots(name: str, path: Path) -> list[Path]:
    cands = [path, path / "python"]  # checkout root; SGLang keeps its package under python/
    if path.name == name:  # the package folder itself (…/site-packages/vllm)
        cands.insert(0, path.parent)
    if path.name == "python" and (path / name).is_dir():
        cands.insert(0, path)
    return cands


def _missing(name: str, root: Path) -> list[str]:
    return [rel for rel in REQUIRED_FILES[name] if not (root / rel).is_file()]


def _check_version(src: UpstreamSource) -> UpstreamSource:
    expected = EXPECTED_VERSIONS[src.name]
    if src.version != expected:
        warnings.warn(
            f"{src.name} sources at {src.root} are version {src.version}, not {expected}: "
            f"launch rules may differ from the recorded {src.name}-{expected} behaviour",
            UpstreamVersionWarning,
            stacklevel=3,
        )
    return src


def default_roots(name: str) -> list[Path]:
    """Where ``tools/fetch_upstream.sh`` puts ``name``: ``./upstream/<name>-<version>``, then the same
    next to this repository; each directory once (they are one when run from the repository)."""
    out: list[Path] = []
    for base in (Path.cwd(), _REPO_ROOT):
        root = (base / "upstream" / f"{name}-{EXPECTED_VERSIONS[name]}").resolve()
        if root not in out:
            out.append(root)
    return out


def locate(name: str, path: str | os.PathLike[str] | None = None) -> UpstreamSource:
    """Find the sources of ``name`` (``"vllm"`` or ``"sglang"``).

    With ``path``: that directory (checkout, unpacked wheel, package folder), or a
    :class:`ConfigError` naming the first expected file that is missing.  Without it:
    an installed package, then ``./upstream/<name>-<expected version>``; a :class:`ConfigError`
    naming each place tried (once) and how to get the sources.
    """
    if name not in REQUIRED_FILES:
        raise ConfigError(f"unknown upstream package {name!r}; expected 'vllm' or 'sglang'")
    if path is not None:
        p = Path(path).expanduser()
        if not p.exists():
            raise ConfigError(f"{name} source path {p} does not exist")
        cands = _candidate_roots(name, p)
        for root in cands:
            if not _missing(name, root):
                return _check_version(UpstreamSource(name, root.resolve(), _read_version(name, root), "path"))
        # Name the missing file relative to the most plausible root.
        best = min(cands, key=lambda r: len(_missing(name, r)))
        first = _missing(name, best)[0]
        raise ConfigError(f"{name} sources at {p} are incomplete: missing {best / first}")

    spec = importlib.util.find_spec(name)
    if spec is not None and spec.submodule_search_locations:
        root = Path(next(iter(spec.submodule_search_locations))).parent
        if not _missing(name, root):
            return _check_version(UpstreamSource(name, root.resolve(), _read_version(name, root), "installed"))

    tried = default_roots(name)
    for root in tried:
        if not _missing(name, root):
            return _check_version(UpstreamSource(name, root, _read_version(name, root), "default"))
    expected = EXPECTED_VERSIONS[name]
    raise ConfigError(
        f"no {name} sources found (no installed {name} package; tried {', '.join(map(str, tried))}): "
        f"run tools/fetch_upstream.sh {name}, pip install {name}=={expected}, "
        f"or pass the path of a {name} checkout or unpacked wheel"
    )
