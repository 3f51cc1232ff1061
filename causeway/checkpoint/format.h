// The on-disk format of sharded checkpoints (docs/CHECKPOINT.md), readable
// without Causeway: a folder per saved step holding one raw little-endian,
// row-major file per piece (a box of an array's global index space, as a
// host holds it) and a JSON manifest naming every array's dtype, global
// shape and pieces, each with its CRC-32. The manifest is written last and
// the folder then renamed into place, so a folder with a manifest is a whole
// checkpoint and a save cut short at any moment leaves the previous one
// untouched.
//
// This is the layer of files and folders; who writes which piece (each host
// its own shards, straight from its devices) is the runtime's.
#ifndef CAUSEWAY_CHECKPOINT_FORMAT_H_
#define CAUSEWAY_CHECKPOINT_FORMAT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "causeway/ir/shape.h"

namespace causeway::checkpoint {

inline constexpr int kFormatVersion = 1;
// Bounds a manifest read from disk is held to.
inline constexpr int kMaxRank = 16;
inline constexpr size_t kMaxArrays = 1 << 16;
inline constexpr size_t kMaxPiecesPerArray = 4096;
inline constexpr size_t kMaxPieces = 1 << 16;  // in one checkpoint
inline constexpr size_t kMaxManifestBytes = size_t{64} << 20;
// A manifest's metadata: at most this many entries, keys of at most
// kMaxMetadataKey bytes.
inline constexpr size_t kMaxMetadataEntries = 1024;
inline constexpr size_t kMaxMetadataKey = 256;
// Folder names have 8 digits.
inline constexpr int64_t kMaxStep = 99'999'999;

// One file: the box [offset, offset + extent) of an array, row-major.
struct Piece {
  std::string file;  // in the checkpoint's folder: letters, digits, '.', '_', '-'
  std::vector<int64_t> offset;
  std::vector<int64_t> extent;
  int64_t bytes = 0;   // product(extent) x the element size
  uint32_t crc32 = 0;  // zlib's CRC-32 of the file's bytes
};

struct ArrayEntry {
  std::string name;
  ir::DType dtype = ir::DType::kF32;
  std::vector<int64_t> shape;  // global
  // How it was sharded when saved, for people (e.g. "mesh data=2, P(data)");
  // restoring reads the pieces, whatever sharding they came from.
  std::string sharding;
  // Disjoint, inside the shape, covering it (a replicated array: one piece).
  std::vector<Piece> pieces;
};

struct Manifest {
  int64_t step = 0;
  std::vector<ArrayEntry> arrays;
  // What the saver wants restored with the arrays (a trainer's iteration,
  // its model's configuration), committed with them; "metadata" in the
  // JSON, left out when empty.
  std::map<std::string, std::string> metadata;

  // Null when there is no array of that name.
  const ArrayEntry* Find(absl::string_view name) const;
};

std::string ToJson(const Manifest& manifest);
// INVALID_ARGUMENT, in one line naming what is wrong, for anything but a
// manifest of this version within the bounds above, whose arrays have
// distinct plain names (no control characters) and whose pieces are
// well-formed, each its own file, disjoint and covering their arrays.
absl::StatusOr<Manifest> FromJson(absl::string_view json);

// Writes `data` (the box's bytes, row-major) as `file`, a new file in
// `folder`, and flushes it to disk; its record. INVALID_ARGUMENT for an
// unsafe file name or a box of another rank or outside `shape`;
// ALREADY_EXISTS when another piece took the name.
absl::StatusOr<Piece> WritePiece(const std::string& folder, const std::string& file,
                                 const std::vector<int64_t>& shape, ir::DType dtype,
                                 const std::vector<int64_t>& offset,
                                 const std::vector<int64_t>& extent, const void* data);

// Reads the box [offset, offset + extent) of `array` into `dst` (row-major,
// of `extent`'s shape). Reads only the pieces that overlap the box, each
// whole, after checking it is a regular file of the manifest's size:
// DATA_LOSS naming the file when its size or checksum is not the
// manifest's (a corrupt or truncated file is never loaded as numbers; what
// `dst` holds after an error is unspecified), NOT_FOUND naming it when it
// is missing, INVALID_ARGUMENT for a box outside the array. Memory: one
// overlapping piece at a time.
absl::Status ReadBox(const std::string& folder, const ArrayEntry& array,
                     const std::vector<int64_t>& offset, const std::vector<int64_t>& extent,
                     void* dst);

// Folders: `root`/step-NNNNNNNN once committed, `root`/step-NNNNNNNN.partial
// while being written.
std::string StepFolder(const std::string& root, int64_t step);

// Makes `root` (if needed) and an empty partial folder for `step`, removing
// what a save cut short left there; returns the partial folder. One caller
// begins and commits a save; the writers of its pieces (each host, on a
// filesystem they share, with atomic renames) only write into the folder.
// FAILED_PRECONDITION when `step` is not after the newest committed step:
// a checkpoint is never replaced, and an older one restored on purpose is
// saved elsewhere rather than behind newer ones a restart would pick.
absl::StatusOr<std::string> BeginSave(const std::string& root, int64_t step);

// Checks that every piece is in the partial folder at its size, writes the
// manifest into it, flushes it, renames the folder to its committed name
// and flushes `root`: from then on the step is a checkpoint. Then keeps the
// `keep` newest committed steps (keep >= 1), removing each older one
// manifest first (so none is ever half a checkpoint), and any partial
// folder of an older step; a failure there is logged, not returned. The
// same refusals as BeginSave and FromJson.
absl::Status Commit(const std::string& root, const Manifest& manifest, int keep);

// The committed steps under `root`, oldest first (none: empty).
absl::StatusOr<std::vector<int64_t>> CommittedSteps(const std::string& root);

// The manifest of a committed folder. DATA_LOSS naming it when unreadable,
// malformed, or of another step than the folder's name.
absl::StatusOr<Manifest> ReadManifest(const std::string& folder);

}  // namespace causeway::checkpoint

#endif  // CAUSEWAY_CHECKPOINT_FORMAT_H_
