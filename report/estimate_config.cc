#include "report/estimate_config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <sstream>
#include <string_view>

#include "cost_models/eager_semantics.h"
#include "onnx_import/errors.h"
#include "onnx_import/model_session.h"
#include "report/deepspeed_config.h"
#include "report/gpu_catalog.h"
#include "report/kv_cache.h"
#include "report/option_choices.h"
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

CheckpointOptions parse_checkpoint(const std::string& text, const std::string& budget) {
  CheckpointOptions c;
  if (text == "none") return c;
  if (text == "sqrt") {
    c.mode = CheckpointMode::Sqrt;
  } else if (text == "auto") {
    c.mode = CheckpointMode::Auto;
    if (budget.empty()) throw InputError("--checkpoint auto needs --budget SIZE (the memory the step must fit in)");
    c.budget_bytes = parse_size(budget, "--budget");
  } else if (text == "layers") {
    c.mode = CheckpointMode::Layers;
  } else if (text == "selective" || text == "selective:op") {
    c.mode = CheckpointMode::SelectiveOp;
  } else if (text.rfind("selective:", 0) == 0) {
    // torchtitan's selective_ac_option "0" checkpoints every block (_apply_layer_sac: `not ac_freq`): that is layers.
    c.mode = CheckpointMode::SelectiveLayers;
    const char* first = text.data() + 10;
    const char* last = text.data() + text.size();
    const auto [end, ec] = std::from_chars(first, last, c.every);
    if (ec != std::errc() || end != last || c.every < 1) {
      throw InputError("--checkpoint " + text + ": expected selective, selective:op or selective:N with N >= 1 "
                       "(every N-th block checkpointed; every block is --checkpoint layers)");
    }
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
    throw InputError("--checkpoint " + text + ": expected none, sqrt, layers, selective[:op|:N], every:K, at:T1,T2,... or auto");
  }
  return c;
}

// --upcast none | rmsnorm,softmax,loss,logits (any of them, comma-separated).
Upcast parse_upcast(const std::string& text) {
  Upcast u;
  if (text == "none") return u;
  std::stringstream ss(text);
  for (std::string part; std::getline(ss, part, ',');) {
    if (part == "rmsnorm") u.rms_norm = true;
    else if (part == "softmax") u.softmax = true;
    else if (part == "loss") u.loss = true;
    else if (part == "logits") u.logits = true;
    else
      throw InputError("--upcast " + text + ": '" + part + "' is not one of rmsnorm, softmax, loss, logits (or none alone)");
  }
  return u;
}

// --loss NAME, or chunked-ce:N / chunked-ce-tokens:N with its count (chunked-ce-rows:N's too).
LossKind parse_loss(const std::string& text, int& chunks) {
  for (const auto& [name, kind] : kLossChoices.items)
    if (const int n = counted_choice(text, name, "--loss"); n > 0) {
      chunks = n;
      return kind;
    }
  const LossKind kind = kLossChoices.parse(text, "--loss");
  if (kind == LossKind::ChunkedCrossEntropy)  // the choice's own name, "chunked-ce:N", has no count
    throw InputError("--loss " + text + ": give the number of chunks, e.g. chunked-ce:8");
  if (kind == LossKind::ChunkedCrossEntropyTokens)
    throw InputError("--loss " + text + ": give the positions in a chunk, e.g. chunked-ce-tokens:128");
  return kind;
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
  b.graph = args.graph;
  b.moe_routing = args.moe_routing;
  b.experts = args.experts;
  b.expert_parallel = args.ep;
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
  // Every value, mode and pair of features was checked once, by the front end's validate_options (the schema's
  // rows and the combination matrix, report/option_checks.h); what follows only turns names into options. A name
  // that is not a choice still throws here, and the cost models keep their own invariants.
  EstimateOptions o;
  o.mode = kModeChoices.parse(a.mode, "--mode");
  ExecutionOptions& e = o.execution;
  e.runtime = kRuntimeChoices.parse(a.runtime, "--runtime");
  o.inference.float_dtype = kDtypeChoices.parse(a.dtype, "--dtype");
  o.memory_schedule = kScheduleChoices.parse(a.schedule, "--schedule");
  e.expandable_segments = a.expandable_segments;
  e.cuda_arch_major = kArchChoices.parse(a.arch.empty() ? "sm90" : a.arch, "--arch");
  e.attention = kAttentionChoices.parse(a.attention, "--attention");
  o.cudnn_benchmark = kCudnnBenchmarkChoices.parse(a.cudnn_benchmark, "--cudnn-benchmark");
  e.tied_embeddings_by_shape =
      kTiedEmbeddingChoices.parse(a.tied_embeddings, "--tied-embeddings") == TiedEmbeddings::Shape;
  e.tp = a.tp;
  e.sequence_parallel = a.sequence_parallel;
  o.top_tensors = a.top;

  TrainingOptions& t = o.training;
  t.optimizer = kOptimizerChoices.parse(a.optimizer, "--optimizer");
  t.precision = kPrecisionChoices.parse(a.precision, "--precision");
  // --param-dtype: the parameters' stored type under autocast (auto was settled to the stored type, option_checks.cc).
  if (is_amp(t.precision)) t.amp_param_dtype = kDtypeChoices.parse(a.param_dtype, "--param-dtype");
  // --torch: the version semantics that change memory. torch 1.13 (torch/optim/optimizer.py, adam.py):
  // zero_grad(set_to_none=False) keeps the grads between steps, Adam defaults to foreach=False (single
  // tensor), and there is no scaled_dot_product_attention (new in 2.0).
  const bool torch1 = kTorchChoices.parse(a.torch, "--torch");
  // --zero-grad: the loop's zero_grad(set_to_none=...) where it differs from the version's default (a
  // torch 1.13 loop calling zero_grad(set_to_none=True), as bench/cpu_ground_truth/ does).
  t.grads_kept_between_steps = a.zero_grad.empty() ? torch1 : kZeroGradChoices.parse(a.zero_grad, "--zero-grad");
  t.mean_saves_input = torch1;
  const std::string impl = !a.optimizer_impl.empty() ? a.optimizer_impl : torch1 ? "single-tensor" : "foreach";
  t.optimizer_flags = {a.amsgrad, a.maximize, a.weight_decay > 0};
  t.optimizer_in_backward = a.optimizer_in_backward;
  t.free_output = a.free_output;
  t.outputs_to_fp32 = a.outputs_to_fp32;
  t.outputs_to_default_dtype = a.outputs_to_default_dtype;
  t.upcast = parse_upcast(a.upcast);
  t.trainable = a.trainable;
  t.frozen = a.frozen;
  t.lora_rank = a.lora_rank;
  if (a.lora_rank > 0) {
    t.lora_targets = a.lora_targets;
    t.lora_dropout = a.lora_dropout;
    t.lora_float32 = kLoraDtypeChoices.parse(a.lora_dtype, "--lora-dtype");
  }
  t.frozen_storage = kFrozenDtypeChoices.parse(a.frozen_dtype, "--frozen-dtype");
  t.double_quant = a.double_quant;
  kNf4ImplChoices.parse(a.nf4_impl, "--nf4-impl");
  t.nf4_torchao = is_torchao_nf4(a.frozen_dtype, a.nf4_impl, a.shard, a.quantize_experts);
  t.quant_group_size = a.frozen_group_size;
  t.kbit_prep = a.kbit_prep;
  t.quantize_experts = a.quantize_experts;
  t.offload_activations = a.offload_activations;
  t.optimizer_impl = kOptimizerImplChoices.parse(impl, "--optimizer-impl");
  t.gradient_as_bucket_view = a.gradient_as_bucket_view;
  t.loss = parse_loss(a.loss, t.loss_chunks);
  t.checkpoint = parse_checkpoint(a.checkpoint, a.budget);
  // --checkpoint-impl (its pairs: report/option_checks.cc and the combination matrix; selective is non-reentrant
  // whatever this says: cost_models/training_checkpoints.cc plan_segments).
  t.checkpoint.reentrant = a.checkpoint_impl.empty() || kCheckpointImplChoices.parse(a.checkpoint_impl, "--checkpoint-impl");
  t.checkpoint.early_stop = !torch1;  // torch >= 2.1's default (--torch 2 is any 2.x)
  t.grad_accum = a.grad_accum;
  t.gpus = a.gpus;
  t.expert_parallel = a.model.ep;
  t.shard = kShardChoices.parse(a.shard, "--shard");
  t.fsdp_wrap = a.fsdp_wrap;
  // --fsdp2-mp: the model stays float32 (--precision fp32, report/option_checks.cc); the step computes in param_dtype.
  // Under --precision amp-* (accelerate's FSDP) the precision stays autocast's, whose type param_dtype is
  // (cost_models/eager_semantics.h compute_param_dtype).
  const std::pair<Precision, DType> mp = kFsdp2MpChoices.parse(a.fsdp2_mp, "--fsdp2-mp");
  t.fsdp2_mp = mp.first != Precision::Fp32;  // none
  if (t.fsdp2_mp) {
    if (!is_amp(t.precision)) t.precision = mp.first;
    t.fsdp2_reduce_dtype = mp.second;
    // LoRA: the base is float32, so PEFT's upcast of half adapters (--lora-dtype) has nothing to do; the adapters
    // are parameters like the others, sharded float32 and cast to param_dtype at each all-gather
    // (FSDPParam.init_dtype_attrs; FSDP1: the unit's _mp_shard), so they compute in param_dtype as the base does.
    // Under accelerate (autocast on a bf16:bf16 policy) the same: accelerate upcasts the parameters that train to
    // float32 (utils/fsdp_utils.py fsdp2_prepare_model; FSDP1: Accelerator.prepare_model upcasts each flat parameter
    // that requires grad, v1.14.0), and the policy gathers them in param_dtype.
    t.lora_float32 = false;
  }
  t.fsdp_cpu_offload = a.fsdp_cpu_offload;
  t.fsdp_no_sync = a.fsdp_no_sync;
  t.pp = a.pp;
  t.micro_batches = a.micro_batches;
  if (!a.deepspeed.empty())  // the config's stage, buckets and offload (report/deepspeed_config.h)
    apply_deepspeed(read_deepspeed_config(a.deepspeed), a.deepspeed, a.shard, a.precision, !a.optimizer_impl.empty(),
                    a.lora_dtype_given, t);
  // Memory outside the allocator: the CUDA context (--reserve, else the catalog's reserve) and NCCL's channels.
  const GpuCatalog catalog = gpu_catalog_from(a.catalog);
  o.context_bytes = a.reserve.empty() ? catalog.context_reserve_bytes : parse_size(a.reserve, "--reserve");
  o.context_source = a.reserve.empty() ? "catalog" : "--reserve";
  o.nccl_channels = a.nccl_channels;
  // The device budget the step is also run on: --budget, else the --gpu's memory less what it holds outside the
  // allocator (what fit --gpu budgets).
  if (!a.budget.empty()) o.device_budget = parse_size(a.budget, "--budget");
  if (!a.gpu.empty()) {
    const GpuSpec& gpu = catalog.find(a.gpu);
    apply_gpu_architecture(gpu, o);
    if (!o.device_budget) o.device_budget = gpu_budget(gpu, outside_allocator(o)).bytes;
  }
  return o;
}

ConfiguredEstimate estimate_model(const EstimateArgs& args) {
  ConfiguredEstimate c;
  c.options = to_estimate_options(args);  // a bad option is said before the model is read
  const EstimateOptions& options = c.options;
  const Bindings bindings = to_bindings(args.model);
  ModelSession model(args.model.path, bindings.graph, bindings.moe_routing, false, bindings.experts,
                     bindings.expert_parallel);  // read once: the estimate and, on a decoder with a KV cache, its phases
  c.graph = model.shape(bindings);
  c.estimate = estimate_graph(*c.graph, options);
  c.estimate.kv_phases = estimate_kv_phases(model, bindings, *c.graph, options, c.estimate.breakdown.weights);
  c.configuration = describe_configuration(args, *c.graph);
  return c;
}

}  // namespace memplan
