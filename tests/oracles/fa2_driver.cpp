// FlashAttention-2 (flash-attn 2.8.3.post2) host oracle: our driver around upstream's own host code.
//
// Upstream, unmodified: flash.h (Flash_fwd_params), namespace_config.h and static_switch.h are
// included whole; num_splits_heuristic, set_params_splitkv, run_mha_fwd and the statements of
// mha_fwd_kvcache / the split launch template are #included from oracles/build/fa2_*.inc, copied
// verbatim by tests/oracles/build.py. This file only supplies inputs in mha_fwd_kvcache's order and
// records what the launch template would launch.
//
// stdin, one case per line:
//   H batch_nheads_mblocks num_SMs num_n_blocks max_splits        -> num_splits_heuristic's answer
//   K batch seqlen_q num_heads num_heads_k head_size_og window_left window_right paged cache_len
//   page_block_size max_num_blocks_per_seq num_splits num_sms
// stdout, one line per K case:
//   swapped seqlen_k head_size_rounded num_splits split_kernel kHeadDim kBlockN grid.x grid.y grid.z combine
//   or "error <message>" when upstream's own checks reject the case.
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include "torch_min.h"
#include "cuda.h"
#include "cutlass/numeric_types.h"
#include "namespace_config.h"
#include "flash.h"
#include "static_switch.h"

namespace FLASH_NAMESPACE {

#include "fa2_functions.inc"

struct Launch {
  bool split = false;
  int head_dim = 0, block_n = 0;
  dim3 grid{0, 0, 0}, combine{0, 0, 0};
};
static Launch g_launch;

template <int Headdim, int BlockM, int BlockN>
struct Traits {
  static constexpr int kHeadDim = Headdim, kBlockM = BlockM, kBlockN = BlockN;
};

// run_flash_splitkv_fwd's grid statements (launch template L105-107, L140-141)
template <typename Kernel_traits>
void record_splitkv(Flash_fwd_params &params) {
#include "fa2_split_grid.inc"
  g_launch.grid = grid;
  if (params.num_splits > 1) {
#include "fa2_combine_grid.inc"
    g_launch.combine = grid_combine;
  }
}

template <typename T, int Headdim, bool Is_causal>
void run_mha_fwd_splitkv_dispatch(Flash_fwd_params &params, cudaStream_t) {
  constexpr static int kBlockM = 64;  // launch template L165 ("Fixed for all head dimensions")
#include "fa2_split_kblockn.inc"
  g_launch.split = true;
  g_launch.head_dim = Headdim;
  g_launch.block_n = kBlockN;
  record_splitkv<Traits<Headdim, kBlockM, kBlockN>>(params);
}

// The non-split forward kernel: its kBlockM depends on the head dim and the GPU; only the path and
// grid dims 1, 2 ((num_m_block, b, h), launch template L63-64) are recorded.
template <typename T, int Headdim, bool Is_causal>
void run_mha_fwd_(Flash_fwd_params &params, cudaStream_t) {
  g_launch.split = false;
  g_launch.head_dim = Headdim;
  g_launch.grid = dim3(0, params.b, params.h);
}

#include "fa2_run_mha_fwd.inc"

struct Cache {  // kcache as mha_fwd_kvcache sees it: only size(1) is read
  int64_t len;
  int64_t size(int) const { return len; }
};

void one_case(int batch_size, int seqlen_q, int num_heads, int num_heads_k, int head_size_og, int window_size_left,
              int window_size_right, bool paged_KV, int cache_len, int page_block_size, int max_num_blocks_per_seq,
              int num_splits, int num_sm) {
  std::optional<int> alibi_slopes_, k_, cache_batch_idx_;  // absent: decode without appending keys
  Cache kcache{cache_len};
  cudaStream_t stream = nullptr;
#include "fa2_kvcache_seqlen_k.inc"
#include "fa2_kvcache_swap.inc"
  if (seqlenq_ngroups_swapped) {  // flash_api.cpp L1279-1284: (b, 1, h, d) -> (b, g, h_k, d)
    const int ngroups = num_heads / num_heads_k;
    seqlen_q = ngroups;
    num_heads = num_heads_k;
  }
#include "fa2_kvcache_round.inc"
  Flash_fwd_params params{};
  params.b = batch_size;  // set_params_fprop L97-105
  params.h = num_heads;
  params.h_k = num_heads_k;
  params.seqlen_q = seqlen_q;
  params.seqlen_k = seqlen_k;
  params.d = head_size;
  params.is_bf16 = true;
  params.is_causal = false;  // seqlen_q == 1 (or swapped): not causal (L1273)
  c10::TensorOptions opts;
  set_params_splitkv(params, batch_size, num_heads, head_size, seqlen_k, seqlen_q, head_size_rounded, 0.f,
                     num_splits, num_sm, opts);
  g_launch = Launch{};
#include "fa2_kvcache_run.inc"
  std::printf("%d %d %d %d %d %d %d %u %u %u %u\n", seqlenq_ngroups_swapped, seqlen_k, head_size_rounded,
              params.num_splits, g_launch.split ? 1 : 0, g_launch.head_dim, g_launch.block_n, g_launch.grid.x,
              g_launch.grid.y, g_launch.grid.z, g_launch.combine.x);
}

}  // namespace FLASH_NAMESPACE

int main() {
  std::string kind;
  while (std::cin >> kind) {
    try {
      if (kind == "H") {  // H batch_nheads_mblocks num_SMs num_n_blocks max_splits: the heuristic alone
        int a, n_sm, n_blocks, max_splits;
        std::cin >> a >> n_sm >> n_blocks >> max_splits;
        std::printf("%d\n", FLASH_NAMESPACE::num_splits_heuristic(a, n_sm, n_blocks, max_splits));
      } else {  // K ...: one mha_fwd_kvcache call
        int b, sq, h, hk, d, wl, wr, paged, cache_len, page, nblk, ns, nsm;
        std::cin >> b >> sq >> h >> hk >> d >> wl >> wr >> paged >> cache_len >> page >> nblk >> ns >> nsm;
        FLASH_NAMESPACE::one_case(b, sq, h, hk, d, wl, wr, paged != 0, cache_len, page, nblk, ns, nsm);
      }
    } catch (const std::exception &e) {
      std::printf("error %s\n", e.what());
    }
  }
  return 0;
}
