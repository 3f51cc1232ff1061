// A host's checkpoint thread: the file work of saving and restoring
// (staging a shard through host memory, checksums, writes, flushes, reads)
// runs here, off the device threads and off the thread of the call that
// asked for it. Tasks run one at a time, in the order posted, at a lower
// scheduling priority than the devices' threads.
#ifndef CAUSEWAY_WORKER_CHECKPOINT_IO_H_
#define CAUSEWAY_WORKER_CHECKPOINT_IO_H_

#include <deque>
#include <functional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "causeway/base/mutex.h"

namespace causeway {

class CheckpointIo {
 public:
  // A task is called once: with OK on the checkpoint thread, or with why it
  // will never run (a full queue, a stopped host) on the thread that posted
  // it or stopped the queue.
  using Task = std::function<void(const absl::Status& run)>;

  // `where` names the host in errors; at most `max_queued` tasks wait.
  CheckpointIo(std::string where, size_t max_queued);
  // Stops.
  ~CheckpointIo();

  void Post(Task task);
  // Lets the running task finish, cancels the queued ones and every later
  // one (UNAVAILABLE), and joins the thread. Idempotent.
  void Stop();

 private:
  void Loop();

  const std::string where_;
  const size_t max_queued_;
  Mutex mu_;
  CondVar cv_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace causeway

#endif  // CAUSEWAY_WORKER_CHECKPOINT_IO_H_
