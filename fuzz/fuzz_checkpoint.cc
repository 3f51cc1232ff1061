// libFuzzer target: checkpoint manifests (causeway/checkpoint/format.h), the
// one file of a checkpoint a reader trusts to find the others. FromJson must
// refuse or accept without crashing, and ReadBox over an accepted manifest
// must read or refuse its files without reading past what they hold or
// allocating what the manifest claims: the folder holds the pieces of the
// sample checkpoint (causeway/testing/checkpoint_sample.h), whose manifest
// is the seed.
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "causeway/base/check.h"
#include "causeway/checkpoint/format.h"
#include "causeway/testing/checkpoint_sample.h"

namespace {

std::string folder;

}  // namespace

void RemoveFolder() {
  std::error_code ignored;
  std::filesystem::remove_all(folder, ignored);
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  folder = (std::filesystem::temp_directory_path() /
            ("fuzz_checkpoint." + std::to_string(getpid())))
               .string();
  std::filesystem::remove_all(folder);
  std::atexit(RemoveFolder);
  std::filesystem::create_directories(folder);
  causeway::testing::WriteSampleCheckpoint(folder);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<causeway::checkpoint::Manifest> m = causeway::checkpoint::FromJson(
      absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!m.ok()) return 0;
  for (const causeway::checkpoint::ArrayEntry& a : m->arrays) {
    // The whole array when small, else its first element: a box of it.
    int64_t volume = 1;
    for (int64_t d : a.shape) volume = d == 0 ? 0 : (volume > (1 << 12) / d ? -1 : volume * d);
    std::vector<int64_t> offset(a.shape.size(), 0), extent = a.shape;
    if (volume < 0) {
      for (int64_t& e : extent) e = e > 0 ? 1 : 0;
    }
    std::vector<std::byte> dst(size_t{1} << 14);
    causeway::checkpoint::ReadBox(folder, a, offset, extent, dst.data()).IgnoreError();
  }
  return 0;
}
