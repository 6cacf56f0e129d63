// FlashAttention-3 host oracle for vLLM's fork (hopper/, vllm-project/flash-attention @617264c1, the closest
// available commit to the b273a026 vLLM 0.33 pins): our driver around the fork's own decision code.
// heuristics.h (use_one_mma_wg, should_pack_gqa, num_splits_heuristic), tile_size.h and flash.h
// (Flash_fwd_params) are included whole; round_up_headdim(v), get_pagedkv_tma, get_pack_gqa,
// get_num_splits, the window / causality statements of mha_fwd and set_params_fprop, and mha_fwd's
// split / PackGQA statements (L1053-1070) come verbatim from flash_api.cpp (oracles/build/fa3_*.inc).
// The driver sets the fields mha_fwd sets, in its order (L863-877, set_params_fprop, L990-1003), for a
// call as vLLM makes it (cu_seqlens_q and seqused_k), with vLLM's build flag FLASHATTENTION_PACKGQA_ONLY
// (CMakeLists.txt L311).
//
// stdin, one case per line:
//   batch seqlen_q num_heads num_heads_k head_size head_size_v max_seqlen_k page_size(0: not paged)
//   window_left window_right causal e4m3 num_sms varlen num_splits_arg
// stdout: d_rounded dv_rounded is_causal is_local pagedkv_tma kBlockM kBlockN num_splits pack_gqa
//         use_one_mma_wg use_dynamic_split
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <tuple>

#include "cuda.h"
#include "flash.h"
#include "heuristics.h"
#include "tile_size.h"

#define FLASHATTENTION_PACKGQA_ONLY  // vLLM's CMakeLists.txt L311 (and hopper/setup.py L94)

#include "fa3_functions.inc"

int main() {
  int b, seqlen_q, h, h_k, head_size, head_size_v, seqlen_k, page_size, window_size_left, window_size_right, causal,
      e4m3, num_sm, varlen, num_splits;
  static int dummy[1];
  while (std::cin >> b >> seqlen_q >> h >> h_k >> head_size >> head_size_v >> seqlen_k >> page_size >>
         window_size_left >> window_size_right >> causal >> e4m3 >> num_sm >> varlen >> num_splits) {
    bool is_causal = causal != 0;
    const bool paged_KV = page_size > 0;
    const bool is_varlen = varlen != 0;  // L927: cu_seqlens_q / seqused_k given
    const std::optional<bool> pack_gqa_;  // vLLM leaves pack_gqa to the heuristic
#include "fa3_window.inc"
    Flash_fwd_params params{};
    params.b = b;  // set_params_fprop
    params.h = h;
    params.h_k = h_k;
    params.seqlen_q = seqlen_q;
    params.seqlen_k = seqlen_k;
    params.d = head_size;
    params.d_rounded = round_up_headdim(head_size);
    params.is_e4m3 = e4m3 != 0;
    params.arch = 90;
    params.num_sm = num_sm;
    params.cu_seqlens_q = varlen ? dummy : nullptr;  // vLLM passes cu_seqlens_q and seqused_k (varlen)
    params.seqused_k = varlen ? dummy : nullptr;
    params.softcap = 0.f;
#include "fa3_causal_local.inc"
    params.dv = head_size_v;  // mha_fwd L993-1002
    params.dv_rounded = head_size_v == head_size ? params.d_rounded : round_up_headdimv(head_size_v);
    params.page_table = paged_KV ? dummy : nullptr;
    params.page_size = paged_KV ? page_size : 1;
#include "fa3_splits.inc"
    auto tile = tile_size_fwd_sm90(params.d_rounded, params.dv_rounded, params.is_causal, params.is_local,
                                   params.is_e4m3 ? 1 : 2, false, params.page_table && !params.pagedkv_tma,
                                   params.softcap > 0.f, use_one_mma_wg(params));
    std::printf("%d %d %d %d %d %d %d %d %d %d %d\n", params.d_rounded, params.dv_rounded, params.is_causal ? 1 : 0,
                params.is_local ? 1 : 0, params.pagedkv_tma ? 1 : 0, std::get<0>(tile), std::get<1>(tile),
                params.num_splits, params.pack_gqa ? 1 : 0, use_one_mma_wg(params) ? 1 : 0,
                use_dynamic_split ? 1 : 0);
  }
  return 0;
}
