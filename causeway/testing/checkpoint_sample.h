// The sample checkpoint of the checkpoint tests, the reader script's test,
// the fuzz target and its seed: "w", f32 [4, 6] holding 0 .. 23 as two row
// halves (files w.0 and w.1, the way two hosts would each write the shard
// they hold), and "step", i32 [] holding 7. Links causeway::checkpoint.
#ifndef CAUSEWAY_TESTING_CHECKPOINT_SAMPLE_H_
#define CAUSEWAY_TESTING_CHECKPOINT_SAMPLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "causeway/base/check.h"
#include "causeway/checkpoint/format.h"

namespace causeway::testing {

// Writes the sample's pieces into `folder` (which holds none of them yet);
// its manifest, of step 7.
inline checkpoint::Manifest WriteSampleCheckpoint(const std::string& folder) {
  std::vector<float> w(24);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i);
  checkpoint::ArrayEntry a{"w", ir::DType::kF32, {4, 6}, "mesh data=2, P(data)", {}};
  for (int64_t half = 0; half < 2; ++half) {
    absl::StatusOr<checkpoint::Piece> p =
        checkpoint::WritePiece(folder, "w." + std::to_string(half), a.shape, a.dtype,
                               {2 * half, 0}, {2, 6}, w.data() + 12 * half);
    CW_CHECK_OK(p.status());
    a.pieces.push_back(*p);
  }
  const int32_t step = 7;
  absl::StatusOr<checkpoint::Piece> s =
      checkpoint::WritePiece(folder, "step", {}, ir::DType::kI32, {}, {}, &step);
  CW_CHECK_OK(s.status());
  checkpoint::Manifest m;
  m.step = step;
  m.arrays.push_back(std::move(a));
  m.arrays.push_back(checkpoint::ArrayEntry{"step", ir::DType::kI32, {}, "replicated", {*s}});
  return m;
}

}  // namespace causeway::testing

#endif  // CAUSEWAY_TESTING_CHECKPOINT_SAMPLE_H_
