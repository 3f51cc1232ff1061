// `causeway train mlp`: data-parallel training of the MLP in causeway/models
// on the embedded cluster, with progress per step.
#include <chrono>
#include <cstdio>
#include <memory>

#include "causeway/cluster/local_cluster.h"
#include "causeway/models/mlp.h"
#include "nlohmann/json.hpp"
#include "tools/commands.h"

namespace causeway::tools {
namespace {

struct TrainOptions {
  int devices = 4;
  int steps = 100;
  int log_every = 1;
  bool json = false;
  models::MlpOptions mlp;
};

int RunTrainMlp(const TrainOptions& o) {
  LocalClusterOptions cluster_options;
  cluster_options.islands = 1;
  // Two hosts when the devices split evenly, so gradients cross hosts.
  cluster_options.hosts_per_island = o.devices % 2 == 0 ? 2 : 1;
  cluster_options.devices_per_host = o.devices / cluster_options.hosts_per_island;
  auto cluster = LocalCluster::Create(cluster_options);
  if (!cluster.ok()) {
    std::fprintf(stderr, "cluster: %s\n", cluster.status().ToString().c_str());
    return 1;
  }
  auto client = Client::Connect(cluster->get());
  if (!client.ok()) {
    std::fprintf(stderr, "client: %s\n", client.status().ToString().c_str());
    return 1;
  }
  auto trainer = models::MlpTrainer::Create(client->get(), o.devices, o.mlp);
  if (!trainer.ok()) {
    std::fprintf(stderr, "train: %s\n", trainer.status().ToString().c_str());
    return 1;
  }
  float loss = 0;
  for (int step = 0; step < o.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<float> l = (*trainer)->Step(step);
    if (!l.ok()) {
      std::fprintf(stderr, "step %d: %s\n", step, l.status().ToString().c_str());
      return 1;
    }
    loss = *l;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double examples_per_s = static_cast<double>(o.mlp.global_batch) / seconds;
    if (o.log_every == 0 || (step % o.log_every != 0 && step + 1 != o.steps)) continue;
    if (o.json) {
      nlohmann::json j = {{"step", step},       {"loss", loss},
                          {"examples_per_s", examples_per_s},
                          {"devices", o.devices}, {"global_batch", o.mlp.global_batch}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("step %4d  loss %.5f  %.0f examples/s\n", step, loss, examples_per_s);
    }
    std::fflush(stdout);
  }
  if (!o.json) std::printf("final loss %.5f after %d steps on %d devices\n", loss, o.steps,
                           o.devices);
  return 0;
}

}  // namespace

void AddTrainCommand(CLI::App& app, int* exit_code) {
  CLI::App* train = app.add_subcommand(
      "train",
      "Train a model: mlp on the embedded cluster; lm on the embedded cluster or, with "
      "--cluster grpc://HOST:PORT (default: the one `cluster up` recorded), a distributed one");
  train->require_subcommand(1);
  auto options = std::make_shared<TrainOptions>();
  CLI::App* mlp = train->add_subcommand(
      "mlp",
      "Two-layer MLP classifier on a generated task, data-parallel: gradients are "
      "all-reduced inside the step function");
  mlp->add_option("--devices", options->devices, "Data-parallel devices")
      ->check(CLI::Range(1, 64));
  mlp->add_option("--steps", options->steps, "Training steps")->check(CLI::Range(1, 1000000));
  mlp->add_option("--batch", options->mlp.global_batch, "Global batch (divisible by devices)")
      ->check(CLI::Range(1, 1 << 20));
  mlp->add_option("--hidden", options->mlp.hidden, "Hidden units")->check(CLI::Range(1, 1 << 14));
  mlp->add_option("--lr", options->mlp.learning_rate, "SGD learning rate")
      ->check(CLI::PositiveNumber)->check(Finite());
  mlp->add_option("--seed", options->mlp.seed, "Seed of the weights and the task");
  mlp->add_option("--log-every", options->log_every,
                  "Progress line every N steps, and after the last (0: only the final loss)")
      ->check(CLI::Range(0, 1000000));
  mlp->add_flag("--json", options->json, "One JSON object per progress line");
  mlp->callback([options, exit_code] { *exit_code = RunTrainMlp(*options); });
  AddTrainLmCommand(train, exit_code);
}

}  // namespace causeway::tools
