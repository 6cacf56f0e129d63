"""Build the host-side oracles from the release sources tools/fetch_oracles.sh unpacked into ./oracles/.

Upstream host code is used unmodified: whole headers are included as they are, and from files that
cannot be compiled whole (flash_api.cpp pulls in all of torch) the functions and statements the
launch depends on are copied verbatim -- cut at brace/semicolon boundaries, never edited -- into
``oracles/build/*.inc``, which the drivers here (our own code) #include next to minimal stub headers
(tests/oracles/stubs/) for the torch/CUDA types those lines name. Each snippet must be found exactly
once, so a changed upstream file fails the build loudly instead of silently testing something else.

    python tests/oracles/build.py --oracles oracles     # writes oracles/build/<name> executables
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FA2 = "flash_attn-2.8.3.post2/csrc/flash_attn"
FI = "flashinfer_python-0.7.2.post1/include"
VLLM11 = "vllm-0.11.0"
VLLM33 = "vllm-0.33.0"
# FlashAttention-3 (hopper/) as vLLM builds it: vllm-project/flash-attention (vLLM's fork) at 617264c1, the
# closest commit available to the b273a026 vLLM 0.33 pins. It ships in no release archive on the package
# index: a checkout's files are copied here by hand (docs/oracles.md), and the FA3 oracle is built only when
# they are present.
FA3 = "vllm-flash-attention-617264c1/hopper"


class ExtractError(RuntimeError):
    pass


def _match_end(text: str, start: int, *, brace: bool) -> int:
    """Index just past the function body (brace) or statement (';' at depth 0) starting at ``start``."""
    depth = 0
    i = start
    seen_brace = False
    while i < len(text):
        c = text[i]
        if c in "([{":
            depth += 1
            seen_brace = seen_brace or c == "{"
        elif c in ")]}":
            depth -= 1
            if brace and seen_brace and depth == 0 and c == "}":
                return i + 1
        elif c == ";" and depth == 0 and not brace:
            return i + 1
        elif c == "/" and text.startswith("//", i):
            i = text.index("\n", i)
        i += 1
    raise ExtractError(f"unterminated snippet at offset {start}")


def snippet(path: Path, pattern: str, *, brace: bool, after: str | None = None, back: int = 0) -> str:
    """The one function (``brace``) or statement starting at the line matching ``pattern``; with
    ``after``, the first match past the one line matching ``after``."""
    text = path.read_text()
    base = 0
    if after is not None:
        hits = [m.start() for m in re.finditer(after, text, re.M)]
        if len(hits) != 1:
            raise ExtractError(f"{path.name}: {after!r} found {len(hits)} times (want 1)")
        base = hits[0]
        m = re.compile(pattern, re.M).search(text, base)
        if m is None:
            raise ExtractError(f"{path.name}: {pattern!r} not found after {after!r}")
        starts = [m.start()]
    else:
        starts = [m.start() for m in re.finditer(pattern, text, re.M)]
        if len(starts) != 1:
            raise ExtractError(f"{path.name}: {pattern!r} found {len(starts)} times (want 1)")
    line_start = text.rfind("\n", 0, starts[0]) + 1
    for _ in range(back):  # include ``back`` lines before the match (a template header)
        line_start = text.rfind("\n", 0, line_start - 1) + 1
    end = _match_end(text, line_start, brace=brace)
    line = text.count("\n", 0, line_start) + 1
    return f"// {path.name} L{line} (verbatim)\n#line {line} \"{path.name}\"\n{text[line_start:end]}\n"


def fa2_snippets(src: Path) -> dict[str, str]:
    """flash-attn 2.8.3.post2: one .inc file per snippet, #included by fa2_driver.cpp where it belongs."""
    api, tmpl = src / "flash_api.cpp", src / "src" / "flash_fwd_launch_template.h"
    kv = r"^mha_fwd_kvcache\("
    return {
        "fa2_functions.inc": snippet(api, r"^inline int num_splits_heuristic\(", brace=True)
        + snippet(api, r"^std::tuple<at::Tensor, at::Tensor> set_params_splitkv\(", brace=True),
        # mha_fwd_kvcache's own decisions, in the order the function makes them
        "fa2_kvcache_swap.inc": snippet(api, r"^[ \t]*const int seqlenq_ngroups_swapped = seqlen_q == 1", brace=False,
                                        after=kv),
        "fa2_kvcache_seqlen_k.inc": snippet(api, r"^[ \t]*const int seqlen_k = !paged_KV", brace=False, after=kv),
        "fa2_kvcache_round.inc": snippet(api, r"^[ \t]*auto round_multiple = ", brace=False, after=kv)
        + snippet(api, r"^[ \t]*const int head_size = round_multiple\(head_size_og, 8\);", brace=False, after=kv)
        + snippet(api, r"^[ \t]*const int head_size_rounded = ", brace=False, after=kv),
        "fa2_kvcache_run.inc": snippet(api, r"^[ \t]*run_mha_fwd\(params, stream, /\*force_split_kernel=\*/", brace=False),
        "fa2_run_mha_fwd.inc": snippet(api, r"^void run_mha_fwd\(Flash_fwd_params &params", brace=True),
        # the split launch (run_mha_fwd_splitkv_dispatch / run_flash_splitkv_fwd)
        "fa2_split_kblockn.inc": snippet(tmpl, r"^[ \t]*constexpr static int kBlockN = Headdim <= 64", brace=False),
        "fa2_split_grid.inc": snippet(tmpl, r"^[ \t]*const int num_m_block = ", brace=False,
                                      after=r"^void run_flash_splitkv_fwd\(")
        + snippet(tmpl, r"^[ \t]*dim3 grid\(num_m_block, params.num_splits > 1", brace=False),
        "fa2_combine_grid.inc": snippet(tmpl, r"^[ \t]*constexpr static int kBlockM = Kernel_traits::kHeadDim % 128",
                                        brace=False)
        + snippet(tmpl, r"^[ \t]*dim3 grid_combine\(", brace=False),
    }


def lines_between(path: Path, first: str, last: str, *, after: str) -> str:
    """The verbatim lines from the one matching ``first`` to the next matching ``last`` (inclusive),
    searching past the one line matching ``after``."""
    lines = path.read_text().splitlines()
    starts = [i for i, ln in enumerate(lines) if re.search(after, ln)]
    if len(starts) != 1:
        raise ExtractError(f"{path.name}: {after!r} found {len(starts)} times (want 1)")
    i = next((k for k in range(starts[0], len(lines)) if re.search(first, lines[k])), None)
    j = next((k for k in range(i or 0, len(lines)) if re.search(last, lines[k])), None) if i is not None else None
    if i is None or j is None:
        raise ExtractError(f"{path.name}: {first!r} .. {last!r} not found after {after!r}")
    return f'// {path.name} L{i + 1}-{j + 1} (verbatim)\n#line {i + 1} "{path.name}"\n' + "\n".join(lines[i:j + 1]) + "\n"


def define(path: Path, name: str) -> str:
    """The one ``#define NAME`` of ``path`` with its backslash-continued lines, verbatim."""
    lines = path.read_text().splitlines()
    hits = [i for i, ln in enumerate(lines) if re.match(rf"#define {re.escape(name)}\b", ln)]
    if len(hits) != 1:
        raise ExtractError(f"{path.name}: #define {name} found {len(hits)} times (want 1)")
    i = hits[0]
    out = [f"// {path.name} L{i + 1} (verbatim)", f'#line {i + 1} "{path.name}"']
    while True:
        out.append(lines[i])
        if not lines[i].rstrip().endswith("\\"):
            break
        i += 1
    return "\n".join(out) + "\n"


def vllm_paged_snippets(src: Path) -> dict[str, str]:
    """vllm 0.11.0 csrc/attention/paged_attention_v{1,2}.cu: each launcher template and the macros that
    pick its instantiation by block size (the kernel launch macro is the driver's)."""
    out = {}
    for v in ("1", "2"):
        cu = src / f"paged_attention_v{v}.cu"
        out[f"vpa_v{v}.inc"] = (
            define(cu, "DIVIDE_ROUND_UP")
            + snippet(cu, r"^template <typename T, typename CACHE_T, int BLOCK_SIZE,", brace=True)
            + define(cu, f"CALL_V{v}_LAUNCHER")
            + define(cu, f"CALL_V{v}_LAUNCHER_SPARSITY")
            + define(cu, f"CALL_V{v}_LAUNCHER_BLOCK_SIZE"))
    return out


def vllm_rocm_snippets(src: Path) -> dict[str, str]:
    """vllm 0.33.0 csrc/rocm/attention_kernels.cuh: the CDNA and RDNA (navi) launchers and the macros
    that choose between them (the kernel launch macros are the driver's)."""
    cuh = src / "attention_kernels.cuh"
    return {"vllm_rocm.inc": define(cuh, "DIVIDE_ROUND_UP")
            + snippet(cuh, r"^enum class MFMAType \{", brace=False)
            + snippet(cuh, r"^void paged_attention_custom_launcher\(", brace=True, back=3)
            + snippet(cuh, r"^void paged_attention_custom_launcher_navi\(", brace=True, back=3)
            + define(cuh, "CALL_CUSTOM_LAUNCHER")
            + define(cuh, "CALL_CUSTOM_LAUNCHER_ALIBI")}


def fa3_snippets(src: Path) -> dict[str, str]:
    """vLLM's FlashAttention-3 fork, hopper/flash_api.cpp: the functions mha_fwd calls to decide the launch,
    the statements with which it adjusts the window and causality, and those that set the split count and
    PackGQA (heuristics.h with use_one_mma_wg, tile_size.h and flash.h are included whole by the driver)."""
    api = src / "flash_api.cpp"
    mha_fwd = r"^mha_fwd\("
    return {
        "fa3_functions.inc": define(api, "PREPARE_VARLEN_MAX_BATCHES_1CTA")
        + snippet(api, r"^inline int round_up_headdim\(", brace=True)
        + snippet(api, r"^inline int round_up_headdimv\(", brace=True)
        + snippet(api, r"^inline bool get_pagedkv_tma\(", brace=True)
        + snippet(api, r"^inline bool get_pack_gqa\(", brace=True)
        + snippet(api, r"^inline int get_num_splits\(", brace=True),
        "fa3_window.inc": lines_between(api, r"if \(window_size_left >= seqlen_k - 1\)",
                                        r"^\s*is_causal = window_size_left < 0 && window_size_right == 0;",
                                        after=mha_fwd),
        "fa3_causal_local.inc": lines_between(api, r"params.is_causal = window_size_left < 0",
                                              r"params.window_size_right = window_size_right;",
                                              after=r"^void set_params_fprop\("),
        # use_prepare_varlen .. pagedkv_tma, num_splits, pack_gqa (PACKGQA_ONLY), no split above 992 sequences
        "fa3_splits.inc": lines_between(api, r"bool const use_prepare_varlen = is_varlen;",
                                        r"if \(use_prepare_varlen && params.b > PREPARE_VARLEN_MAX_BATCHES_1CTA\)",
                                        after=mha_fwd),
    }


def compile_cpp(out: Path, driver: Path, includes: list[Path], *, std: str = "c++17") -> None:
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        raise ExtractError("no C++ compiler (g++) on PATH")
    cmd = [cxx, f"-std={std}", "-O1", "-o", str(out), str(driver)]
    for inc in includes:
        cmd += ["-I", str(inc)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode:
        raise ExtractError(f"compiling {driver.name} failed:\n{res.stderr[-4000:]}")


def find_nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    for cand in sorted(Path("/usr/local").glob("cuda*/bin/nvcc"), reverse=True):
        return str(cand)
    return None


def compile_cu(out: Path, driver: Path, includes: list[Path], wraps: tuple[str, ...]) -> None:
    """nvcc for headers that mix host and device code; ``wraps`` redirect CUDA runtime calls to the
    driver's ``__wrap_*`` functions (the GPU queries become inputs)."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise ExtractError("no nvcc (CUDA toolkit) on PATH or under /usr/local/cuda*/bin")
    cmd = [nvcc, "-std=c++17", "-O1", "-w", "-o", str(out), str(driver)]
    for inc in includes:
        cmd += ["-I", str(inc)]
    for fn in wraps:
        cmd += ["-Xlinker", f"--wrap={fn}"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode:
        raise ExtractError(f"compiling {driver.name} failed:\n{res.stderr[-4000:]}")


CUDA_QUERIES = ("cudaGetDevice", "cudaDeviceGetAttribute", "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
                "cudaMemcpyAsync", "cudaLaunchKernel", "cudaFuncSetAttribute")


def build(oracles: Path) -> list[str]:
    bdir = oracles / "build"
    bdir.mkdir(parents=True, exist_ok=True)
    built = []
    # (oracle, unpacked folder, snippet extractor, driver, extra include folders below the unpacked one)
    cpp_oracles = (
        ("fa2_oracle", oracles / FA2, fa2_snippets, "fa2_driver.cpp", ("src",)),
        ("vllm_paged_oracle", oracles / VLLM11 / "csrc" / "attention", vllm_paged_snippets, "vllm_paged_driver.cpp", ()),
        ("vllm_rocm_oracle", oracles / VLLM33 / "csrc" / "rocm", vllm_rocm_snippets, "vllm_rocm_driver.cpp", ()),
        ("fa3_oracle", oracles / FA3, fa3_snippets, "fa3_driver.cpp", (".",)),
    )
    for exe, src, snippets, driver, includes in cpp_oracles:
        if not src.is_dir():
            continue
        for name, text in snippets(src).items():
            (bdir / name).write_text(text)
        compile_cpp(bdir / exe, HERE / driver, [bdir, HERE / "stubs", *(src / inc for inc in includes)])
        built.append(exe)
    fi = oracles / FI
    if fi.is_dir() and find_nvcc() is None:
        print("note: no nvcc (CUDA toolkit): the FlashInfer oracle is not built and its tests skip", file=sys.stderr)
    elif fi.is_dir():
        compile_cu(bdir / "flashinfer_oracle", HERE / "flashinfer_driver.cu", [HERE / "stubs_cuda", fi],
                   CUDA_QUERIES)
        built.append("flashinfer_oracle")
    return built


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--oracles", type=Path, default=HERE.parent.parent / "oracles")
    args = ap.parse_args()
    try:
        built = build(args.oracles)
    except ExtractError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    print("built:", ", ".join(built) or "nothing (no sources unpacked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
