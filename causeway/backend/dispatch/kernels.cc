#include "causeway/backend/dispatch/kernels.h"

#include <cstddef>

namespace causeway::backend::dispatch {
namespace {

// In Kernel order.
constexpr const char* kNames[] = {
    "binary_f32",  "binary_i32",      "unary_f32",       "unary_i32",     "compare_f32",
    "compare_i32", "compare_u8",      "select_b32",      "select_b8",     "convert",
    "iota",        "copy_b32",        "copy_b8",         "reduce_f32",    "reduce_i32",
    "matmul_f32",  "matmul_i32",      "gather_b32",      "gather_b8",     "scatter_add_f32",
    "scatter_add_i32", "rng",         "rows_f32",        "matmul_f32_cpu", "rows_f32_cpu",
    "members_f32", "members_i32",     "conv_f32",        "argsort",       "fused_f32",
    "matmul_f32_large",
};
static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(Kernel::kNumKernels));

}  // namespace

const char* KernelName(Kernel kernel) {
  const int k = static_cast<int>(kernel);
  return k >= 0 && k < static_cast<int>(Kernel::kNumKernels) ? kNames[k] : "?";
}

}  // namespace causeway::backend::dispatch
