#include "cli/estimate_options.h"

#include <sstream>

#include "onnx_import/errors.h"
#include "report/sizes.h"

namespace memplan::cli {
namespace {

template <typename T>
T lookup(const std::map<std::string, T>& table, const std::string& value, const std::string& flag) {
  const auto it = table.find(value);
  if (it != table.end()) return it->second;
  std::string choices;
  for (const auto& [k, v] : table) choices += (choices.empty() ? "" : "|") + k;
  throw InputError(flag + " " + value + ": expected one of " + choices);
}

CheckpointOptions parse_checkpoint(const std::string& text, const std::string& budget) {
  CheckpointOptions c;
  if (text == "none") return c;
  if (text == "sqrt") {
    c.mode = CheckpointMode::Sqrt;
  } else if (text == "auto") {
    c.mode = CheckpointMode::Auto;
    if (budget.empty()) throw InputError("--checkpoint auto needs --budget SIZE (the memory the step must fit in)");
    c.budget_bytes = parse_size(budget, "--budget");
  } else if (text.rfind("every:", 0) == 0) {
    c.mode = CheckpointMode::Every;
    try {
      size_t used = 0;
      c.every = std::stoi(text.substr(6), &used);
      if (used != text.size() - 6 || c.every < 1) throw std::invalid_argument("");
    } catch (const std::exception&) {
      throw InputError("--checkpoint " + text + ": expected every:K with K >= 1");
    }
  } else if (text.rfind("at:", 0) == 0) {
    c.mode = CheckpointMode::At;
    std::stringstream ss(text.substr(3));
    for (std::string name; std::getline(ss, name, ',');)
      if (!name.empty()) c.at.push_back(name);
    if (c.at.empty()) throw InputError("--checkpoint at: needs tensor names, e.g. at:/layer1/Relu_1_output_0,...");
  } else {
    throw InputError("--checkpoint " + text + ": expected none, sqrt, every:K, at:T1,T2,... or auto");
  }
  return c;
}

}  // namespace

void add_estimate_options(CLI::App* cmd, EstimateArgs& a, bool with_checkpoint_budget) {
  add_model_options(cmd, a.model);
  cmd->add_option("--mode", a.mode, "inference, or train: one PyTorch training step (forward, backward, optimizer)")
      ->check(CLI::IsMember({"inference", "train"}))
      ->capture_default_str();
  cmd->add_option("--runtime", a.runtime,
                  "Who runs the model: pytorch (eager, CUDA caching allocator: reports max_memory_allocated and "
                  "max_memory_reserved), onnxruntime (CUDA EP, BFC arena with memory pattern), or ideal (exact "
                  "sizes in one arena: the floor)")
      ->check(CLI::IsMember(runtime_names()))
      ->capture_default_str();
  cmd->add_option("--dtype", a.dtype, "Inference: store float weights and activations in this type (fp16 = model.half())")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--schedule", a.schedule,
                  "Execution order: model (the file's order, as exported) or memory (a memory-aware reordering; "
                  "both orders' peaks are reported)")
      ->check(CLI::IsMember({"model", "memory"}))
      ->capture_default_str();
  cmd->add_option("--arch", a.arch, "Target GPU architecture (decides cuBLAS workspace size): sm70, sm75, sm80, "
                                    "sm86, sm89, sm90, sm100, sm120")
      ->capture_default_str();
  cmd->add_option("--attention", a.attention,
                  "How PyTorch runs attention: eager (the exported MatMul/Softmax graph) or sdpa "
                  "(scaled_dot_product_attention: no seq x seq matrix)")
      ->check(CLI::IsMember({"eager", "sdpa"}))
      ->capture_default_str();
  auto* train = "Training (--mode train)";
  cmd->add_option("--optimizer", a.optimizer, "sgd, momentum (SGD with momentum), adam or adamw")
      ->check(CLI::IsMember({"sgd", "momentum", "adam", "adamw"}))
      ->capture_default_str()
      ->group(train);
  cmd->add_option("--precision", a.precision,
                  "fp32; fp16/bf16 (model.half(): everything in half); amp-fp16/amp-bf16 (torch.autocast: fp32 "
                  "master weights, grads and states)")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16", "amp-fp16", "amp-bf16"}))
      ->capture_default_str()
      ->group(train);
  cmd->add_option("--checkpoint", a.checkpoint,
                  "Activation checkpointing: none, sqrt (about sqrt(n) segments), every:K, at:T1,T2,... (boundary "
                  "tensor names), auto (fewest recomputed FLOPs that fit --budget)")
      ->capture_default_str()
      ->group(train);
  if (with_checkpoint_budget)
    cmd->add_option("--budget", a.budget, "Memory budget for --checkpoint auto, e.g. 24GiB")->group(train);
  cmd->add_option("--grad-accum", a.grad_accum, "Gradient accumulation steps (the batch is one micro-batch)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(train);
  cmd->add_option("--loss", a.loss, "Loss on the last output: none, cross-entropy (int64 targets) or mse")
      ->check(CLI::IsMember({"none", "cross-entropy", "mse"}))
      ->capture_default_str()
      ->group(train);
  cmd->add_option("--gpus", a.gpus, "Data-parallel GPUs (the estimate is per GPU)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(train);
  cmd->add_option("--shard", a.shard, "With --gpus: none, ddp, zero1, zero2, zero3")
      ->check(CLI::IsMember({"none", "ddp", "zero1", "zero2", "zero3"}))
      ->capture_default_str()
      ->group(train);
  cmd->add_option("--optimizer-impl", a.optimizer_impl,
                  "Adam/AdamW implementation: foreach (torch 2.x default), foreach-torch1 (torch 1.13), single-tensor, "
                  "fused (no temporaries)")
      ->check(CLI::IsMember({"foreach", "foreach-torch1", "single-tensor", "fused"}))
      ->capture_default_str()
      ->group(train);
  cmd->add_flag("--gradient-as-bucket-view", a.gradient_as_bucket_view,
                "DDP: buckets alias the gradients instead of holding a second copy")
      ->group(train);
  cmd->add_option("--top", a.top, "How many of the largest tensors live at the peak to list")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

EstimateOptions to_estimate_options(const EstimateArgs& a) {
  EstimateOptions o;
  o.mode = a.mode == "train" ? Mode::Training : Mode::Inference;
  std::map<std::string, Runtime> runtimes;
  for (const std::string& name : runtime_names()) runtimes[name] = *runtime_from_name(name);
  o.runtime = lookup<Runtime>(runtimes, a.runtime, "--runtime");
  o.inference.float_dtype = lookup<DType>({{"fp32", DType::Float32}, {"fp16", DType::Float16},
                                           {"bf16", DType::BFloat16}}, a.dtype, "--dtype");
  o.memory_schedule = a.schedule == "memory";
  const int arch = lookup<int>({{"sm70", 7}, {"sm75", 7}, {"sm80", 8}, {"sm86", 8}, {"sm89", 8}, {"sm90", 9},
                                {"sm100", 10}, {"sm120", 12}}, a.arch, "--arch");
  const AttentionImpl attention = a.attention == "sdpa" ? AttentionImpl::Sdpa : AttentionImpl::Eager;
  o.inference.cuda_arch_major = arch;
  o.inference.attention = attention;
  o.top_tensors = a.top;

  TrainingOptions& t = o.training;
  t.optimizer = lookup<Optimizer>({{"sgd", Optimizer::Sgd}, {"momentum", Optimizer::Momentum},
                                   {"adam", Optimizer::Adam}, {"adamw", Optimizer::AdamW}}, a.optimizer, "--optimizer");
  t.precision = lookup<Precision>({{"fp32", Precision::Fp32}, {"fp16", Precision::Fp16}, {"bf16", Precision::Bf16},
                                   {"amp-fp16", Precision::AmpFp16}, {"amp-bf16", Precision::AmpBf16}},
                                  a.precision, "--precision");
  t.optimizer_impl = lookup<OptimizerImpl>({{"foreach", OptimizerImpl::Foreach},
                                            {"foreach-torch1", OptimizerImpl::ForeachTorch1},
                                            {"single-tensor", OptimizerImpl::SingleTensor},
                                            {"fused", OptimizerImpl::Fused}}, a.optimizer_impl, "--optimizer-impl");
  t.gradient_as_bucket_view = a.gradient_as_bucket_view;
  t.loss = lookup<LossKind>({{"none", LossKind::None}, {"cross-entropy", LossKind::CrossEntropy},
                             {"mse", LossKind::Mse}}, a.loss, "--loss");
  t.attention = attention;
  t.checkpoint = parse_checkpoint(a.checkpoint, a.budget);
  t.grad_accum = a.grad_accum;
  t.gpus = a.gpus;
  t.shard = lookup<Sharding>({{"none", Sharding::None}, {"ddp", Sharding::Ddp}, {"zero1", Sharding::Zero1},
                              {"zero2", Sharding::Zero2}, {"zero3", Sharding::Zero3}}, a.shard, "--shard");
  if (t.shard != Sharding::None && t.gpus < 2)
    throw InputError("--shard " + a.shard + " needs --gpus N with N >= 2");
  t.cuda_arch_major = arch;
  if (o.mode == Mode::Inference && (a.checkpoint != "none" || a.grad_accum != 1 || a.gpus != 1))
    throw InputError("--checkpoint, --grad-accum and --gpus apply to --mode train");
  return o;
}

std::string describe_configuration(const EstimateArgs& a, const Graph& graph) {
  std::string s = a.mode + ", " + a.runtime + " runtime, ";
  s += a.mode == "train" ? a.precision + ", " + a.optimizer : a.dtype;
  if (a.mode == "train" && a.checkpoint != "none") s += ", checkpoint " + a.checkpoint;
  if (a.mode == "train" && a.grad_accum > 1) s += ", grad-accum " + std::to_string(a.grad_accum);
  if (a.mode == "train" && a.gpus > 1) s += ", " + std::to_string(a.gpus) + " GPUs " + a.shard;
  for (const auto& [name, value] : graph.bound_dims) s += ", " + name + "=" + std::to_string(value);
  return s;
}

}  // namespace memplan::cli
