// Where a process finds its TLS certificate, key and trusted CA (PEM files).
// Apart from grpc_common.h so that a client's public header does not pull in
// gRPC.
#ifndef CAUSEWAY_TRANSPORT_GRPC_TLS_FILES_H_
#define CAUSEWAY_TRANSPORT_GRPC_TLS_FILES_H_

#include <string>

namespace causeway::grpc_transport {

struct TlsFiles {
  std::string cert;
  std::string key;
  std::string ca;
};

}  // namespace causeway::grpc_transport

#endif  // CAUSEWAY_TRANSPORT_GRPC_TLS_FILES_H_
