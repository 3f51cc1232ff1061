// Internal to the vulkan kind: the compute shaders it embeds, one per
// dispatch kernel (causeway/backend/dispatch/kernels.h states each one's
// contract), and how they are called. Every shader includes
// shaders/common.glsl: operands by buffer device address in the push
// constants (Push below mirrors its block), an int32 parameter block by
// address, and a grid-stride loop over `n` items (local size 256) unless a
// kernel says otherwise.
#ifndef CAUSEWAY_BACKEND_VULKAN_KERNELS_H_
#define CAUSEWAY_BACKEND_VULKAN_KERNELS_H_

#include <array>
#include <cstdint>

#include "absl/types/span.h"
#include "causeway/backend/dispatch/kernels.h"

namespace causeway::backend::vulkan {

using dispatch::Kernel;
using dispatch::KernelName;
using dispatch::kLocalSize;
using dispatch::kMatmulTile;
using dispatch::kMaxFusedInputs;
using dispatch::kMaxFusedOps;
using dispatch::kMaxFusedStores;
using dispatch::kMaxLoopIterations;
using dispatch::kMaxRank;
using dispatch::kNoSlot;

// The push constants of every dispatch (88 bytes; std430 as in GLSL).
//
// Two ways to name operands. Without a table (table == 0), a to params are
// buffer device addresses. With one, the command buffer is recorded once
// and reused by later launches of the same executable: table is the
// address of that command buffer's argument table (one address per slot,
// written by the host before each submission) and a to params are byte
// offsets into the buffer of their slot, `slots` holding the slots, 16
// bits each in the order a, b, c, d, out, params (kNoSlot: none).
struct Push {
  uint64_t table = 0;
  uint64_t a = 0, b = 0, c = 0, d = 0;  // operands
  uint64_t out = 0;                     // result
  uint64_t params = 0;                  // int32 parameter block
  uint32_t n = 0;                       // work items
  uint32_t op = 0;                      // selector within the kernel
  uint32_t x = 0, y = 0;                // kernel-specific scalars
  uint32_t slots[3] = {0, 0, 0};
  uint32_t pad = 0;
};
static_assert(sizeof(Push) == 88);


// The kernel a device runs for a dispatch of `kernel` over `groups`
// workgroups, and its workgroup counts:
// - for kMatmulF32, kMatmulF32Large where its 128x128 tiles cover at most
//   a third more of the result than the 64x64 ones, and, on a GPU, there
//   are at least kMatmulLargeMinTiles of them (fewer, larger workgroups
//   pay only where there are enough to occupy every compute unit); on a
//   device that takes the CPU variants (`cpu`, Gpu::cpu_kernels) whatever
//   their number (lavapipe runs it faster than its CPU variant:
//   docs/VULKAN.md);
// - else, where the device takes the CPU variants, the CPU variant of the
//   kernel where one exists and its loops stay within kMaxLoopIterations
//   (K for the matrix product, 4 passes over the columns for the row
//   kernels), and for the one-pass element-wise kernels (binary, unary,
//   compare, select, convert, copy) 1/kCpuItemsPerInvocation of the
//   workgroups, their grid-stride loops taking that many elements each;
// - else `kernel` and `groups` unchanged.
struct Variant {
  Kernel kernel;
  std::array<uint32_t, 3> groups;
};
Variant ChooseVariant(Kernel kernel, uint32_t n, uint32_t x, std::array<uint32_t, 3> groups,
                      bool cpu);

// The SPIR-V of `kernel`, compiled from shaders/<name>.comp at build time.
absl::Span<const uint32_t> KernelCode(Kernel kernel);

// Elements per invocation of the one-pass element-wise kernels on a CPU
// device (ChooseVariant). Their loops stay far within kMaxLoopIterations:
// at most 8 (the rank) per element, and past 65535 workgroups of the full
// grid at most 2^31 / (65535 / 8 * 256) = 1024 elements per invocation.
inline constexpr uint32_t kCpuItemsPerInvocation = 8;
// kMatmulF32Large's tile, and the fewest of them it is chosen for: an
// H200 has 132 compute units.
inline constexpr uint32_t kMatmulLargeTile = 128;
inline constexpr uint64_t kMatmulLargeMinTiles = 128;

}  // namespace causeway::backend::vulkan

#endif  // CAUSEWAY_BACKEND_VULKAN_KERNELS_H_
