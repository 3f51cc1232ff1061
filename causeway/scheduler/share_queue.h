// ShareQueue: the island scheduler's choice of whose work goes next.
//
// Each client has a FIFO of pending items (its runs, in the order it
// submitted them: a client's own order is never changed, so a run never
// waits on a later one of its client). Between clients, strict priority
// classes first; within a class, stride scheduling over device time: every
// client has a pass, advanced by the device time its work costs divided by
// its weight, and the client with the lowest pass goes next. Over any busy
// interval each client's device time is then proportional to its weight.
//
// A client whose queue empties keeps its pass; when it has work again its
// pass is raised to the queue's virtual time (the pass of the last client
// chosen), so an idle client does not bank credit and then monopolise the
// island. Charges are in device microseconds and may be corrected later
// (an estimate at dispatch, the measured time at completion).
//
// Not thread-safe: the island scheduler's lock guards it. A choice scans the
// clients with queued work: O(active clients).
#ifndef CAUSEWAY_SCHEDULER_SHARE_QUEUE_H_
#define CAUSEWAY_SCHEDULER_SHARE_QUEUE_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "causeway/base/check.h"
#include "causeway/base/ids.h"
#include "causeway/transport/services.h"

namespace causeway {

template <typename T>
class ShareQueue {
 public:
  // Sets `client`'s share (weight and class). Takes effect from its next
  // charge; its pass is kept.
  void SetShare(ClientId client, const ClientShare& share) {
    CW_CHECK(share.weight > 0) << "weight must be positive";
    State(client).share = share;
  }
  ClientShare share(ClientId client) const {
    auto it = clients_.find(client);
    return it == clients_.end() ? ClientShare{} : it->second.share;
  }

  void Push(ClientId client, T item) {
    ClientState& c = State(client);
    if (c.items.empty()) {
      c.pass = std::max(c.pass, virtual_time_);
      active_.push_back(client);
    }
    c.items.push_back(std::move(item));
    ++size_;
  }

  // The client whose head item goes next among those whose head satisfies
  // `eligible(const T&)`, or an invalid id if none.
  template <typename Eligible>
  ClientId Next(const Eligible& eligible) const {
    ClientId best;
    const ClientState* best_state = nullptr;
    for (ClientId id : active_) {
      const ClientState& c = clients_.find(id)->second;
      if (!eligible(c.items.front())) continue;
      if (best_state == nullptr || c.share.priority > best_state->share.priority ||
          (c.share.priority == best_state->share.priority &&
           (c.pass < best_state->pass || (c.pass == best_state->pass && id < best)))) {
        best = id;
        best_state = &c;
      }
    }
    return best;
  }

  // The head item of `client`. REQUIRES: it has one.
  T& Front(ClientId client) { return clients_.find(client)->second.items.front(); }
  bool HasWork(ClientId client) const {
    auto it = clients_.find(client);
    return it != clients_.end() && !it->second.items.empty();
  }

  // Removes and returns `client`'s head item, moving the virtual time to its
  // pass. REQUIRES: it has one.
  T Pop(ClientId client) {
    ClientState& c = clients_.find(client)->second;
    virtual_time_ = std::max(virtual_time_, c.pass);
    T item = std::move(c.items.front());
    c.items.pop_front();
    --size_;
    if (c.items.empty()) Deactivate(client);
    return item;
  }

  // Advances `client`'s pass by `device_us` of device time (negative: a
  // correction of an earlier overestimate).
  void Charge(ClientId client, double device_us) {
    auto it = clients_.find(client);
    if (it == clients_.end()) return;
    it->second.pass += device_us / it->second.share.weight;
    it->second.charged_us += device_us;
  }

  // Removes `client`, returning its queued items in order.
  std::vector<T> Drop(ClientId client) {
    std::vector<T> out;
    auto it = clients_.find(client);
    if (it == clients_.end()) return out;
    for (T& item : it->second.items) out.push_back(std::move(item));
    size_ -= out.size();
    if (!it->second.items.empty()) Deactivate(client);
    clients_.erase(it);
    return out;
  }

  size_t size() const { return size_; }
  size_t queued(ClientId client) const {
    auto it = clients_.find(client);
    return it == clients_.end() ? 0 : it->second.items.size();
  }
  // Device time charged to `client` so far (estimates plus corrections).
  double charged_us(ClientId client) const {
    auto it = clients_.find(client);
    return it == clients_.end() ? 0 : it->second.charged_us;
  }
  double pass(ClientId client) const {
    auto it = clients_.find(client);
    return it == clients_.end() ? 0 : it->second.pass;
  }
  double virtual_time() const { return virtual_time_; }

 private:
  struct ClientState {
    ClientShare share;
    double pass = 0;
    double charged_us = 0;
    std::deque<T> items;
  };

  ClientState& State(ClientId client) {
    auto [it, inserted] = clients_.try_emplace(client);
    if (inserted) it->second.pass = virtual_time_;
    return it->second;
  }
  void Deactivate(ClientId client) {
    active_.erase(std::find(active_.begin(), active_.end(), client));
  }

  absl::flat_hash_map<ClientId, ClientState> clients_;
  std::vector<ClientId> active_;  // clients with queued items
  double virtual_time_ = 0;
  size_t size_ = 0;
};

}  // namespace causeway

#endif  // CAUSEWAY_SCHEDULER_SHARE_QUEUE_H_
