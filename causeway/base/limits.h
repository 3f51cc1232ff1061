// Bounds on what a peer may ask of the runtime. Every message from a client,
// a worker or the coordinator is untrusted input: sizes, counts and ids are
// checked against these before anything is allocated or looked up. They are
// listed (with the timeouts) in docs/DISTRIBUTED.md, "Bounds and timeouts".
#ifndef CAUSEWAY_BASE_LIMITS_H_
#define CAUSEWAY_BASE_LIMITS_H_

#include <cstddef>
#include <cstdint>

namespace causeway::limits {

// Devices of one mesh (product of its axis sizes).
inline constexpr int64_t kMaxMeshDevices = int64_t{1} << 20;
// Devices of one worker.
inline constexpr int kMaxDevicesPerHost = 4096;
// Island ids a worker may join.
inline constexpr int64_t kMaxIsland = 4095;
// Memory of one device: 1 PiB.
inline constexpr int64_t kMaxDeviceMemoryBytes = int64_t{1} << 50;
// A report tree's fanout (HostExecutorOptions::report_fanout), and the runs
// one host gathers reports of at once.
inline constexpr int kMaxReportFanout = 62;
inline constexpr size_t kMaxPendingReports = size_t{1} << 16;
// One payload (reshard piece or collective contribution) on the data plane.
inline constexpr int64_t kMaxPayloadBytes = int64_t{1} << 32;
// Streams (client connections and worker joins) open at once from one
// peer address on the coordinator.
inline constexpr int kMaxStreamsPerPeer = 256;
// Payloads being reassembled from chunks at once on one data-plane stream.
inline constexpr int kMaxPartialPayloadsPerStream = 1024;
// Hosts and arrays one release message through a scheduler may name.
inline constexpr int kMaxHostsPerRelease = 1 << 16;
inline constexpr int kMaxReleaseBatch = 1 << 20;
// Shards one checkpoint call (SaveShards, RestoreShards) may name, and the
// checkpoint work queued on one host at once.
inline constexpr size_t kMaxCheckpointShardsPerCall = size_t{1} << 16;
inline constexpr size_t kMaxQueuedCheckpointTasks = size_t{1} << 18;

}  // namespace causeway::limits

#endif  // CAUSEWAY_BASE_LIMITS_H_
