// FlashInfer (flashinfer-python 0.7.2.post1) decode-plan oracle: our driver around upstream's own
// host code. include/flashinfer/attention/scheduler.cuh is included whole and unmodified;
// DecodePlanImpl, BatchDecodeWithPagedKVCacheWorkEstimationDispatched,
// PartitionPagedKVCacheBinarySearchMinNumPagePerBatch and DecodeSplitKVIndptr run as shipped, with
// upstream's DISPATCH_HEAD_DIM / DISPATCH_GQA_GROUP_SIZE picking the instantiation.
//
// The GPU queries are inputs: the CUDA runtime calls the plan makes (device, SM count, compute
// capability, cudaOccupancyMaxActiveBlocksPerMultiprocessor) are redirected at link time
// (-Wl,--wrap) to the functions below, which answer from the case line and record the kernel's
// threads and shared memory. Nothing runs on a GPU.
//
// stdin, one case per line, CUDA-core decode plan (DecodePlanImpl):
//   D head_dim group_size num_qo_heads kv_bytes page_size cuda_graph num_sms occupancy cc_major cc_minor batch pages_0 ... pages_{b-1}
// stdout:
//   split_kv max_grid_size kv_chunk_pages new_batch_size padded_batch_size gdy threads smem chunks_0 ... chunks_{b-1}
//   or "error <message>"
// or the merge of split-KV partial states the decode runs after a split (cascade.cuh
// VariableLengthMergeStates, called by decode.cuh L830-832 with max_seq_len = batch size and the output
// dtype for the partial states), its launch recorded through a wrapped cudaLaunchKernel:
//   M head_dim num_heads batch num_sms occupancy out_bytes
// stdout: grid.x block.x block.y smem
// or the tensor-core decode plan (PrefillPlanImpl<MATERIALIZE=true> into host buffers):
//   P head_dim_qk head_dim_vo num_qo_heads num_kv_heads kv_bytes page_size cuda_graph num_sms cc_major cc_minor
//     smem_optin window_left fixed_split_size disable_split_kv uniform_q_len batch q_0 .. q_{b-1} pages_0 .. pages_{b-1}
// stdout:
//   split_kv padded_batch_size cta_tile_q kv_chunk_size_tokens new_batch_size chunks_0 ... chunks_{b-1}
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <flashinfer/attention/cascade.cuh>
#include <flashinfer/attention/scheduler.cuh>

namespace {
int g_num_sms = 132, g_occupancy = 1, g_cc_major = 9, g_cc_minor = 0, g_smem_optin = 232448;
int g_threads = 0;
size_t g_smem = 0;
}  // namespace

extern "C" {
cudaError_t __wrap_cudaGetDevice(int *device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t __wrap_cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int) {
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = g_num_sms; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = g_cc_major; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = g_cc_minor; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = g_smem_optin; return cudaSuccess;
    default: return cudaErrorInvalidValue;
  }
}
cudaError_t __wrap_cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *num_blocks, const void *, int threads,
                                                                          size_t smem, unsigned int) {
  g_threads = threads;
  g_smem = smem;
  *num_blocks = g_occupancy;
  return cudaSuccess;
}
dim3 g_grid, g_block;
size_t g_launch_smem = 0;
cudaError_t __wrap_cudaLaunchKernel(const void *, dim3 grid, dim3 block, void **, size_t smem, cudaStream_t) {
  g_grid = grid;
  g_block = block;
  g_launch_smem = smem;
  return cudaSuccess;
}
cudaError_t __wrap_cudaFuncSetAttribute(const void *, cudaFuncAttribute, int) { return cudaSuccess; }
cudaError_t __wrap_cudaMemcpyAsync(void *, const void *, size_t, cudaMemcpyKind, cudaStream_t) {
  return cudaSuccess;  // the plan's upload of its host buffer: nothing to upload to
}
}

namespace flashinfer {
// The decode kernel is only named by the plan (its address goes to the occupancy query): an empty
// definition of upstream's declaration, never launched.
template <PosEncodingMode POS_ENCODING_MODE, uint32_t num_stages_smem, uint32_t tile_size_per_bdx,
          uint32_t vec_size, uint32_t bdx, uint32_t bdy, uint32_t bdz, typename AttentionVariant,
          typename Params>
__global__ void BatchDecodeWithPagedKVCacheKernel(const __grid_constant__ Params params) {}
}  // namespace flashinfer

template <typename KV>
struct DecodeParams {  // the two types the plan reads from the kernel's Params
  using DTypeKV = KV;
  using IdType = int32_t;
};
struct NoVariant {};

template <typename KV>
int plan(uint32_t head_dim, uint32_t group_size, uint32_t num_qo_heads, uint32_t page_size, bool cuda_graph,
         std::vector<int32_t> &indptr) {
  using namespace flashinfer;
  using P = DecodeParams<KV>;
  const uint32_t batch = indptr.size() - 1;
  bool split = false;
  uint32_t max_grid = 0, chunk = 0, new_bs = 0, gdy = 0;
  DecodePlanInfo info;
  size_t fsize = 0, isize = 0;
  cudaError_t st = cudaErrorInvalidValue;
  DISPATCH_HEAD_DIM(head_dim, HEAD_DIM, {
    DISPATCH_GQA_GROUP_SIZE(group_size, GROUP_SIZE, {
      auto estimate = [&](bool &split_kv, uint32_t &max_grid_size, uint32_t &max_num_pages_per_batch,
                          uint32_t &new_batch_size, uint32_t &gdy_out, uint32_t batch_size, int32_t *kv_indptr_h,
                          uint32_t nq, uint32_t ps, bool graph, cudaStream_t stream) {
        cudaError_t e = BatchDecodeWithPagedKVCacheWorkEstimationDispatched<GROUP_SIZE, HEAD_DIM,
                                                                            PosEncodingMode::kNone, NoVariant, P>(
            split_kv, max_grid_size, max_num_pages_per_batch, new_batch_size, gdy_out, batch_size, kv_indptr_h, nq,
            ps, graph, stream);
        split = split_kv;
        max_grid = max_grid_size;
        chunk = max_num_pages_per_batch;
        new_bs = new_batch_size;
        gdy = gdy_out;
        return e;
      };
      st = DecodePlanImpl<false, HEAD_DIM, PosEncodingMode::kNone, NoVariant, P>(
          fsize, isize, nullptr, 0, nullptr, nullptr, 0, info, indptr.data(), batch, num_qo_heads, page_size,
          cuda_graph, nullptr, estimate);
    });
  });
  if (st != cudaSuccess) throw std::runtime_error("plan failed");
  auto [req, tiles, o_indptr] = DecodeSplitKVIndptr(indptr.data(), batch, chunk);
  std::printf("%d %u %u %u %zu %u %d %zu", info.split_kv ? 1 : 0, max_grid, chunk, new_bs,
              (size_t)info.padded_batch_size, gdy, g_threads, g_smem);
  for (uint32_t i = 0; i < batch; ++i) std::printf(" %d", o_indptr[i + 1] - o_indptr[i]);
  std::printf("\n");
  return 0;
}

template <typename T>
void merge(uint32_t head_dim, uint32_t num_heads, uint32_t batch) {
  T *v = nullptr;
  float *s = nullptr;
  int32_t *indptr = nullptr;
  cudaError_t st = flashinfer::VariableLengthMergeStates<T, T, int32_t>(v, s, indptr, v, s, batch, nullptr, num_heads,
                                                                        head_dim, false, nullptr);
  if (st != cudaSuccess) throw std::runtime_error("merge launch failed");
  std::printf("%u %u %u %zu\n", g_grid.x, g_block.x, g_block.y, g_launch_smem);
}

void prefill_plan(std::istringstream &in) {
  using namespace flashinfer;
  uint32_t d_qk, d_vo, hq, hkv, kv_bytes, page, graph, batch;
  int32_t window_left, fixed_split, disable_split;
  int64_t uniform_q_len;
  in >> d_qk >> d_vo >> hq >> hkv >> kv_bytes >> page >> graph >> g_num_sms >> g_cc_major >> g_cc_minor >>
      g_smem_optin >> window_left >> fixed_split >> disable_split >> uniform_q_len >> batch;
  std::vector<int32_t> qo{0}, kv{0};
  for (uint32_t i = 0; i < batch; ++i) { int32_t q; in >> q; qo.push_back(qo.back() + q); }
  for (uint32_t i = 0; i < batch; ++i) { int32_t p; in >> p; kv.push_back(kv.back() + p); }
  std::vector<int32_t> host(1 << 22, -1);  // page-locked buffer stand-in; -1 marks slots never written
  std::vector<char> dev(1);
  PrefillPlanInfo info;
  size_t fsize = 0, isize = 0;
  cudaError_t st = PrefillPlanImpl<true, int32_t>(
      fsize, isize, dev.data(), size_t(1) << 40, dev.data(), host.data(), host.size() * sizeof(int32_t), info,
      qo.data(), kv.data(), qo.back(), batch, hq, hkv, d_qk, d_vo, page, graph != 0, 2, window_left, fixed_split,
      disable_split != 0, 0, uniform_q_len, nullptr, kv_bytes);
  if (st != cudaSuccess) throw std::runtime_error("plan failed");
  const int32_t *req = GetPtrFromBaseOffset<int32_t>(host.data(), info.request_indices_offset);
  const int32_t *qtile = GetPtrFromBaseOffset<int32_t>(host.data(), info.qo_tile_indices_offset);
  const int32_t *chunk = GetPtrFromBaseOffset<int32_t>(host.data(), info.kv_chunk_size_ptr_offset);
  std::vector<int> chunks(batch, 0);
  int64_t new_bs = 0;
  for (int64_t i = 0; i < info.padded_batch_size; ++i) {
    if (req[i] < 0) continue;
    ++new_bs;
    if (qtile[i] == 0) ++chunks[req[i]];
  }
  std::printf("%d %lld %lld %d %lld", info.split_kv ? 1 : 0, (long long)info.padded_batch_size,
              (long long)info.cta_tile_q, chunk[0], (long long)new_bs);
  for (uint32_t i = 0; i < batch; ++i) std::printf(" %d", chunks[i]);
  std::printf("\n");
}

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string mode;
    in >> mode;
    if (mode == "M") {
      uint32_t d, heads, batch, out_bytes;
      in >> d >> heads >> batch >> g_num_sms >> g_occupancy >> out_bytes;
      try {
        if (out_bytes != 2) throw std::runtime_error("fp16/bf16 outputs only");
        merge<nv_bfloat16>(d, heads, batch);
      } catch (const std::exception &e) {
        std::printf("error %s\n", e.what());
      }
      continue;
    }
    if (mode == "P") {
      try {
        prefill_plan(in);
      } catch (const std::exception &e) {
        std::printf("error %s\n", e.what());
      }
      continue;
    }
    uint32_t head_dim, group, num_qo_heads, kv_bytes, page, graph, batch;
    if (!(in >> head_dim >> group >> num_qo_heads >> kv_bytes >> page >> graph >> g_num_sms >> g_occupancy >> g_cc_major >> g_cc_minor >>
        batch)) continue;
    std::vector<int32_t> indptr{0};
    for (uint32_t i = 0; i < batch; ++i) {
      int32_t p;
      in >> p;
      indptr.push_back(indptr.back() + p);
    }
    try {
      if (kv_bytes == 1) {
        plan<uint8_t>(head_dim, group, num_qo_heads, page, graph != 0, indptr);
      } else {
        plan<uint16_t>(head_dim, group, num_qo_heads, page, graph != 0, indptr);
      }
    } catch (const std::exception &e) {
      std::printf("error %s\n", e.what());
    }
  }
  return 0;
}
