// vLLM 0.33.0 ROCm custom paged attention (csrc/rocm/attention_kernels.cuh): our driver around
// upstream's two launcher templates (CDNA and RDNA "navi") and the macro that picks between them,
// copied verbatim into oracles/build/vllm_rocm.inc by tests/oracles/build.py. The kernel launch
// macros are ours: they record the kernel, grid and block instead of launching.
//
// stdin, one case per line:  navi num_seqs num_heads num_kv_heads head_size block_size max_seq_len
// stdout: kernel grid.x grid.y grid.z threads reduce.x reduce.y reduce_threads npar_loops  (or "error <message>")
#include <cassert>
#include <cstdio>
#include <iostream>
#include <string>

#include "vllm_paged_torch_min.h"

struct Launch {
  std::string kernel = "none";
  dim3 grid{0, 0, 0}, block{0, 0, 0}, reduce{0, 0, 0}, reduce_block{0, 0, 0};
  int npar = 0;
};
static Launch g;

#define LAUNCH_CUSTOM_ATTENTION_MFMA4(GQA_RATIO) \
  g.kernel = "mfma4";                            \
  g.grid = grid;                                 \
  g.block = block;
#define LAUNCH_CUSTOM_ATTENTION_MFMA16(GQA_RATIO) \
  g.kernel = "mfma16";                            \
  g.grid = grid;                                  \
  g.block = block;
#define LAUNCH_CUSTOM_REDUCTION(NPAR_LOOPS) \
  g.reduce = reduce_grid;                   \
  g.reduce_block = reduce_block;            \
  g.npar = NPAR_LOOPS;

#undef WARP_SIZE
#define WARP_SIZE 64  // csrc/cuda_compat.h: 64 on ROCm (the CDNA launcher's reduce loop count)

#include "vllm_rocm.inc"

template <int BLK_SIZE, int HEAD_SIZE>
void launch(bool is_navi, int num_seqs, int num_heads, int num_kv_heads, int max_seq_len) {
  const int blocks = (max_seq_len + BLK_SIZE - 1) / BLK_SIZE;
  torch::Tensor query = torch::contiguous({num_seqs, num_heads, HEAD_SIZE}), out = query;
  torch::Tensor key_cache = torch::contiguous({blocks * num_seqs, num_kv_heads, HEAD_SIZE / 8, BLK_SIZE, 8});
  torch::Tensor value_cache = torch::contiguous({blocks * num_seqs, num_kv_heads, HEAD_SIZE, BLK_SIZE});
  torch::Tensor block_tables = torch::contiguous({num_seqs, blocks}), seq_lens = torch::contiguous({num_seqs});
  const int partitions = (max_seq_len + 255) / 256;
  torch::Tensor exp_sums = torch::contiguous({num_seqs, num_heads, partitions}), max_logits = exp_sums;
  torch::Tensor tmp_out = torch::contiguous({num_seqs, num_heads, partitions, HEAD_SIZE});
  torch::Tensor k_scale, v_scale;
  std::optional<torch::Tensor> query_start_loc, alibi_slopes, fp8_out_scale;
  float scale = 1.0f;
  const bool use_interleaved_v_cache = false;
  CALL_CUSTOM_LAUNCHER_ALIBI(uint16_t, uint16_t, vllm::Fp8KVCacheDataType::kAuto, BLK_SIZE, HEAD_SIZE, uint16_t, 256,
                             MFMAType::F16)
}

int main() {
  int navi, b, h, hk, d, block, len;
  while (std::cin >> navi >> b >> h >> hk >> d >> block >> len) {
    g = Launch{};
    try {
      // the compiled head sizes and block sizes (attention_paged_attn_h{64,128}_*.cu; block 16 or 32)
      if (d == 64 && block == 16) launch<16, 64>(navi, b, h, hk, len);
      else if (d == 64 && block == 32) launch<32, 64>(navi, b, h, hk, len);
      else if (d == 128 && block == 16) launch<16, 128>(navi, b, h, hk, len);
      else if (d == 128 && block == 32) launch<32, 128>(navi, b, h, hk, len);
      else throw std::runtime_error("head size / block size not compiled");
      std::printf("%s %u %u %u %u %u %u %u %d\n", g.kernel.c_str(), g.grid.x, g.grid.y, g.grid.z, g.block.x,
                  g.reduce.x, g.reduce.y, g.reduce_block.x, g.npar);
    } catch (const std::exception &e) {
      std::printf("error %s\n", e.what());
    }
  }
  return 0;
}
