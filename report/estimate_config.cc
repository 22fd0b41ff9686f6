#include "report/estimate_config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <sstream>
#include <string_view>

#include "onnx_import/errors.h"
#include "onnx_import/model_session.h"
#include "report/fit.h"
#include "report/gpu_catalog.h"
#include "report/sizes.h"

namespace memplan {
namespace {

int64_t parse_dim_value(std::string_view text, const std::string& flag, const std::string& whole) {
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || v < 0)
    throw InputError(flag + " " + whole + ": '" + std::string(text) + "' is not a non-negative integer");
  return v;
}

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

Bindings to_bindings(const ModelArgs& args) {
  Bindings b;
  for (const std::string& d : args.dims) {
    const size_t eq = d.find('=');
    if (eq == std::string::npos || eq == 0)
      throw InputError("--dim " + d + ": expected NAME=VALUE, e.g. --dim seq=512");
    const std::string name = d.substr(0, eq);
    if (b.dims.count(name)) throw InputError("--dim " + name + " is given twice");
    b.dims[name] = parse_dim_value(std::string_view(d).substr(eq + 1), "--dim", d);
  }
  if (args.batch >= 0) b.batch = args.batch;
  for (const std::string& in : args.inputs) {
    const size_t eq = in.rfind('=');
    if (eq == std::string::npos || eq == 0)
      throw InputError("--input " + in + ": expected NAME=SHAPE, e.g. --input ids=8x512 (a scalar: NAME=scalar)");
    const std::string name = in.substr(0, eq);
    const std::string_view shape = std::string_view(in).substr(eq + 1);
    auto parse_shape = [&](std::string_view text) {
      std::vector<int64_t> dims;
      if (text == "scalar") return dims;
      size_t start = 0;
      while (true) {
        const size_t x = text.find('x', start);
        dims.push_back(parse_dim_value(text.substr(start, x == std::string::npos ? x : x - start), "--input", in));
        if (x == std::string::npos) break;
        start = x + 1;
      }
      return dims;
    };
    if (b.input_shapes.count(name) || b.sequence_inputs.count(name) || b.optional_inputs.count(name))
      throw InputError("--input " + name + " is given twice");
    if (shape == "none") {  // an optional input that holds nothing
      b.optional_inputs[name] = std::nullopt;
    } else if (shape.rfind("seq(", 0) == 0 && shape.back() == ')') {  // a sequence: each tensor's shape
      std::vector<std::vector<int64_t>> shapes;
      const std::string_view inner = shape.substr(4, shape.size() - 5);
      for (size_t start = 0; !inner.empty();) {
        const size_t comma = inner.find(',', start);
        shapes.push_back(parse_shape(inner.substr(start, comma == std::string::npos ? comma : comma - start)));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      b.sequence_inputs[name] = std::move(shapes);
    } else {
      b.input_shapes[name] = parse_shape(shape);
    }
  }
  for (const std::string& v : args.values) {
    const size_t eq = v.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == v.size())
      throw InputError("--value " + v + ": expected NAME=V, e.g. --value use_cache_branch=1 (a 1-D tensor: NAME=1,2,3)");
    const std::string name = v.substr(0, eq);
    if (b.input_values.count(name)) throw InputError("--value " + name + " is given twice");
    Bindings::InputValue value;
    value.text = v.substr(eq + 1);
    std::stringstream ss(value.text);
    for (std::string item; std::getline(ss, item, ',');) {
      if (item == "true" || item == "false") {
        value.numbers.push_back(item == "true" ? 1 : 0);
        continue;
      }
      size_t used = 0;
      double x = 0;
      try {
        x = std::stod(item, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (item.empty() || used != item.size() || !std::isfinite(x))
        throw InputError("--value " + v + ": '" + item + "' is not a number, true or false");
      value.numbers.push_back(x);
    }
    if (value.numbers.empty() || value.text.back() == ',')
      throw InputError("--value " + v + ": expected a number, true/false, or a comma list of numbers");
    value.list = value.text.find(',') != std::string::npos;
    b.input_values[name] = std::move(value);
  }
  return b;
}

EstimateOptions to_estimate_options(const EstimateArgs& a) {
  EstimateOptions o;
  // The CLI's flag checks say the same first; these hold for every front end.
  o.mode = lookup<Mode>({{"inference", Mode::Inference}, {"train", Mode::Training}}, a.mode, "--mode");
  std::map<std::string, Runtime> runtimes;
  for (const std::string& name : runtime_names()) runtimes[name] = *runtime_from_name(name);
  o.runtime = lookup<Runtime>(runtimes, a.runtime, "--runtime");
  o.inference.float_dtype = lookup<DType>({{"fp32", DType::Float32}, {"fp16", DType::Float16},
                                           {"bf16", DType::BFloat16}}, a.dtype, "--dtype");
  o.memory_schedule = lookup<bool>({{"model", false}, {"memory", true}}, a.schedule, "--schedule");
  if (a.expandable_segments && o.runtime != Runtime::PyTorch)
    throw InputError("--expandable-segments configures PyTorch's caching allocator: use it with --runtime pytorch");
  o.expandable_segments = a.expandable_segments;
  if (!a.gpu.empty() && !a.arch.empty())
    throw InputError("--arch " + a.arch + " and --gpu " + a.gpu + ": give one (--gpu sets the GPU's own architecture)");
  const int arch = lookup<int>({{"sm70", 7}, {"sm75", 7}, {"sm80", 8}, {"sm86", 8}, {"sm89", 8}, {"sm90", 9},
                                {"sm100", 10}, {"sm120", 12}}, a.arch.empty() ? "sm90" : a.arch, "--arch");
  const AttentionImpl attention =
      lookup<AttentionImpl>({{"eager", AttentionImpl::Eager}, {"sdpa", AttentionImpl::Sdpa}}, a.attention, "--attention");
  if (a.top < 0) throw InputError("--top must be at least 0");
  if (a.grad_accum < 1) throw InputError("--grad-accum must be a positive number");
  if (a.gpus < 1) throw InputError("--gpus must be a positive number");
  if (a.tp < 1) throw InputError("--tp must be a positive number");
  if (a.sequence_parallel && a.tp < 2) throw InputError("--sequence-parallel needs --tp N with N >= 2");
  o.inference.cuda_arch_major = arch;
  o.inference.attention = attention;
  if (a.tied_embeddings != "auto" && a.tied_embeddings != "no")
    throw InputError("--tied-embeddings " + a.tied_embeddings + ": expected auto or no");
  o.inference.tied_embeddings_by_shape = a.tied_embeddings == "auto";
  o.inference.tp = a.tp;
  o.inference.sequence_parallel = a.sequence_parallel;
  o.top_tensors = a.top;

  TrainingOptions& t = o.training;
  t.optimizer = lookup<Optimizer>({{"sgd", Optimizer::Sgd}, {"momentum", Optimizer::Momentum},
                                   {"adam", Optimizer::Adam}, {"adamw", Optimizer::AdamW}}, a.optimizer, "--optimizer");
  t.precision = lookup<Precision>({{"fp32", Precision::Fp32}, {"fp16", Precision::Fp16}, {"bf16", Precision::Bf16},
                                   {"amp-fp16", Precision::AmpFp16}, {"amp-bf16", Precision::AmpBf16}},
                                  a.precision, "--precision");
  // --torch: the version semantics that change memory. torch 1.13 (torch/optim/optimizer.py, adam.py):
  // zero_grad(set_to_none=False) keeps the grads between steps, Adam defaults to foreach=False (single
  // tensor), and there is no scaled_dot_product_attention (new in 2.0).
  if (a.torch != "2" && a.torch != "2.x" && a.torch != "1.13")
    throw InputError("--torch " + a.torch + ": expected 2 (any 2.x) or 1.13");
  const bool torch1 = a.torch == "1.13";
  if (torch1 && attention == AttentionImpl::Sdpa)
    throw InputError("--attention sdpa needs --torch 2: scaled_dot_product_attention is new in PyTorch 2.0");
  // --zero-grad: the loop's zero_grad(set_to_none=...) where it differs from the version's default (a
  // torch 1.13 loop calling zero_grad(set_to_none=True), as bench/cpu_ground_truth/ does).
  if (!a.zero_grad.empty() && a.zero_grad != "set-to-none" && a.zero_grad != "zeros")
    throw InputError("--zero-grad " + a.zero_grad + ": expected set-to-none or zeros");
  t.grads_kept_between_steps = a.zero_grad.empty() ? torch1 : a.zero_grad == "zeros";
  t.mean_saves_input = torch1;
  const std::string impl = !a.optimizer_impl.empty() ? a.optimizer_impl : torch1 ? "single-tensor" : "foreach";
  if (a.weight_decay < 0) throw InputError("--weight-decay must be at least 0");
  t.optimizer_flags = {a.amsgrad, a.maximize, a.weight_decay > 0};
  if (a.amsgrad && t.optimizer != Optimizer::Adam && t.optimizer != Optimizer::AdamW)
    throw InputError("--amsgrad applies to --optimizer adam or adamw");
  t.trainable = a.trainable;
  t.frozen = a.frozen;
  const bool lora = !a.lora_rank.empty() || !a.lora_targets.empty() || a.lora_dropout != 0;
  if (lora && o.mode == Mode::Inference)
    throw InputError("--lora-rank, --lora-targets and --lora-dropout apply to --mode train");
  if (lora && a.lora_rank.empty()) throw InputError("--lora-targets and --lora-dropout need --lora-rank R");
  if (lora) {
    const std::string& r = a.lora_rank;
    const bool digits = r.find_first_not_of("0123456789") == std::string::npos && r.size() <= 9;
    t.lora_rank = digits ? std::stoi(r) : 0;
    if (t.lora_rank <= 0) throw InputError("--lora-rank " + r + ": expected a positive integer");
    t.lora_targets = a.lora_targets;
    t.lora_dropout = a.lora_dropout;
  }
  t.frozen_storage = lookup<FrozenStorage>({{"same", FrozenStorage::Same}, {"fp16", FrozenStorage::Fp16},
                                            {"bf16", FrozenStorage::Bf16}, {"int8", FrozenStorage::Int8},
                                            {"nf4", FrozenStorage::Nf4}}, a.frozen_dtype, "--frozen-dtype");
  t.double_quant = a.double_quant;
  if (o.mode == Mode::Inference && (t.frozen_storage != FrozenStorage::Same || a.double_quant))
    throw InputError("--frozen-dtype and --double-quant apply to --mode train");
  t.optimizer_impl = lookup<OptimizerImpl>({{"foreach", OptimizerImpl::Foreach},
                                            {"foreach-torch1", OptimizerImpl::ForeachTorch1},
                                            {"single-tensor", OptimizerImpl::SingleTensor},
                                            {"fused", OptimizerImpl::Fused}}, impl, "--optimizer-impl");
  t.gradient_as_bucket_view = a.gradient_as_bucket_view;
  t.loss = lookup<LossKind>({{"none", LossKind::None}, {"cross-entropy", LossKind::CrossEntropy},
                             {"mse", LossKind::Mse}}, a.loss, "--loss");
  t.attention = attention;
  t.tied_embeddings_by_shape = o.inference.tied_embeddings_by_shape;
  t.checkpoint = parse_checkpoint(a.checkpoint, a.budget);
  t.grad_accum = a.grad_accum;
  t.gpus = a.gpus;
  t.tp = a.tp;
  t.sequence_parallel = a.sequence_parallel;
  t.shard = lookup<Sharding>({{"none", Sharding::None}, {"ddp", Sharding::Ddp}, {"zero1", Sharding::Zero1},
                              {"zero2", Sharding::Zero2}, {"zero3", Sharding::Zero3}, {"fsdp", Sharding::Fsdp}},
                             a.shard, "--shard");
  t.fsdp_wrap = a.fsdp_wrap;
  if (a.pp < 1) throw InputError("--pp must be a positive number");
  if (a.micro_batches < 0) throw InputError("--micro-batches must be a positive number");
  t.pp = a.pp;
  t.micro_batches = a.micro_batches;
  if (t.shard != Sharding::None && t.gpus < 2)
    throw InputError("--shard " + a.shard + " needs --gpus N with N >= 2");
  t.cuda_arch_major = arch;
  // The device budget the step is also run on: --budget, else the --gpu's memory less the catalog's context
  // reserve (what fit --gpu budgets).
  if (!a.budget.empty()) o.device_budget = parse_size(a.budget, "--budget");
  if (!a.gpu.empty()) {
    const GpuCatalog catalog = gpu_catalog_from(a.catalog);
    const GpuSpec& gpu = catalog.find(a.gpu);
    apply_gpu_architecture(gpu, o);
    if (!o.device_budget) o.device_budget = gpu_budget(gpu, catalog.context_reserve_bytes).bytes;
  }
  if (o.mode == Mode::Inference && (a.checkpoint != "none" || a.grad_accum != 1 || a.gpus != 1))
    throw InputError("--checkpoint, --grad-accum and --gpus apply to --mode train");
  if (o.mode == Mode::Inference && (a.pp != 1 || a.micro_batches != 0 || !a.fsdp_wrap.empty()))
    throw InputError("--pp, --micro-batches and --fsdp-wrap apply to --mode train");
  if (o.mode == Mode::Inference && (!a.trainable.empty() || !a.frozen.empty() || a.amsgrad || a.maximize ||
                                    a.weight_decay != 0))
    throw InputError("--trainable, --frozen, --amsgrad, --maximize and --weight-decay apply to --mode train");
  return o;
}

ConfiguredEstimate estimate_model(const EstimateArgs& args) {
  ConfiguredEstimate c;
  const EstimateOptions options = to_estimate_options(args);  // a bad option is said before the model is read
  const Bindings bindings = to_bindings(args.model);
  ModelSession model(args.model.path);  // read once: the estimate and, on a decoder with a KV cache, its phases
  c.graph = *model.shape(bindings);
  c.estimate = estimate_graph(c.graph, options);
  c.estimate.kv_phases = estimate_kv_phases(model, bindings, c.graph, options, c.estimate.breakdown.weights);
  c.configuration = describe_configuration(args, c.graph);
  return c;
}

std::string describe_configuration(const EstimateArgs& a, const Graph& graph) {
  std::string s = a.mode + ", " + a.runtime + " runtime" + (a.expandable_segments ? " (expandable segments), " : ", ");
  s += a.mode == "train" ? a.precision + ", " + a.optimizer : a.dtype;
  if (a.mode == "train" && a.checkpoint != "none") s += ", checkpoint " + a.checkpoint;
  if (a.mode == "train" && a.grad_accum > 1) s += ", grad-accum " + std::to_string(a.grad_accum);
  if (a.mode == "train" && a.gpus > 1) s += ", " + std::to_string(a.gpus) + " GPUs " + a.shard;
  if (a.tied_embeddings == "no") s += ", untied embeddings";
  if (a.tp > 1) s += ", tp " + std::to_string(a.tp) + (a.sequence_parallel ? " sequence-parallel" : "");
  if (a.mode == "train" && a.pp > 1)
    s += ", pp " + std::to_string(a.pp) + " x " + std::to_string(a.micro_batches > 0 ? a.micro_batches : a.pp) + " micro-batches";
  if (a.mode == "train" && a.torch == "1.13") s += ", torch 1.13";
  if (a.mode == "train" && !a.zero_grad.empty()) s += ", zero_grad " + a.zero_grad;
  if (a.mode == "train" && !a.trainable.empty()) s += ", trainable /" + a.trainable + "/";
  if (a.mode == "train" && !a.frozen.empty()) s += ", frozen /" + a.frozen + "/";
  if (a.mode == "train" && !a.lora_rank.empty()) s += ", LoRA r=" + a.lora_rank + " on /" + a.lora_targets + "/";
  if (a.mode == "train" && a.lora_dropout != 0) s += " dropout " + std::to_string(a.lora_dropout);
  if (a.mode == "train" && a.frozen_dtype != "same") s += ", frozen weights " + a.frozen_dtype;
  if (a.mode == "train" && a.double_quant) s += " double-quantized";
  for (const auto& [name, value] : graph.bound_dims) s += ", " + name + "=" + std::to_string(value);
  std::vector<std::string> values = a.model.values;
  std::sort(values.begin(), values.end());
  for (const std::string& v : values) s += ", value " + v;
  return s;
}

}  // namespace memplan
