#include "causeway/backend/vulkan/kernels.h"

#include <algorithm>

namespace causeway::backend::vulkan {
namespace {

// SPIR-V words of each shader: glslc writes each initializer (-mfmt=c).
constexpr uint32_t kBinaryF32[] =
#include "shaders/binary_f32.spv.inc"
    ;
constexpr uint32_t kBinaryI32[] =
#include "shaders/binary_i32.spv.inc"
    ;
constexpr uint32_t kUnaryF32[] =
#include "shaders/unary_f32.spv.inc"
    ;
constexpr uint32_t kUnaryI32[] =
#include "shaders/unary_i32.spv.inc"
    ;
constexpr uint32_t kCompareF32[] =
#include "shaders/compare_f32.spv.inc"
    ;
constexpr uint32_t kCompareI32[] =
#include "shaders/compare_i32.spv.inc"
    ;
constexpr uint32_t kCompareU8[] =
#include "shaders/compare_u8.spv.inc"
    ;
constexpr uint32_t kSelectB32[] =
#include "shaders/select_b32.spv.inc"
    ;
constexpr uint32_t kSelectB8[] =
#include "shaders/select_b8.spv.inc"
    ;
constexpr uint32_t kConvert[] =
#include "shaders/convert.spv.inc"
    ;
constexpr uint32_t kIota[] =
#include "shaders/iota.spv.inc"
    ;
constexpr uint32_t kCopyB32[] =
#include "shaders/copy_b32.spv.inc"
    ;
constexpr uint32_t kCopyB8[] =
#include "shaders/copy_b8.spv.inc"
    ;
constexpr uint32_t kReduceF32[] =
#include "shaders/reduce_f32.spv.inc"
    ;
constexpr uint32_t kReduceI32[] =
#include "shaders/reduce_i32.spv.inc"
    ;
constexpr uint32_t kMatmulF32[] =
#include "shaders/matmul_f32.spv.inc"
    ;
constexpr uint32_t kMatmulF32Large[] =
#include "shaders/matmul_f32_large.spv.inc"
    ;
constexpr uint32_t kMatmulI32[] =
#include "shaders/matmul_i32.spv.inc"
    ;
constexpr uint32_t kGatherB32[] =
#include "shaders/gather_b32.spv.inc"
    ;
constexpr uint32_t kGatherB8[] =
#include "shaders/gather_b8.spv.inc"
    ;
constexpr uint32_t kScatterAddF32[] =
#include "shaders/scatter_add_f32.spv.inc"
    ;
constexpr uint32_t kScatterAddI32[] =
#include "shaders/scatter_add_i32.spv.inc"
    ;
constexpr uint32_t kFusedF32[] =
#include "shaders/fused_f32.spv.inc"
    ;
constexpr uint32_t kRng[] =
#include "shaders/rng.spv.inc"
    ;
constexpr uint32_t kRowsF32[] =
#include "shaders/rows_f32.spv.inc"
    ;
constexpr uint32_t kMatmulF32Cpu[] =
#include "shaders/matmul_f32_cpu.spv.inc"
    ;
constexpr uint32_t kRowsF32Cpu[] =
#include "shaders/rows_f32_cpu.spv.inc"
    ;
constexpr uint32_t kMembersF32[] =
#include "shaders/members_f32.spv.inc"
    ;
constexpr uint32_t kMembersI32[] =
#include "shaders/members_i32.spv.inc"
    ;
constexpr uint32_t kConvF32[] =
#include "shaders/conv_f32.spv.inc"
    ;
constexpr uint32_t kArgSort[] =
#include "shaders/argsort.spv.inc"
    ;

struct Entry {
  const char* name;
  absl::Span<const uint32_t> code;
};

// In Kernel order.
const Entry kEntries[] = {
    {"binary_f32", kBinaryF32},     {"binary_i32", kBinaryI32},
    {"unary_f32", kUnaryF32},       {"unary_i32", kUnaryI32},
    {"compare_f32", kCompareF32},   {"compare_i32", kCompareI32},
    {"compare_u8", kCompareU8},     {"select_b32", kSelectB32},
    {"select_b8", kSelectB8},       {"convert", kConvert},
    {"iota", kIota},                {"copy_b32", kCopyB32},
    {"copy_b8", kCopyB8},           {"reduce_f32", kReduceF32},
    {"reduce_i32", kReduceI32},     {"matmul_f32", kMatmulF32},
    {"matmul_i32", kMatmulI32},     {"gather_b32", kGatherB32},
    {"gather_b8", kGatherB8},       {"scatter_add_f32", kScatterAddF32},
    {"scatter_add_i32", kScatterAddI32}, {"rng", kRng},
    {"rows_f32", kRowsF32},         {"matmul_f32_cpu", kMatmulF32Cpu},
    {"rows_f32_cpu", kRowsF32Cpu},   {"members_f32", kMembersF32},
    {"members_i32", kMembersI32},   {"conv_f32", kConvF32},
    {"argsort", kArgSort},          {"fused_f32", kFusedF32},
    {"matmul_f32_large", kMatmulF32Large},
};
static_assert(sizeof(kEntries) / sizeof(kEntries[0]) == static_cast<size_t>(Kernel::kNumKernels));

}  // namespace

absl::Span<const uint32_t> KernelCode(Kernel kernel) {
  return kEntries[static_cast<int>(kernel)].code;
}

Variant ChooseVariant(Kernel kernel, uint32_t n, uint32_t x, std::array<uint32_t, 3> groups,
                      bool cpu) {
  if (kernel == Kernel::kMatmulF32) {
    // groups[0..1] count tiles of kMatmulTile = kMatmulLargeTile / 2.
    static_assert(kMatmulLargeTile == 2 * kMatmulTile);
    const std::array<uint32_t, 3> large = {(groups[0] + 1) / 2, (groups[1] + 1) / 2, groups[2]};
    const uint64_t small_tiles = uint64_t{groups[0]} * groups[1];
    const uint64_t tiles = uint64_t{large[0]} * large[1];
    // The large tiles cover at most a third more of the result than the
    // small ones (a 64x64 product, one small tile, would compute 4 times
    // its area).
    const bool full = 3 * tiles <= small_tiles;
    // On a CPU its loop over K keeps within lavapipe's limit (steps of 8,
    // one more to start).
    const bool enough = cpu ? int64_t{x} / 8 + 64 <= kMaxLoopIterations
                            : tiles * large[2] >= kMatmulLargeMinTiles;
    if (full && enough) {
      return {Kernel::kMatmulF32Large, large};
    }
  }
  if (!cpu) return {kernel, groups};
  switch (kernel) {
    // The one-pass element-wise kernels (at most a loop over the rank per
    // element): each invocation takes kCpuItemsPerInvocation elements, so
    // its set-up (the argument table's six operands resolved before main)
    // is paid once for them (train lm on lavapipe: these kernels' GPU time
    // a fifth to a third less; docs/VULKAN.md).
    case Kernel::kBinaryF32: case Kernel::kBinaryI32: case Kernel::kUnaryF32:
    case Kernel::kUnaryI32: case Kernel::kCompareF32: case Kernel::kCompareI32:
    case Kernel::kCompareU8: case Kernel::kSelectB32: case Kernel::kSelectB8:
    case Kernel::kConvert: case Kernel::kCopyB32: case Kernel::kCopyB8:
      return {kernel,
              {std::max<uint32_t>(1, (groups[0] + kCpuItemsPerInvocation - 1) /
                                         kCpuItemsPerInvocation),
               groups[1], groups[2]}};
    default:
      break;
  }
  // Iterations besides the main loop (the store loops are unrolled).
  constexpr int64_t kSpare = 64;
  if (kernel == Kernel::kMatmulF32 && int64_t{x} + kSpare <= kMaxLoopIterations) {
    return {Kernel::kMatmulF32Cpu, groups};
  }
  if (kernel == Kernel::kRowsF32 && 4 * int64_t{x} + kSpare <= kMaxLoopIterations) {
    const int64_t rows = (int64_t{n} + kLocalSize - 1) / kLocalSize;
    // Past 65535 workgroups an invocation takes several rows: keep the
    // workgroup version.
    if (rows <= 65535) {
      return {Kernel::kRowsF32Cpu,
              {static_cast<uint32_t>(std::max<int64_t>(rows, 1)), groups[1], groups[2]}};
    }
  }
  return {kernel, groups};
}

}  // namespace causeway::backend::vulkan
