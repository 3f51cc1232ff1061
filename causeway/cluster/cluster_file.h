// Per-user records of the clusters that `causeway cluster up` runs on this
// machine, so that a client on the same machine connects by address alone,
// without copying the token by hand.
//
// Where: $XDG_RUNTIME_DIR/causeway/ (or ~/.cache/causeway/ when
// XDG_RUNTIME_DIR is unset), a directory of mode 0700; one file per cluster,
// named by its address ("127.0.0.1_41234.json"), of mode 0600, holding
// {"address": "127.0.0.1:41234", "token": "...", "pid": N}. `cluster up`
// (process N) writes it when the cluster is serving and removes it when it
// stops; a record whose process is gone (killed) is stale and ignored.
//
// A record is used only if the file and its directory belong to this user
// and nobody else can read or write them; otherwise the client is refused
// with PERMISSION_DENIED naming the file, rather than sending a token that
// others could have read or planted.
#ifndef CAUSEWAY_CLUSTER_CLUSTER_FILE_H_
#define CAUSEWAY_CLUSTER_CLUSTER_FILE_H_

#include <string>

#include "absl/status/statusor.h"

namespace causeway {

// The directory of the records; empty if neither XDG_RUNTIME_DIR nor HOME
// is set.
std::string ClusterFileDirectory();
// The record's path for `address` ("host:port", or "grpc://host:port").
std::string ClusterFilePath(const std::string& address);

// Writes the record of `address` (creating the directory, 0700). Returns
// the file's path.
absl::StatusOr<std::string> WriteClusterFile(const std::string& address, const std::string& token);
// The token recorded for `address`. NOT_FOUND if there is no record;
// PERMISSION_DENIED naming the file if it or its directory is another
// user's or open to others; DATA_LOSS if it is malformed.
absl::StatusOr<std::string> ReadClusterToken(const std::string& address);
// Removes the record of `address`, if any.
void RemoveClusterFile(const std::string& address);

// The address ("grpc://HOST:PORT") of the one cluster recorded for this
// user whose `cluster up` is still running, for commands and clients given
// no address. NOT_FOUND if there is none; FAILED_PRECONDITION naming them
// if there are several.
absl::StatusOr<std::string> RecordedCluster();

}  // namespace causeway

#endif  // CAUSEWAY_CLUSTER_CLUSTER_FILE_H_
