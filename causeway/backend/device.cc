#include "causeway/backend/device.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "causeway/base/mutex.h"
#include "causeway/base/status_macros.h"
#include "causeway/topology/mesh.h"

namespace causeway::backend {
namespace {

// Product of `dims`, or -1 past 2^62 or for a negative dimension.
int64_t Elements(absl::Span<const int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || (d > 0 && n > (int64_t{1} << 62) / d)) return -1;
    n *= d;
  }
  return n;
}

int64_t ArrayBytes(absl::Span<const int64_t> dims, int64_t element_bytes) {
  const int64_t n = Elements(dims);
  if (n < 0 || element_bytes <= 0 || (n > 0 && element_bytes > (int64_t{1} << 62) / n)) {
    return -1;
  }
  return n * element_bytes;
}

std::string Dims(absl::Span<const int64_t> d) {
  return absl::StrCat("[", absl::StrJoin(d, ","), "]");
}

absl::Status Inside(const char* side, absl::Span<const int64_t> dims,
                    absl::Span<const int64_t> offset, absl::Span<const int64_t> extent) {
  for (size_t i = 0; i < dims.size(); ++i) {
    if (offset[i] < 0 || extent[i] < 0 || offset[i] > dims[i] || extent[i] > dims[i] - offset[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "box copy: the box of extent ", Dims(extent), " at ", Dims(offset),
          " does not lie inside the ", side, " array ", Dims(dims)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

BoxCopy BoxCopy::Flat(int64_t src_offset, int64_t src_size, int64_t dst_offset, int64_t dst_size,
                      int64_t bytes) {
  BoxCopy b;
  b.src_dims = {src_size};
  b.src_offset = {src_offset};
  b.dst_dims = {dst_size};
  b.dst_offset = {dst_offset};
  b.extent = {bytes};
  b.element_bytes = 1;
  return b;
}

int64_t BoxCopy::src_array_bytes() const { return ArrayBytes(src_dims, element_bytes); }
int64_t BoxCopy::dst_array_bytes() const { return ArrayBytes(dst_dims, element_bytes); }
int64_t BoxCopy::bytes() const { return ArrayBytes(extent, element_bytes); }

absl::Status BoxCopy::Validate(int64_t src_capacity, int64_t dst_capacity) const {
  const size_t rank = extent.size();
  if (src_dims.size() != rank || src_offset.size() != rank || dst_dims.size() != rank ||
      dst_offset.size() != rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "box copy: ranks differ (source ", src_dims.size(), "/", src_offset.size(),
        ", destination ", dst_dims.size(), "/", dst_offset.size(), ", extent ", rank, ")"));
  }
  if (element_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("box copy: element size ", element_bytes, " is not positive"));
  }
  CW_RETURN_IF_ERROR(Inside("source", src_dims, src_offset, extent));
  CW_RETURN_IF_ERROR(Inside("destination", dst_dims, dst_offset, extent));
  const int64_t src = src_array_bytes();
  const int64_t dst = dst_array_bytes();
  if (src < 0 || src > src_capacity) {
    return absl::InvalidArgumentError(absl::StrCat("box copy: the source array ", Dims(src_dims),
                                                   " of ", element_bytes,
                                                   "-byte elements exceeds its ", src_capacity,
                                                   " bytes"));
  }
  if (dst < 0 || dst > dst_capacity) {
    return absl::InvalidArgumentError(absl::StrCat(
        "box copy: the destination array ", Dims(dst_dims), " of ", element_bytes,
        "-byte elements exceeds its ", dst_capacity, " bytes"));
  }
  return absl::OkStatus();
}

std::byte* Device::HostAddress(const DeviceAllocation&) const { return nullptr; }

void Device::CopyToPeer(const DeviceAllocation& src, Device& peer, DeviceAllocation& dst,
                        const BoxCopy& box, Completion done) {
  if (absl::Status s = box.Validate(src.bytes(), dst.bytes()); !s.ok()) {
    std::move(done)(s);
    return;
  }
  // Staged as a dense array of the box's extent.
  auto staging = std::make_shared<std::vector<std::byte>>(static_cast<size_t>(box.bytes()));
  BoxCopy out = box;
  out.dst_dims = box.extent;
  out.dst_offset.assign(box.extent.size(), 0);
  BoxCopy in = box;
  in.src_dims = box.extent;
  in.src_offset.assign(box.extent.size(), 0);
  CopyOut(src, staging->data(), out,
          [staging, &peer, &dst, in = std::move(in), done = std::move(done)](
              absl::Status status) mutable {
            if (!status.ok()) {
              std::move(done)(status);
              return;
            }
            peer.CopyIn(staging->data(), dst, in,
                        [staging, done = std::move(done)](absl::Status s) mutable {
                          std::move(done)(s);
                        });
          });
}

std::string FormatDescription(const DeviceDescription& d) {
  std::string out = d.name.empty() ? d.kind : d.name;
  if (!d.driver.empty()) absl::StrAppend(&out, ", driver ", d.driver);
  if (d.memory_bytes > 0) {
    absl::StrAppend(&out, ", ",
                    absl::StrFormat("%.1f GiB", static_cast<double>(d.memory_bytes) / (1 << 30)));
  }
  return out;
}

absl::StatusOr<DeviceDescription> DeviceKind::Describe(const DeviceSpec& spec) const {
  CW_ASSIGN_OR_RETURN(std::unique_ptr<Device> device, CreateDevice(spec));
  return device->description();
}

absl::Status Device::Load(const Executable&) { return absl::OkStatus(); }

void CopyHostBox(const void* src, void* dst, const BoxCopy& box) {
  CopyBox(src, box.src_dims, box.src_offset, dst, box.dst_dims, box.dst_offset, box.extent,
          box.element_bytes);
}

absl::Status CheckLaunchOperands(const Executable& executable,
                                 absl::Span<const DeviceAllocation* const> inputs,
                                 absl::Span<DeviceAllocation* const> outputs, DeviceId device) {
  const ir::Function& f = executable.function();
  const std::string where = absl::StrCat("launch of ", f.name(), " on ", device.ToString());
  if (static_cast<int>(inputs.size()) != f.num_parameters() ||
      static_cast<int>(outputs.size()) != f.num_outputs()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": ", inputs.size(), " inputs and ", outputs.size(), " outputs for ",
        f.num_parameters(), " parameters and ", f.num_outputs(), " results"));
  }
  auto check = [&](const char* what, int i, const DeviceAllocation* a, const ir::Shape& shape) {
    if (a == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", what, " ", i, " is null"));
    }
    if (a->bytes() >= shape.byte_size()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", what, " ", i, " has ", a->bytes(),
                                                   " bytes, needs ", shape.byte_size()));
  };
  for (int i = 0; i < f.num_parameters(); ++i) {
    CW_RETURN_IF_ERROR(check("parameter", i, inputs[i], f.parameter_shape(i)));
  }
  for (int i = 0; i < f.num_outputs(); ++i) {
    CW_RETURN_IF_ERROR(check("result", i, outputs[i], f.output_shape(i)));
  }
  return absl::OkStatus();
}

absl::Status Await(absl::AnyInvocable<void(Completion) &&> op) {
  Notification finished;
  absl::Status result;
  std::move(op)([&](absl::Status s) {
    result = std::move(s);
    finished.Notify();
  });
  finished.WaitForNotification();
  return result;
}

}  // namespace causeway::backend
