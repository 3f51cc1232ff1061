#include "causeway/backend/vulkan/collectives.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "causeway/backend/vulkan/kernels.h"
#include "causeway/base/status_macros.h"

namespace causeway::backend::vulkan {
namespace {

constexpr int64_t kAlignment = 256;
int64_t AlignUp(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// Bytes of the address table: every member's operand, then the results.
int64_t TableBytes(const ir::Instruction& inst, int64_t members) {
  const int64_t results = inst.op == ir::OpKind::kAllReduce ? members : 1;
  return 8 * (members + results);
}

// The result region of scratch (after the table), 256-byte aligned.
int64_t ResultOffset(const ir::Instruction& inst, int64_t members) {
  return AlignUp(TableBytes(inst, members), kAlignment);
}

std::vector<int64_t> Zeros(const ir::Shape& shape) {
  return std::vector<int64_t>(shape.dims.size(), 0);
}

BoxCopy Box(const ir::Shape& src, std::vector<int64_t> src_offset, const ir::Shape& dst,
            std::vector<int64_t> dst_offset, std::vector<int64_t> extent) {
  BoxCopy box;
  box.src_dims = src.dims;
  box.src_offset = std::move(src_offset);
  box.dst_dims = dst.dims;
  box.dst_offset = std::move(dst_offset);
  box.extent = std::move(extent);
  box.element_bytes = ir::ByteSize(src.dtype);
  return box;
}

// The reduction of every member's operand (n elements) into `results`
// (addresses), in rank order.
absl::Status RecordReduction(VkCommandBuffer cb, Gpu& gpu, const ir::Instruction& inst,
                             const ir::Shape& shape,
                             absl::Span<const MemberOperands* const> members,
                             const std::vector<uint64_t>& results,
                             const VulkanAllocation& scratch) {
  const int64_t n = shape.num_elements();
  std::vector<uint64_t> table;
  table.reserve(members.size() + results.size());
  for (const MemberOperands* m : members) table.push_back(m->in->address() + m->in_offset);
  table.insert(table.end(), results.begin(), results.end());
  const auto table_bytes = static_cast<VkDeviceSize>(table.size() * sizeof(uint64_t));
  vkCmdUpdateBuffer(cb, scratch.buffer(), scratch.offset(), table_bytes, table.data());
  Barrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
          VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT);
  if (n == 0) return absl::OkStatus();
  if (shape.dtype != ir::DType::kF32 && shape.dtype != ir::DType::kI32) {
    return absl::InternalError(absl::StrCat("a reduction of ", shape.ToString()));
  }
  const Kernel kernel =
      shape.dtype == ir::DType::kF32 ? Kernel::kMembersF32 : Kernel::kMembersI32;
  CW_ASSIGN_OR_RETURN(VkPipeline pipeline, gpu.Pipeline(kernel));
  vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
  Push push;
  push.params = scratch.address();
  push.n = static_cast<uint32_t>(n);
  push.op = inst.reduce_kind == ir::ReduceKind::kSum ? 0 : 1;
  push.x = static_cast<uint32_t>(members.size());
  push.y = static_cast<uint32_t>(results.size());
  vkCmdPushConstants(cb, gpu.pipeline_layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(Push),
                     &push);
  // Grid-stride: at most 65535 workgroups, each item's loop over the
  // members well within lavapipe's limit on an invocation's iterations.
  const int64_t groups = std::clamp<int64_t>((n + kLocalSize - 1) / kLocalSize, 1, 65535);
  vkCmdDispatch(cb, static_cast<uint32_t>(groups), 1, 1);
  return absl::OkStatus();
}

}  // namespace

void Barrier(VkCommandBuffer cb, VkPipelineStageFlags from, VkAccessFlags from_access,
             VkPipelineStageFlags to, VkAccessFlags to_access) {
  VkMemoryBarrier b{};
  b.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  b.srcAccessMask = from_access;
  b.dstAccessMask = to_access;
  vkCmdPipelineBarrier(cb, from, to, 0, 1, &b, 0, nullptr, 0, nullptr);
}

void ForEachRun(const BoxCopy& box, absl::FunctionRef<void(int64_t, int64_t, int64_t)> fn) {
  const size_t rank = box.extent.size();
  const int64_t eb = box.element_bytes;
  if (rank == 0) {
    fn(0, 0, eb);
    return;
  }
  for (int64_t e : box.extent) {
    if (e == 0) return;
  }
  const std::vector<int64_t> ss = ir::RowMajorStrides(box.src_dims);
  const std::vector<int64_t> ds = ir::RowMajorStrides(box.dst_dims);
  std::vector<int64_t> c(rank, 0);
  const int64_t run = box.extent[rank - 1] * eb;
  while (true) {
    int64_t s = 0, d = 0;
    for (size_t k = 0; k < rank; ++k) {
      const int64_t at = k + 1 == rank ? 0 : c[k];
      s += (box.src_offset[k] + at) * ss[k];
      d += (box.dst_offset[k] + at) * ds[k];
    }
    fn(s * eb, d * eb, run);
    // Next coordinate over all but the innermost dimension.
    int k = static_cast<int>(rank) - 2;
    for (; k >= 0; --k) {
      if (++c[static_cast<size_t>(k)] < box.extent[static_cast<size_t>(k)]) break;
      c[static_cast<size_t>(k)] = 0;
    }
    if (k < 0) return;
  }
}

void RecordBoxCopy(VkCommandBuffer cb, const VulkanAllocation& from, uint64_t from_offset,
                   const VulkanAllocation& to, uint64_t to_offset, const BoxCopy& box) {
  std::vector<VkBufferCopy> regions;
  ForEachRun(box, [&](int64_t s, int64_t d, int64_t bytes) {
    const uint64_t src = from.offset() + from_offset + static_cast<uint64_t>(s);
    const uint64_t dst = to.offset() + to_offset + static_cast<uint64_t>(d);
    if (!regions.empty() && regions.back().srcOffset + regions.back().size == src &&
        regions.back().dstOffset + regions.back().size == dst) {
      regions.back().size += static_cast<uint64_t>(bytes);
      return;
    }
    regions.push_back(VkBufferCopy{src, dst, static_cast<uint64_t>(bytes)});
  });
  if (regions.empty()) return;
  vkCmdCopyBuffer(cb, from.buffer(), to.buffer(), static_cast<uint32_t>(regions.size()),
                  regions.data());
}

int64_t CollectiveScratchBytes(const ir::Instruction& inst, const ir::Shape& in_shape,
                               int64_t members) {
  const int64_t result = ResultOffset(inst, members);
  switch (inst.op) {
    case ir::OpKind::kReduceScatter: return result + AlignUp(in_shape.byte_size(), 4);
    case ir::OpKind::kCollectivePermute: return result + AlignUp(inst.shape.byte_size(), 4);
    default: return result;
  }
}

absl::Status RecordCollective(VkCommandBuffer cb, Gpu& gpu, const ir::Instruction& inst,
                              const ir::Shape& in_shape,
                              absl::Span<const MemberOperands* const> members,
                              const VulkanAllocation& scratch) {
  const auto g = static_cast<int64_t>(members.size());
  if (g < 1 || g > kMaxGpuMembers) {
    return absl::InternalError(absl::StrCat("a group of ", g, " members on one GPU"));
  }
  const ir::Shape& out_shape = inst.shape;
  const int rank = in_shape.rank();
  const auto result_offset = static_cast<uint64_t>(ResultOffset(inst, g));
  switch (inst.op) {
    case ir::OpKind::kAllReduce: {
      std::vector<uint64_t> results;
      for (const MemberOperands* m : members) results.push_back(m->out->address() + m->out_offset);
      return RecordReduction(cb, gpu, inst, in_shape, members, results, scratch);
    }
    case ir::OpKind::kReduceScatter: {
      // The whole reduction into scratch, then each member's slice of it.
      CW_RETURN_IF_ERROR(RecordReduction(cb, gpu, inst, in_shape, members,
                                         {scratch.address() + result_offset}, scratch));
      Barrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
              VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_READ_BIT);
      const auto d = static_cast<size_t>(inst.dimension);
      for (int64_t r = 0; r < g; ++r) {
        std::vector<int64_t> at = Zeros(in_shape);
        at[d] = r * out_shape.dims[d];
        RecordBoxCopy(cb, scratch, result_offset, *members[r]->out, members[r]->out_offset,
                      Box(in_shape, std::move(at), out_shape, Zeros(out_shape), out_shape.dims));
      }
      return absl::OkStatus();
    }
    case ir::OpKind::kAllGather: {
      // Member r's operand at r times its extent along the dimension, in
      // every member's result.
      const auto d = static_cast<size_t>(inst.dimension);
      for (int64_t r = 0; r < g; ++r) {
        for (const MemberOperands* to : members) {
          std::vector<int64_t> at = Zeros(out_shape);
          at[d] = r * in_shape.dims[d];
          RecordBoxCopy(cb, *members[r]->in, members[r]->in_offset, *to->out, to->out_offset,
                        Box(in_shape, Zeros(in_shape), out_shape, std::move(at), in_shape.dims));
        }
      }
      return absl::OkStatus();
    }
    case ir::OpKind::kAllToAll: {
      // Chunk j of member i's operand (along the split dimension) to member
      // j's result, at i along the concatenation dimension.
      const auto split = static_cast<size_t>(inst.dimension);
      const auto concat = static_cast<size_t>(inst.concat_dimension);
      ir::Shape chunk = in_shape;
      chunk.dims[split] /= g;
      for (int64_t i = 0; i < g; ++i) {
        for (int64_t j = 0; j < g; ++j) {
          std::vector<int64_t> src(static_cast<size_t>(rank), 0), dst(static_cast<size_t>(rank), 0);
          src[split] = j * chunk.dims[split];
          dst[concat] = i * chunk.dims[concat];
          RecordBoxCopy(cb, *members[i]->in, members[i]->in_offset, *members[j]->out,
                        members[j]->out_offset,
                        Box(in_shape, std::move(src), out_shape, std::move(dst), chunk.dims));
        }
      }
      return absl::OkStatus();
    }
    case ir::OpKind::kCollectivePermute: {
      const int64_t bytes = out_shape.byte_size();
      const BoxCopy flat = BoxCopy::Flat(0, bytes, 0, bytes, bytes);
      std::vector<bool> written(static_cast<size_t>(g), false);
      for (const auto& [s, t] : inst.source_target_pairs) {
        RecordBoxCopy(cb, *members[s]->in, members[s]->in_offset, *members[t]->out,
                      members[t]->out_offset, flat);
        written[static_cast<size_t>(t)] = true;
      }
      if (bytes == 0 || std::all_of(written.begin(), written.end(), [](bool w) { return w; })) {
        return absl::OkStatus();
      }
      // A member no pair sends to gets zeros: filled in scratch (4-byte
      // aligned, as a fill must be), then copied.
      vkCmdFillBuffer(cb, scratch.buffer(), scratch.offset() + result_offset,
                      static_cast<VkDeviceSize>(AlignUp(bytes, 4)), 0);
      Barrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
              VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_READ_BIT);
      for (int64_t r = 0; r < g; ++r) {
        if (written[static_cast<size_t>(r)]) continue;
        RecordBoxCopy(cb, scratch, result_offset, *members[r]->out, members[r]->out_offset, flat);
      }
      return absl::OkStatus();
    }
    default:
      return absl::InternalError(absl::StrCat(ir::OpName(inst.op), " is not a collective"));
  }
}

}  // namespace causeway::backend::vulkan
