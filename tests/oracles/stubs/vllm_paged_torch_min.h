// Minimal stand-ins (our own code) for the torch/ATen names vLLM's paged-attention launchers use:
// tensors carry sizes and strides only; TORCH_CHECK throws; no CUDA.
#pragma once
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>
#include "cuda.h"

namespace torch {
struct Tensor {
  std::vector<int64_t> sizes_, strides_;
  int64_t size(int i) const { return sizes_.at(i); }
  int64_t stride(int i) const { return strides_.at(i); }
  void *data_ptr() const { return nullptr; }
  template <typename T>
  T *data_ptr() const { return nullptr; }
};
inline Tensor contiguous(std::vector<int64_t> sizes) {
  Tensor t;
  t.sizes_ = sizes;
  t.strides_.assign(sizes.size(), 1);
  for (int i = int(sizes.size()) - 2; i >= 0; --i) t.strides_[i] = t.strides_[i + 1] * sizes[i + 1];
  return t;
}
}  // namespace torch

namespace at::cuda {
struct OptionalCUDAGuard {
  explicit OptionalCUDAGuard(int) {}
};
inline cudaStream_t getCurrentCUDAStream() { return nullptr; }
}  // namespace at::cuda
inline int device_of(const torch::Tensor &) { return 0; }

namespace vllm {
enum class Fp8KVCacheDataType { kAuto = 0, kFp8E4M3 = 1, kFp8E5M2 = 2 };
}

#ifndef WARP_SIZE
#define WARP_SIZE 32  // csrc/cuda_compat.h: 32 on CUDA
#endif

template <typename... Args>
std::string torch_check_msg(const Args &...args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
#define TORCH_CHECK(cond, ...) \
  do { if (!(cond)) throw std::runtime_error(torch_check_msg(__VA_ARGS__)); } while (0)
