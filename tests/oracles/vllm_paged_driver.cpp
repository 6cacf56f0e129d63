// vLLM 0.11.0 legacy PagedAttention launchers (csrc/attention/paged_attention_v{1,2}.cu): our driver
// around upstream's launcher templates and block-size dispatch macros, copied verbatim into
// oracles/build/vpa_v{1,2}.inc by tests/oracles/build.py. The kernel launch macro is ours: it records
// grid, block and shared memory instead of launching.
//
// stdin, one case per line:  v1|v2 num_seqs num_heads num_kv_heads head_size block_size max_seq_len
// stdout: grid.x grid.y grid.z threads shared_mem reduce.x reduce.y reduce_shared_mem  (or "error <message>")
#include <cstdio>
#include <iostream>
#include <string>

#include "vllm_paged_torch_min.h"

struct Launch {
  dim3 grid{0, 0, 0}, block{0, 0, 0}, reduce{0, 0, 0};
  int smem = 0, reduce_smem = 0;
};
static Launch g;

#define LAUNCH_PAGED_ATTENTION_V1(HEAD_SIZE) \
  g.grid = grid;                             \
  g.block = block;                           \
  g.smem = shared_mem_size;
#define LAUNCH_PAGED_ATTENTION_V2(HEAD_SIZE) \
  g.grid = grid;                             \
  g.block = block;                           \
  g.smem = shared_mem_size;                  \
  g.reduce = reduce_grid;                    \
  g.reduce_smem = reduce_shared_mem_size;

namespace v1 {
#include "vpa_v1.inc"
#undef DIVIDE_ROUND_UP
}  // namespace v1
namespace v2 {
#include "vpa_v2.inc"
#undef DIVIDE_ROUND_UP
}  // namespace v2

// The arguments of paged_attention_v{1,2} (the entry points) as ops.paged_attention_v* passes them.
void run(const std::string &v, int num_seqs, int num_heads, int64_t num_kv_heads, int head_size, int64_t block_size,
         int64_t max_seq_len) {
  const int64_t blocks = (max_seq_len + block_size - 1) / block_size;
  torch::Tensor query = torch::contiguous({num_seqs, num_heads, head_size});
  torch::Tensor out = query;
  torch::Tensor key_cache = torch::contiguous({blocks * num_seqs, num_kv_heads, head_size / 8, block_size, 8});
  torch::Tensor value_cache = torch::contiguous({blocks * num_seqs, num_kv_heads, head_size, block_size});
  torch::Tensor block_tables = torch::contiguous({num_seqs, blocks});
  torch::Tensor seq_lens = torch::contiguous({num_seqs});
  torch::Tensor k_scale, v_scale;
  const int64_t partitions = (max_seq_len + 511) / 512;
  torch::Tensor exp_sums = torch::contiguous({num_seqs, num_heads, partitions}), max_logits = exp_sums;
  torch::Tensor tmp_out = torch::contiguous({num_seqs, num_heads, partitions, head_size});
  std::optional<torch::Tensor> alibi_slopes;
  double scale = 1.0;
  const int64_t tp_rank = 0, blocksparse_local_blocks = 0, blocksparse_vert_stride = 0,
                blocksparse_block_size = 64, blocksparse_head_sliding_step = 0;
  const bool is_block_sparse = (blocksparse_vert_stride > 1);
  g = Launch{};
  if (v == "v1") {
    using namespace v1;
    CALL_V1_LAUNCHER_BLOCK_SIZE(uint16_t, uint16_t, vllm::Fp8KVCacheDataType::kAuto)
  } else {
    using namespace v2;
    CALL_V2_LAUNCHER_BLOCK_SIZE(uint16_t, uint16_t, vllm::Fp8KVCacheDataType::kAuto)
  }
  std::printf("%u %u %u %u %d %u %u %d\n", g.grid.x, g.grid.y, g.grid.z, g.block.x, g.smem, g.reduce.x, g.reduce.y,
              g.reduce_smem);
}

int main() {
  std::string v;
  int b, h, hk, d, block, len;
  while (std::cin >> v >> b >> h >> hk >> d >> block >> len) {
    try {
      run(v, b, h, hk, d, block, len);
    } catch (const std::exception &e) {
      std::printf("error %s\n", e.what());
    }
  }
  return 0;
}
