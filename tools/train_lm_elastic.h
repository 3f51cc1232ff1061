// `causeway train lm --elastic`: training on a distributed cluster that
// recovers from lost workers (causeway/models/lm_elastic.h). train_lm.cc
// parses the flags and hands the run here.
#ifndef CAUSEWAY_TOOLS_TRAIN_LM_ELASTIC_H_
#define CAUSEWAY_TOOLS_TRAIN_LM_ELASTIC_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "causeway/client/client.h"
#include "causeway/models/lm_trainer.h"

namespace causeway::tools {

struct ElasticTrainLmArgs {
  std::string cluster;  // grpc://HOST:PORT
  double timeout_s = 30;
  double replace_timeout_s = 60;
  int64_t log_every = 10;
  bool json = false;
  ClientShare share;
  // Set (to the signal) when the run is to stop as if interrupted.
  const std::atomic<int>* interrupted = nullptr;
};

// Trains, printing progress and every recovery; the exit code.
int RunTrainLmElastic(const ElasticTrainLmArgs& args, const models::TextDataset& data,
                      const models::LmTrainOptions& options, const models::LmCheckpoint* resume);

}  // namespace causeway::tools

#endif  // CAUSEWAY_TOOLS_TRAIN_LM_ELASTIC_H_
