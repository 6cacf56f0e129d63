// Minimal stand-ins (our own code) for the few torch/c10 names the verbatim FlashAttention host
// snippets use: tensors only carry their sizes; TORCH_CHECK throws.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

namespace c10 {
enum ScalarType { kFloat };
struct TensorOptions {
  TensorOptions dtype(ScalarType) const { return *this; }
};
}  // namespace c10

namespace at {
using c10::ScalarType;
constexpr ScalarType kFloat = c10::kFloat;
struct Tensor {
  std::vector<int64_t> shape;
  void *data_ptr() const { return nullptr; }
  int64_t size(int i) const { return shape.at(i < 0 ? shape.size() + i : i); }
};
}  // namespace at

namespace torch {
inline at::Tensor empty(std::initializer_list<int64_t> sizes, c10::TensorOptions) { return at::Tensor{sizes}; }
}  // namespace torch

#define TORCH_CHECK(cond, ...) \
  do { if (!(cond)) throw std::runtime_error(std::string("TORCH_CHECK failed: ") + #cond); } while (0)
