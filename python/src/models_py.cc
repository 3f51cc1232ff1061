// Bindings of the GPT-style model and its trainer (causeway/models): the
// model's functions, parameters and their shardings, the text data, the
// learning-rate schedule, and the whole C++ trainer (`train lm`).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "causeway/models/gpt.h"
#include "causeway/models/lm_checkpoint_format.h"
#include "causeway/models/lm_trainer.h"
#include "causeway/models/text_data.h"
#include "python/src/py_core.h"

namespace causeway::python {
namespace {

using models::GptConfig;
using models::GptLayout;

GptConfig Config(py::dict d) {
  GptConfig c;
  for (auto [k, v] : d) {
    const std::string key = k.cast<std::string>();
    if (key == "vocab") c.vocab = v.cast<int64_t>();
    else if (key == "context") c.context = v.cast<int64_t>();
    else if (key == "layers") c.layers = v.cast<int64_t>();
    else if (key == "heads") c.heads = v.cast<int64_t>();
    else if (key == "embed") c.embed = v.cast<int64_t>();
    else if (key == "bias") c.bias = v.cast<bool>();
    else throw StatusError(absl::InvalidArgumentError(absl::StrCat("unknown GPT config key ", key)));
  }
  ThrowIfError(c.Validate());
  return c;
}

models::AdamWConfig AdamW(py::dict d) {
  models::AdamWConfig a;
  for (auto [k, v] : d) {
    const std::string key = k.cast<std::string>();
    if (key == "beta1") a.beta1 = v.cast<float>();
    else if (key == "beta2") a.beta2 = v.cast<float>();
    else if (key == "epsilon") a.epsilon = v.cast<float>();
    else if (key == "weight_decay") a.weight_decay = v.cast<float>();
    else if (key == "grad_clip") a.grad_clip = v.cast<float>();
    else throw StatusError(absl::InvalidArgumentError(absl::StrCat("unknown AdamW key ", key)));
  }
  return a;
}

models::GptKernels Kernels(const std::string& k) {
  if (k == "fused") return models::GptKernels::kFused;
  if (k == "op-by-op") return models::GptKernels::kOpByOp;
  throw StatusError(absl::InvalidArgumentError("kernels are \"fused\" or \"op-by-op\""));
}

models::TokenizerKind TokenizerKind(const std::string& t) {
  if (t == "chars") return models::TokenizerKind::kChars;
  if (t == "bytes") return models::TokenizerKind::kBytes;
  throw StatusError(absl::InvalidArgumentError("tokenizer is \"chars\" or \"bytes\""));
}

models::Split SplitOf(const std::string& s) {
  if (s == "train") return models::Split::kTrain;
  if (s == "val") return models::Split::kVal;
  throw StatusError(absl::InvalidArgumentError("split is \"train\" or \"val\""));
}

py::dict ConfigDict(const GptConfig& c) {
  py::dict d;
  d["vocab"] = c.vocab;
  d["context"] = c.context;
  d["layers"] = c.layers;
  d["heads"] = c.heads;
  d["embed"] = c.embed;
  d["bias"] = c.bias;
  return d;
}

py::list NumpyList(const std::vector<ir::Literal>& literals) {
  py::list out;
  for (const ir::Literal& l : literals) out.append(NumpyFromLiteral(l));
  return out;
}

std::vector<ir::Literal> Literals(const std::vector<py::array>& arrays) {
  std::vector<ir::Literal> out;
  for (const py::array& a : arrays) out.push_back(LiteralFromNumpy(a));
  return out;
}

}  // namespace

void RegisterModels(py::module_& m) {
  py::module_ mm = m.def_submodule("models", "The GPT-style language model and its trainer");

  py::class_<models::ParamSpec>(mm, "ParamSpec", "A parameter of the model")
      .def_readonly("name", &models::ParamSpec::name)
      .def_property_readonly("shape", [](const models::ParamSpec& s) { return DimsTuple(s.dims); })
      .def_readonly("model_dim", &models::ParamSpec::model_dim)
      .def_readonly("decay", &models::ParamSpec::decay)
      .def_property_readonly("spec",
                             [](const models::ParamSpec& s) {
                               py::list out;
                               const Sharding sharding = models::ParamSharding(s);
                               for (const auto& d : sharding.dims()) out.append(py::cast(d));
                               return out;
                             })
      .def("__repr__", [](const models::ParamSpec& s) {
        return absl::StrCat("ParamSpec(", s.name, ")");
      });

  mm.def("gpt_params", [](py::dict config) { return models::GptParams(Config(config)); },
         py::arg("config"), "The model's parameters in their fixed order");
  mm.def(
      "init_gpt_params",
      [](py::dict config, uint64_t seed) {
        py::list out;
        for (ir::Literal& l : models::InitGptParams(Config(config), seed)) {
          out.append(NumpyFromLiteral(std::move(l)));
        }
        return out;
      },
      py::arg("config"), py::arg("seed") = 1, "GPT-2 initial parameters (global numpy arrays)");
  mm.def(
      "train_step_function",
      [](py::dict config, int64_t data, int64_t model, int64_t local_batch, py::dict adamw,
         const std::string& kernels) {
        return Unwrap(models::GptTrainStepFunction(Config(config), GptLayout{data, model},
                                                   local_batch, AdamW(adamw), Kernels(kernels)));
      },
      py::arg("config"), py::arg("data"), py::arg("model"), py::arg("local_batch"),
      py::arg("adamw") = py::dict(), py::arg("kernels") = "fused",
      "(params..., m..., v..., tokens, targets, hyper f32[2]=(step, lr)) -> "
      "(params'..., m'..., v'..., loss, grad_norm), per device");
  mm.def(
      "eval_function",
      [](py::dict config, int64_t data, int64_t model, int64_t local_batch,
         const std::string& kernels) {
        return Unwrap(models::GptEvalFunction(Config(config), GptLayout{data, model}, local_batch,
                                              Kernels(kernels)));
      },
      py::arg("config"), py::arg("data"), py::arg("model"), py::arg("local_batch"),
      py::arg("kernels") = "fused");
  mm.def(
      "loss_function",
      [](py::dict config, int64_t data, int64_t model, int64_t local_batch,
         const std::string& kernels) {
        return Unwrap(models::GptLossFunction(Config(config), GptLayout{data, model}, local_batch,
                                              Kernels(kernels)));
      },
      py::arg("config"), py::arg("data"), py::arg("model"), py::arg("local_batch"),
      py::arg("kernels") = "fused");
  mm.def(
      "train_flops_per_step",
      [](py::dict config, int64_t batch) {
        return models::GptTrainFlopsPerStep(Config(config), batch);
      },
      py::arg("config"), py::arg("batch"));
  mm.def(
      "learning_rate",
      [](int64_t it, float lr, float min_lr, int64_t warmup, int64_t decay) {
        models::LmTrainOptions o;
        o.learning_rate = lr;
        o.min_learning_rate = min_lr;
        o.warmup_iters = warmup;
        o.decay_iters = decay;
        return models::LearningRate(o, it);
      },
      py::arg("iteration"), py::arg("learning_rate") = 1e-3f, py::arg("min_learning_rate") = 1e-4f,
      py::arg("warmup_iters") = 100, py::arg("decay_iters") = 2000,
      "Linear warm-up, then cosine decay to the minimum");

  py::class_<models::TextDataset>(mm, "TextDataset", "A tokenised text, split 90/10")
      .def_static(
          "load",
          [](const std::string& path, const std::string& tokenizer, int64_t context) {
            return Unwrap(models::TextDataset::Load(path, TokenizerKind(tokenizer), context));
          },
          py::arg("path"), py::arg("tokenizer") = "chars", py::arg("context") = 64)
      .def_static(
          "from_text",
          [](const std::string& text, const std::string& tokenizer, int64_t context) {
            return Unwrap(models::TextDataset::FromText(text, TokenizerKind(tokenizer), context));
          },
          py::arg("text"), py::arg("tokenizer") = "chars", py::arg("context") = 64)
      .def_property_readonly("vocab_size",
                             [](const models::TextDataset& d) { return d.tokenizer().vocab_size(); })
      .def_property_readonly("train_tokens", &models::TextDataset::train_tokens)
      .def_property_readonly("val_tokens", &models::TextDataset::val_tokens)
      .def(
          "sample",
          [](const models::TextDataset& d, const std::string& split, uint64_t seed,
             uint64_t stream, int64_t index, int64_t batch, int64_t context) {
            models::TokenBatch b = d.Sample(SplitOf(split), seed, stream, index, batch, context);
            return py::make_tuple(NumpyFromLiteral(std::move(b.inputs)),
                                  NumpyFromLiteral(std::move(b.targets)));
          },
          py::arg("split"), py::arg("seed"), py::arg("stream"), py::arg("index"), py::arg("batch"),
          py::arg("context"),
          "(inputs, targets), int32[batch, context]: random windows, a pure function of "
          "(seed, split, stream, index)")
      .def("encode",
           [](const models::TextDataset& d, const std::string& text) {
             return Unwrap(d.tokenizer().Encode(text));
           })
      .def("decode", [](const models::TextDataset& d, const std::vector<int32_t>& ids) {
        for (int32_t id : ids) {
          if (id < 0 || id >= d.tokenizer().vocab_size()) {
            throw StatusError(absl::InvalidArgumentError(
                absl::StrCat("token ", id, " is outside the vocabulary of ",
                             d.tokenizer().vocab_size())));
          }
        }
        return py::bytes(d.tokenizer().Decode(ids));
      });

  py::class_<models::LmCheckpoint>(mm, "Checkpoint",
                                   "A GPT checkpoint, as `causeway train lm --checkpoint` "
                                   "writes it: config, vocabulary, iteration, parameters and "
                                   "AdamW moments (global arrays, in gpt_params order)")
      .def_property_readonly("config",
                             [](const models::LmCheckpoint& c) { return ConfigDict(c.config); })
      .def_readonly("iteration", &models::LmCheckpoint::iteration)
      .def_property_readonly("params",
                             [](const models::LmCheckpoint& c) { return NumpyList(c.params); })
      .def_property_readonly("adam_m",
                             [](const models::LmCheckpoint& c) { return NumpyList(c.adam_m); })
      .def_property_readonly("adam_v",
                             [](const models::LmCheckpoint& c) { return NumpyList(c.adam_v); })
      .def_property_readonly(
          "vocab_size", [](const models::LmCheckpoint& c) { return c.tokenizer.vocab_size(); })
      .def("decode",
           [](const models::LmCheckpoint& c, const std::vector<int32_t>& ids) {
             for (int32_t id : ids) {
               if (id < 0 || id >= c.tokenizer.vocab_size()) {
                 throw StatusError(absl::InvalidArgumentError(absl::StrCat(
                     "token ", id, " is outside the vocabulary of ", c.tokenizer.vocab_size())));
               }
             }
             return py::bytes(c.tokenizer.Decode(ids));
           })
      .def("__repr__", [](const models::LmCheckpoint& c) {
        return absl::StrCat("<causeway.models.Checkpoint iteration ", c.iteration, ", ",
                            c.config.layers, " layers, embedding ", c.config.embed,
                            ", vocabulary ", c.tokenizer.vocab_size(), ">");
      });
  mm.def(
      "read_checkpoint",
      [](const std::string& path) {
        absl::StatusOr<models::LmCheckpoint> c;
        {
          py::gil_scoped_release release;
          c = models::ReadLmCheckpoint(path);
        }
        return Unwrap(std::move(c));
      },
      py::arg("path"),
      "Reads a checkpoint: a folder of sharded step folders (its newest step), a step folder, "
      "a folder holding model.safetensors, or that file. Errors name the file and what is "
      "wrong (missing, truncated, corrupt, another format)");
  mm.def(
      "write_checkpoint",
      [](const std::string& path, py::dict config, const models::TextDataset& data,
         int64_t iteration, const std::vector<py::array>& params,
         const std::vector<py::array>& adam_m, const std::vector<py::array>& adam_v) {
        models::LmCheckpoint c;
        py::dict cd(config.attr("copy")());  // the caller's dict stays as it was
        cd["vocab"] = data.tokenizer().vocab_size();
        c.config = Config(cd);
        c.tokenizer = data.tokenizer();
        if (iteration < 0) {
          throw StatusError(absl::InvalidArgumentError(
              absl::StrCat("iteration ", iteration, " is negative")));
        }
        c.iteration = iteration;
        // WriteLmCheckpoint checks them against the config.
        c.params = Literals(params);
        c.adam_m = Literals(adam_m);
        c.adam_v = Literals(adam_v);
        absl::StatusOr<std::string> written;
        {
          py::gil_scoped_release release;
          written = models::WriteLmCheckpoint(path, c);
        }
        return Unwrap(std::move(written));
      },
      py::arg("path"), py::arg("config"), py::arg("data"), py::arg("iteration"),
      py::arg("params"), py::arg("adam_m") = std::vector<py::array>{},
      py::arg("adam_v") = std::vector<py::array>{},
      "Writes a checkpoint that `causeway train lm --resume` and `causeway sample` read; "
      "returns the file written");
  mm.def(
      "sample",
      [](const ClientRef& client, const models::LmCheckpoint& checkpoint,
         const std::string& prompt, int64_t tokens, float temperature, int64_t top_k,
         uint64_t seed) {
        models::SampleOptions o;
        o.prompt = prompt;
        o.tokens = tokens;
        o.temperature = temperature;
        o.top_k = top_k;
        o.seed = seed;
        absl::StatusOr<std::string> text;
        {
          py::gil_scoped_release release;
          text = models::SampleText(client->client.get(), checkpoint, o);
        }
        return py::bytes(Unwrap(std::move(text)));
      },
      py::arg("client"), py::arg("checkpoint"), py::arg("prompt") = "", py::arg("tokens") = 500,
      py::arg("temperature") = 0.8f, py::arg("top_k") = 0, py::arg("seed") = 1,
      "Generates text as `causeway sample` does: the prompt followed by `tokens` new ones");

  mm.def(
      "train_lm",
      [](const ClientRef& client, const models::TextDataset& data, py::dict config,
         int64_t data_axis, int64_t model_axis, int64_t batch, int64_t iters, float lr,
         float min_lr, int64_t warmup, int64_t decay, int64_t eval_every, int64_t eval_batches,
         uint64_t seed, py::dict adamw, bool shard_optimizer, py::object on_step,
         py::object on_eval) {
        models::LmTrainOptions o;
        py::dict c = config;
        c["vocab"] = data.tokenizer().vocab_size();
        o.model = Config(c);
        o.layout = GptLayout{data_axis, model_axis};
        o.adamw = AdamW(adamw);
        o.batch = batch;
        o.iters = iters;
        o.learning_rate = lr;
        o.min_learning_rate = min_lr;
        o.warmup_iters = warmup;
        o.decay_iters = decay;
        o.eval_every = eval_every;
        o.eval_batches = eval_batches;
        o.seed = seed;
        o.shard_optimizer = shard_optimizer;
        ThrowIfError(o.Validate());
        // A hook that raises is not called again; its exception is raised
        // when training ends (the C++ loop cannot be unwound by it).
        auto hook_error = std::make_shared<std::unique_ptr<py::error_already_set>>();
        auto guarded = [hook_error](const py::object& f, auto... args) {
          py::gil_scoped_acquire gil;
          if (*hook_error != nullptr) return;
          try {
            f(args...);
          } catch (py::error_already_set& e) {
            *hook_error = std::make_unique<py::error_already_set>(std::move(e));
          }
        };
        models::LmTrainer::Hooks hooks;
        if (!on_step.is_none()) {
          hooks.on_step = [on_step, guarded](const models::StepReport& r) {
            guarded(on_step, r.iteration, r.loss, r.grad_norm, r.learning_rate);
          };
        }
        if (!on_eval.is_none()) {
          hooks.on_eval = [on_eval, guarded](const models::EvalReport& r) {
            guarded(on_eval, r.iteration, r.train_loss, r.val_loss);
          };
        }
        absl::Status status;
        {
          py::gil_scoped_release release;
          absl::StatusOr<std::unique_ptr<models::LmTrainer>> trainer =
              models::LmTrainer::Create(client->client.get(), &data, o);
          status = trainer.status();
          if (status.ok()) status = (*trainer)->Train(hooks);
        }
        if (*hook_error != nullptr) throw std::move(**hook_error);
        ThrowIfError(status);
      },
      py::arg("client"), py::arg("data"), py::arg("config") = py::dict(), py::arg("data_axis") = 1,
      py::arg("model_axis") = 1, py::arg("batch") = 12, py::arg("iters") = 2000,
      py::arg("learning_rate") = 1e-3f, py::arg("min_learning_rate") = 1e-4f,
      py::arg("warmup_iters") = 100, py::arg("decay_iters") = 2000, py::arg("eval_every") = 250,
      py::arg("eval_batches") = 20, py::arg("seed") = 1, py::arg("adamw") = py::dict(),
      py::arg("shard_optimizer") = true, py::arg("on_step") = py::none(),
      py::arg("on_eval") = py::none(),
      "Trains with the C++ trainer of `causeway train lm`; hooks get "
      "(iteration, loss, grad_norm, lr) and (iteration, train_loss, val_loss)");
}

}  // namespace causeway::python
