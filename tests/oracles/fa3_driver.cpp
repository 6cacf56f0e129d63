// FlashAttention-3 (hopper/, Dao-AILab/flash-attention @0251105a) host oracle: our driver around
// upstream's own decision code. heuristics.h, tile_size.h and flash.h (Flash_fwd_params) are
// included whole; round_up_headdim(v), get_pagedkv_tma, get_pack_gqa, get_num_splits and the
// window / causality statements of mha_fwd and set_params_fprop come verbatim from flash_api.cpp
// (oracles/build/fa3_*.inc). The driver sets the fields mha_fwd sets, in its order (L796-805, L849,
// L977-985), for a varlen call with seqused_k as vLLM makes it.
//
// stdin, one case per line:
//   batch seqlen_q num_heads num_heads_k head_size head_size_v max_seqlen_k page_size(0: not paged)
//   window_left window_right causal e4m3 num_sms varlen num_splits_arg
// stdout: d_rounded dv_rounded is_causal is_local pagedkv_tma kBlockM kBlockN num_splits pack_gqa
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <tuple>

#include "cuda.h"
#include "flash.h"
#include "heuristics.h"
#include "tile_size.h"

#include "fa3_functions.inc"

int main() {
  int b, seqlen_q, h, h_k, head_size, head_size_v, seqlen_k, page_size, window_size_left, window_size_right, causal,
      e4m3, num_sm, varlen, num_splits;
  static int dummy[1];
  while (std::cin >> b >> seqlen_q >> h >> h_k >> head_size >> head_size_v >> seqlen_k >> page_size >>
         window_size_left >> window_size_right >> causal >> e4m3 >> num_sm >> varlen >> num_splits) {
    bool is_causal = causal != 0;
    const bool paged_KV = page_size > 0;
    const int attention_chunk = 0;
#include "fa3_window.inc"
    Flash_fwd_params params{};
    params.b = b;  // set_params_fprop
    params.h = h;
    params.h_k = h_k;
    params.seqlen_q = seqlen_q;
    params.seqlen_k = seqlen_k;
    params.d = head_size;
    params.dv = head_size_v;
    params.d_rounded = round_up_headdim(head_size);
    params.dv_rounded = head_size_v == head_size ? params.d_rounded : round_up_headdimv(head_size_v);
    params.is_e4m3 = e4m3 != 0;
    params.arch = 90;
    params.num_sm = num_sm;
    params.page_table = paged_KV ? dummy : nullptr;
    params.page_size = paged_KV ? page_size : 1;
    params.seqused_k = varlen ? dummy : nullptr;  // vLLM passes seqused_k (varlen)
    params.softcap = 0.f;
    params.window_size_left = window_size_left;
    params.window_size_right = window_size_right;
#include "fa3_causal_local.inc"
    const bool use_prepare_varlen = varlen != 0;  // L977-985
    params.num_splits_dynamic_ptr = !use_prepare_varlen ? nullptr : reinterpret_cast<int *>(1);
    params.pagedkv_tma = get_pagedkv_tma(params);
    params.num_splits = num_splits <= 0 ? get_num_splits(params) : num_splits;
    params.pack_gqa = get_pack_gqa(params);
    auto tile = tile_size_fwd_sm90(params.d_rounded, params.dv_rounded, params.is_causal, params.is_local,
                                   params.is_e4m3 ? 1 : 2, false, params.page_table && !params.pagedkv_tma,
                                   params.softcap > 0.f);
    std::printf("%d %d %d %d %d %d %d %d %d\n", params.d_rounded, params.dv_rounded, params.is_causal ? 1 : 0,
                params.is_local ? 1 : 0, params.pagedkv_tma ? 1 : 0, std::get<0>(tile), std::get<1>(tile),
                params.num_splits, params.pack_gqa ? 1 : 0);
  }
  return 0;
}
