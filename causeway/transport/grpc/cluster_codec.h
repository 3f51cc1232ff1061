// Conversions between services.h types and cluster.proto messages that
// more than one endpoint needs (the client's connection, the coordinator
// and the worker all speak them).
#ifndef CAUSEWAY_TRANSPORT_GRPC_CLUSTER_CODEC_H_
#define CAUSEWAY_TRANSPORT_GRPC_CLUSTER_CODEC_H_

#include <vector>

#include "causeway/transport/grpc/cluster.pb.h"
#include "causeway/transport/services.h"

namespace causeway::grpc_transport {

inline void EncodeSpmdLoop(const SpmdLoop& loop, cluster::SpmdLoop* out) {
  out->set_program(loop.program.value());
  out->set_client(loop.client.value());
  out->set_id_base(loop.id_base);
  out->set_input(loop.input.value());
  out->set_first(loop.first);
  out->set_count(loop.count);
}

inline SpmdLoop DecodeSpmdLoop(const cluster::SpmdLoop& in) {
  SpmdLoop loop;
  loop.program = ProgramId(in.program());
  loop.client = ClientId(in.client());
  loop.id_base = in.id_base();
  loop.input = ArrayId(in.input());
  loop.first = in.first();
  loop.count = in.count();
  return loop;
}

// `by_client`: with each device's per-client usage.
inline void EncodeCounters(const std::vector<DeviceCounters>& counters, bool by_client,
                           cluster::CounterList* out) {
  for (const DeviceCounters& c : counters) {
    cluster::DeviceCounters& d = *out->add_devices();
    d.set_device(c.device.value());
    d.set_launches(c.launches);
    d.set_failed(c.failed);
    d.set_busy_us(c.busy_us);
    d.set_collective_us(c.collective_us);
    d.set_queued(c.queued);
    d.set_memory_in_use(c.memory_in_use);
    d.set_memory_peak(c.memory_peak);
    if (!by_client) continue;
    for (const ClientUsage& u : c.clients) {
      cluster::ClientUsage& w = *d.add_clients();
      w.set_client(u.client.value());
      w.set_memory_bytes(u.memory_bytes);
      w.set_waiting_bytes(u.waiting_bytes);
      w.set_arrays(u.arrays);
    }
  }
}

inline std::vector<DeviceCounters> DecodeCounters(const cluster::CounterList& in) {
  std::vector<DeviceCounters> out;
  for (const cluster::DeviceCounters& d : in.devices()) {
    DeviceCounters c;
    c.device = DeviceId(d.device());
    c.launches = d.launches();
    c.failed = d.failed();
    c.busy_us = d.busy_us();
    c.collective_us = d.collective_us();
    c.queued = d.queued();
    c.memory_in_use = d.memory_in_use();
    c.memory_peak = d.memory_peak();
    for (const cluster::ClientUsage& w : d.clients()) {
      ClientUsage u;
      u.client = ClientId(w.client());
      u.memory_bytes = w.memory_bytes();
      u.waiting_bytes = w.waiting_bytes();
      u.arrays = w.arrays();
      c.clients.push_back(u);
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace causeway::grpc_transport

#endif  // CAUSEWAY_TRANSPORT_GRPC_CLUSTER_CODEC_H_
