#include "causeway/transport/inproc/inproc_transport.h"

#include <algorithm>
#include <vector>

#include "causeway/base/check.h"

namespace causeway {

InProcessDataTransport::InProcessDataTransport(DcnOptions dcn, Clock* clock)
    : dcn_(dcn), clock_(clock) {
  timer_ = std::thread([this] { TimerLoop(); });
}

InProcessDataTransport::~InProcessDataTransport() { Shutdown(); }

void InProcessDataTransport::RegisterHost(HostService* host, IslandId island) {
  MutexLock lock(&mu_);
  hosts_[host->id()] = Endpoint{host, island};
}

void InProcessDataTransport::SendPiece(HostId from, HostId to, ShardPieceMessage piece) {
  HostService* dest = nullptr;
  {
    MutexLock lock(&mu_);
    auto src = hosts_.find(from);
    auto dst = hosts_.find(to);
    CW_CHECK(src != hosts_.end() && dst != hosts_.end()) << from << " -> " << to;
    dest = dst->second.host;
    const bool dcn = src->second.island != dst->second.island;
    if (dcn) dcn_bytes_ += piece.payload_bytes();
    const bool emulate = dcn && (dcn_.latency > absl::ZeroDuration() || dcn_.bytes_per_second > 0);
    // While stopping, pieces still go through the queue (delivered at once,
    // in order, by the timer thread) so none overtakes an earlier one; only
    // once the timer thread is gone are they delivered inline.
    if (emulate && !timer_exited_) {
      const int64_t now = clock_->NowMicros();
      int64_t& free_at =
          link_free_at_[{src->second.island.value(), dst->second.island.value()}];
      int64_t wire_us = 0;
      if (dcn_.bytes_per_second > 0) {
        wire_us = static_cast<int64_t>(static_cast<double>(piece.payload_bytes()) * 1e6 /
                                       dcn_.bytes_per_second);
      }
      const int64_t start = std::max(now, free_at);
      free_at = start + wire_us;
      const int64_t deliver_at = free_at + absl::ToInt64Microseconds(dcn_.latency);
      delayed_.emplace(deliver_at, Delayed{dest, std::move(piece)});
      return;
    }
  }
  dest->DeliverPiece(std::move(piece));
}

void InProcessDataTransport::TimerLoop() {
  while (true) {
    std::vector<Delayed> due;
    {
      MutexLock lock(&mu_);
      mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !delayed_.empty();
      });
      if (stopping_ && delayed_.empty()) {
        timer_exited_ = true;
        return;
      }
      if (!stopping_) {
        const int64_t next = delayed_.begin()->first;
        const int64_t now = clock_->NowMicros();
        if (next > now) {
          // Wakes early if a sooner piece arrives or on shutdown.
          mu_.AwaitWithTimeout(
              [this, next]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                return stopping_ || delayed_.begin()->first < next;
              },
              absl::Microseconds(next - now));
        }
      }
      const int64_t now = clock_->NowMicros();
      while (!delayed_.empty() && (stopping_ || delayed_.begin()->first <= now)) {
        due.push_back(std::move(delayed_.begin()->second));
        delayed_.erase(delayed_.begin());
      }
    }
    for (Delayed& d : due) d.to->DeliverPiece(std::move(d.piece));
  }
}

void InProcessDataTransport::Shutdown() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  std::call_once(joined_, [this] { timer_.join(); });
}

int64_t InProcessDataTransport::bytes_sent_between_islands() const {
  MutexLock lock(&mu_);
  return dcn_bytes_;
}

}  // namespace causeway
