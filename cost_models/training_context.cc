#include "cost_models/training_context.h"

#include <algorithm>
#include <optional>
#include <regex>

#include "cost_models/flops.h"
#include "cost_models/frozen_storage.h"
#include "cost_models/graph_facts.h"
#include "cost_models/runtime_rules.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {

namespace {

bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16 || t == DType::Float64;
}

// Storage types under torch.autocast: low-precision ops write the low type, float32 ops float32, the
// rest follow their widest floating input (batch norm keeps its input's type; scalar constants are
// Python numbers and never promote). A Cast is Tensor.to(dtype), no autocast op: its result keeps the type
// pass 2 gave it (the type it names, under the parameters' type). `float32` (LoRA's, or null): tensors PEFT keeps
// in float32, set as they are reached, so the ops after them see float32 inputs.
void assign_amp_dtypes(const Graph& g, const std::vector<FusedOp>& ops, DType low, const std::vector<bool>* float32,
                       std::vector<DType>& dtype) {
  for (const FusedOp& op : ops) {
    const AutocastClass cls = autocast_class(op);
    const Node& n = g.nodes[op.nodes.back()];
    DType promoted = DType::Undefined;
    if (cls == AutocastClass::LowPrecision) {
      promoted = low;
    } else if (cls == AutocastClass::Float32) {
      promoted = DType::Float32;
    } else if (op.kind == OpKind::Node && n.op_type == "Cast") {
      promoted = DType::Undefined;
    } else if (op.kind == OpKind::Node && (n.op_type == "BatchNormalization" || n.op_type == "Dropout") &&
               !n.inputs.empty() && n.inputs[0] >= 0) {
      promoted = dtype[n.inputs[0]];
    } else {
      for (int32_t t : op.inputs) {
        if (!is_floating(dtype[t]) || is_scalar_constant(g, t)) continue;
        if (promoted == DType::Undefined || dtype_bits(dtype[t]) > dtype_bits(promoted)) promoted = dtype[t];
      }
    }
    for (int32_t t : op.outputs) {
      if (is_floating(dtype[t]) && promoted != DType::Undefined) dtype[t] = promoted;
      if (float32 && (*float32)[t]) dtype[t] = DType::Float32;
    }
  }
}

// Pass 2: each tensor's storage type under the precision (fp16/bf16: model.half() / model.bfloat16()), autocast's
// included, and float32 where pass 1 pinned it (PEFT's LoRA adapters, the framework's float32 islands). Under
// autocast with a mixed-precision policy (accelerate's FSDP) the parameters the ops read are the policy's half
// gathered ones (compute_param_dtype), and so are the float inputs (FSDP casts the root's floating forward inputs to
// param_dtype: FSDP1 _runtime_utils.py _root_cast_forward_input, cast_root_forward_inputs=True; FSDP2
// MixedPrecisionPolicy.cast_forward_inputs=True) and buffers (accelerate's FSDP1 buffer_dtype = param_dtype); then
// autocast's rules run on those types as on any other.
std::vector<DType> storage_dtypes(const Graph& g, const std::vector<FusedOp>& ops, const TrainingOptions& o,
                                  const std::vector<bool>* float32) {
  std::vector<DType> dtype(g.tensors.size());
  for (size_t t = 0; t < g.tensors.size(); ++t) dtype[t] = storage_dtype(g.tensors[t].dtype, compute_param_dtype(o));
  if (is_amp(o.precision)) assign_amp_dtypes(g, ops, low_precision_dtype(o.precision), float32, dtype);
  if (float32)
    for (size_t t = 0; t < g.tensors.size(); ++t)
      if ((*float32)[t]) dtype[t] = DType::Float32;
  return dtype;
}

bool any_restored(const TensorLayout& layout) {
  return std::any_of(layout.storage.begin(), layout.storage.end(), [](FrozenStorage s) { return s != FrozenStorage::Same; });
}

// --shard fsdp with frozen parameters runs with use_orig_params=True (training_fsdp.cc): the forward's
// parameters are views of the unit's flat parameter, which requires grad when any of its parameters trains,
// so autograd also computes the grad of a frozen parameter in such a unit (FullyShardedDataParallel's
// docstring: mixing frozen and non-frozen parameters in one unit costs "higher than expected gradient
// memory"). bitsandbytes' MatMul4Bit.backward returns no grad for its 4-bit weight, so an NF4 weight gets
// none. FSDP flattens floating tensors of one dtype only (_flat_param.py _validate_tensors_to_flatten:
// "Cannot flatten integer dtype tensors", "Must flatten tensors with uniform dtype"): LLM.int8 weights,
// and frozen weights re-stored in another float type than the ones that train, are refused by the
// combination matrix (report/option_checks.cc, fsdp x frozen-int8 and fsdp x frozen-half).
void mark_fsdp_frozen_views(const TrainingOptions& o, TrainingContext& c) {
  precondition(!any_restored(c.layout) || o.frozen_storage == FrozenStorage::Nf4,
               "--frozen-dtype int8/fp16/bf16 re-storing frozen weights under --shard fsdp");
  std::vector<bool> trains(c.units.count(), false);
  for (int32_t p : c.params) trains[c.units.unit_of_tensor[p]] = true;
  int marked = 0;
  for (int32_t p : c.module_parameters)
    if (!c.is_param[p] && trains[c.units.unit_of_tensor[p]] && !c.layout.restored(p)) {
      c.requires_grad[p] = true;
      ++marked;
    }
  if (marked > 0)
    c.notes.push_back("--shard fsdp with frozen parameters (use_orig_params=True): " + std::to_string(marked) +
                      " frozen parameters share a unit with trainable ones and are views of its flat parameter, "
                      "which requires grad: autograd computes their grads too, kept until the unit's reduce-scatter.");
}

// Pass 6, ZeRO/FSDP: how each parameter is held across the data-parallel GPUs. ZeRO-1 shards each trainable
// parameter's optimizer states, ZeRO-2 its grad too, ZeRO-3 the parameter too; FSDP flattens every module
// parameter of a wrapping unit, trained or frozen, into the unit's flat parameter (a tied copy is its embedding's
// storage). Needs the trainable set and pass 5's storage.
void assign_parameter_shards(const Graph& g, const TrainingOptions& o, bool any_frozen, TrainingContext& c) {
  TensorLayout& l = c.layout;
  l.shard.assign(g.tensors.size(), ParameterShard::Whole);
  l.shard_group.assign(g.tensors.size(), -1);
  l.grad_sharded.assign(g.tensors.size(), false);
  l.states_sharded.assign(g.tensors.size(), false);
  l.shard_ways = o.gpus;
  // --deepspeed: DeepSpeedZeroOptimizer's own partitions replace the idealised division (training_deepspeed.cc).
  const bool zero = (o.shard == Sharding::Zero1 || o.shard == Sharding::Zero2 || o.shard == Sharding::Zero3) &&
                    !o.deepspeed.enabled;
  for (int32_t p : c.params) {
    l.states_sharded[p] = zero;
    l.grad_sharded[p] = zero && o.shard != Sharding::Zero1;
    if (o.shard == Sharding::Zero3 && !o.deepspeed.enabled) l.shard[p] = ParameterShard::ZeroShard;
  }
  if (o.shard != Sharding::Fsdp && o.shard != Sharding::Fsdp2) return;
  c.units = find_wrap_units(g, c.ops, c.module_parameters, o.fsdp_wrap);
  for (size_t t = 0; t < g.tensors.size(); ++t)  // a tied copy is its embedding's storage
    if (c.tied_to[t] >= 0) c.units.unit_of_tensor[t] = c.units.unit_of_tensor[c.tied_to[t]];
  for (size_t t = 0; t < g.tensors.size() && t < c.units.unit_of_tensor.size(); ++t)
    if (c.units.unit_of_tensor[t] >= 0) {
      l.shard[t] = ParameterShard::FlatShard;
      l.shard_group[t] = c.units.unit_of_tensor[t];
    }
  // FSDP2 (fully_shard) keeps each parameter an autograd leaf of its own (training_fsdp2.cc): a frozen one gets no grad.
  if (any_frozen && o.shard == Sharding::Fsdp) mark_fsdp_frozen_views(o, c);
}

// --trainable / --frozen: regular expressions (ECMAScript, matched anywhere in the initializer's name, as
// re.search) choosing which parameters train. A pattern that matches no parameter is an input error.
class ParameterFilter {
 public:
  ParameterFilter(const std::string& trainable, const std::string& frozen)
      : trainable_(compile(trainable, "--trainable")), frozen_(compile(frozen, "--frozen")),
        trainable_text_(trainable), frozen_text_(frozen) {}

  bool trains(const std::string& name) const {
    const bool in = !trainable_ || std::regex_search(name, *trainable_);
    const bool out = frozen_ && std::regex_search(name, *frozen_);
    if (trainable_ && in) trainable_matched_ = true;
    if (frozen_ && out) frozen_matched_ = true;
    return in && !out;
  }

  void check_each_matched(const std::string& model) const {
    if (trainable_ && !trainable_matched_)
      throw InputError("--trainable '" + trainable_text_ + "' matches no parameter of model '" + model + "'");
    if (frozen_ && !frozen_matched_)
      throw InputError("--frozen '" + frozen_text_ + "' matches no parameter of model '" + model + "'");
  }

 private:
  static std::optional<std::regex> compile(const std::string& pattern, const char* flag) {
    if (pattern.empty()) return std::nullopt;
    try {
      return std::regex(pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw InputError(std::string(flag) + " '" + pattern + "' is not a valid regular expression: " + e.what());
    }
  }

  std::optional<std::regex> trainable_, frozen_;
  std::string trainable_text_, frozen_text_;
  mutable bool trainable_matched_ = false, frozen_matched_ = false;
};

void add_eval_export_notes(const Graph& g, std::vector<std::string>& notes) {
  int conv = 0, conv_relu = 0, batch_norm = 0, bn_eval = 0, dropout = 0, noop_dropout = 0, softmax = 0;
  for (const Node& n : g.nodes) {
    if (n.op_type == "Conv") {
      ++conv;
      const int32_t c = n.outputs.empty() ? -1 : sole_consumer(g, n.outputs[0]);
      if (c >= 0 && g.nodes[c].op_type == "Relu") ++conv_relu;
    }
    if (n.op_type == "BatchNormalization") {
      ++batch_norm;
      auto it = n.attributes.find("training_mode");
      const bool training_outputs = n.outputs.size() > 1;
      if ((it != n.attributes.end() && it->second.i == 0) || (it == n.attributes.end() && !training_outputs)) ++bn_eval;
    }
    if (n.op_type == "Dropout" && !dropout_is_noop(g, n, /*training=*/true)) ++dropout;
    if (n.op_type == "Dropout" && dropout_is_noop(g, n, /*training=*/true)) ++noop_dropout;
    if (n.op_type == "Softmax") ++softmax;
  }
  if (conv > 0 && batch_norm == 0 && conv_relu > 0)
    notes.push_back("No BatchNormalization but Conv feeds Relu directly: batch norm looks folded into the convolutions "
                    "(an eval-mode export); estimated as exported, without batch-norm activations. Export with "
                    "training=TrainingMode.PRESERVE for the training graph.");
  if (bn_eval > 0)
    notes.push_back(std::to_string(bn_eval) + " BatchNormalization nodes were exported in inference mode; "
                    "assumed to run in training mode (saving input, save_mean and save_invstd).");
  if (noop_dropout > 0)
    notes.push_back(std::to_string(noop_dropout) + " Dropout nodes have p = 0 (or training off) and return their "
                    "input, with no output and no mask, as ATen's dropout does.");
  if (dropout > 0)
    notes.push_back("Dropout nodes are assumed active (training): each keeps a 1-byte-per-element mask.");
  else if (softmax > 0 && noop_dropout == 0)
    notes.push_back("The graph has no Dropout: either the model has none or it was exported in eval mode; no dropout "
                    "masks are counted.");
}

// Each hold's tensor read again at the last op with a node under its module scope (one pass over the ops).
void hold_to_module_end(const Graph& g, const std::vector<ModuleHold>& holds, TrainingContext& c) {
  for (const ModuleHold& h : holds) {
    int32_t last = -1;
    for (size_t i = 0; i < c.ops.size(); ++i)
      for (int32_t n : c.ops[i].nodes)
        if (g.nodes[n].name.compare(0, h.scope.size(), h.scope) == 0) last = static_cast<int32_t>(i);
    if (last >= 0) c.held_through[last].push_back(h.tensor);
  }
}

}  // namespace

TrainingContext make_training_context(const Graph& g, const ExecutionOptions& e, const TrainingOptions& o,
                                      const LoraGraph* lora, const std::vector<bool>* float32) {
  // The options were checked before any cost model runs (report/option_checks.cc: each value, the options that
  // need another, the combination matrix); here only what would make the program meaningless, as invariants.
  precondition(o.grad_accum >= 1 && o.gpus >= 1 && o.pp >= 1 && o.micro_batches >= 0, "counts below 1");
  precondition(e.runtime != Runtime::OnnxRuntime, "a training step for ONNX Runtime");
  precondition(o.shard == Sharding::None || o.shard == Sharding::Ddp || o.gpus >= 2, "sharding over one GPU");
  precondition(o.micro_batches == 0 || o.pp >= 2, "micro-batches without a pipeline");
  precondition(o.fsdp_wrap.empty() || o.shard == Sharding::Fsdp || o.shard == Sharding::Fsdp2 || o.pp >= 2, "a wrapping rule without FSDP or --pp");
  TrainingContext c;
  c.graph = &g;
  c.execution = e;
  c.runtime = runtime_model(e, /*training=*/true);
  c.options = o;
  c.shape = off_device_shape_tensors(g, c.runtime.semantics);
  c.ops = executed_ops(g, c.runtime.semantics, e.attention, c.shape);
  for (const FusedOp& op : c.ops) c.op_flops.push_back(op_flops(g, op.nodes));

  // Pass 1, the LoRA rewrite, made `g` (training.cc). Pass 2, autocast: each tensor's storage type.
  c.layout.dtype = storage_dtypes(g, c.ops, o, float32 ? float32 : lora ? &lora->float32 : nullptr);
  // Pass 3, tensor parallel: the slice of each tensor rank 0 holds, and the sequence-parallel gathers per node.
  precondition(e.tp == 1 || !lora, "LoRA under tensor parallelism");
  c.layout.tp = plan_tensor_parallel(g, e.tp, e.sequence_parallel);
  if (e.tp > 1) c.notes.push_back(tensor_parallel_note(c.layout.tp));
  if (o.expert_parallel > 1) c.notes.push_back(expert_parallel_note(o));  // training_ep.cc
  // Pass 4, the pipeline partition, makes each stage a graph of its own (stage_graph.h): it reads no field of
  // passes 5 and 6 (--pp with FSDP is refused), so it runs per stage on the finished context (pipeline.cc).

  // Which parameters train: the adapters (LoRA), else --trainable/--frozen.

  c.requires_grad.assign(g.tensors.size(), false);
  c.is_param.assign(g.tensors.size(), false);
  c.tied_to = tied_embedding_copies(g);  // suspected copies: dropped under --tied-embeddings shape only
  const std::vector<int32_t> held = held_tied_copies(g, e.tied_embeddings_by_shape);  // and the recorded ties
  for (size_t t = 0; t < g.tensors.size(); ++t)
    if (held[t] >= 0) c.tied_to[t] = held[t];
  for (size_t t = 0; t < g.tensors.size() && !e.tied_embeddings_by_shape; ++t)
    if (c.tied_to[t] >= 0 && held[t] < 0) {
      c.notes.push_back("'" + g.tensors[t].name + "' is shaped as the transpose of the embedding '" +
                        g.tensors[c.tied_to[t]].name + "' but has its own initializer: trained as its own parameter, as "
                        "the file does not prove a tie; --tied-embeddings shape if the model ties them.");
      c.tied_to[t] = -1;
    }
  const ParameterFilter filter(o.trainable, o.frozen);
  std::vector<bool> module_parameter(g.tensors.size(), false);  // a parameter of the module, trained or frozen
  for (int32_t t : g.initializers) {
    const Tensor& x = g.tensors[t];
    if (x.kind != TensorKind::Weight || !x.trainable || !is_floating(x.dtype) || x.consumers.empty() || c.tied_to[t] >= 0)
      continue;
    module_parameter[t] = true;
    const bool by_filter = filter.trains(x.name);
    const bool trains = !lora ? by_filter : lora->adapter[t] || (!o.trainable.empty() && by_filter);
    if (!trains) continue;
    c.requires_grad[t] = c.is_param[t] = true;
    c.params.push_back(t);
  }
  filter.check_each_matched(g.model_path);
  const int frozen = static_cast<int>(std::count(module_parameter.begin(), module_parameter.end(), true)) -
                     static_cast<int>(c.params.size());
  if (frozen > 0)
    c.notes.push_back(std::to_string(c.params.size()) + " parameters train, " + std::to_string(frozen) +
                      " are frozen (" + std::string(lora ? "--lora-rank" : "--trainable/--frozen") + "): frozen ones get no grad and no optimizer state, and an "
                      "op saves for backward only what a trainable parameter's grad needs.");
  // Pass 5, frozen storage: frozen weights re-stored as --frozen-dtype says.
  std::vector<bool> frozen_parameter(g.tensors.size(), false);
  for (size_t t = 0; t < g.tensors.size(); ++t) frozen_parameter[t] = module_parameter[t] && !c.is_param[t];
  c.layout.parametrized = parametrized_experts(g, o, frozen_parameter);
  c.layout.stored_bytes = frozen_stored_bytes(g, c.ops, o, frozen_parameter, c.layout.dtype, c.layout.parametrized);
  c.layout.storage.assign(g.tensors.size(), FrozenStorage::Same);
  for (size_t t = 0; t < g.tensors.size(); ++t)
    if (c.layout.stored_bytes[t] > 0) c.layout.storage[t] = o.frozen_storage;
  if (o.frozen_storage == FrozenStorage::Int8 && any_restored(c.layout))
    c.notes.push_back("LLM.int8 forward (bitsandbytes MatMul8bitLt, threshold 6.0) costed with no outlier columns, the "
                      "lower end: which columns hold an |activation| >= 6 depends on the data, and each adds a rows x 1 "
                      "copy of the input column kept for backward plus weight-column transients.");
  precondition(!o.double_quant || o.frozen_storage == FrozenStorage::Nf4, "double quantization without NF4");
  if (o.frozen_storage != FrozenStorage::Same && frozen == 0)
    throw InputError("--frozen-dtype needs frozen parameters (--lora-rank, --trainable or --frozen) in model '" +
                     g.model_path + "'");
  if (c.params.empty() && (!o.trainable.empty() || !o.frozen.empty()))
    throw InputError("--trainable/--frozen leave no parameter of model '" + g.model_path + "' to train");
  for (size_t t = 0; t < g.tensors.size(); ++t) {
    const int32_t original = c.tied_to[t];
    if (original < 0) continue;
    if (!module_parameter[original]) {
      c.tied_to[t] = -1;  // not a tie we can use: the embedding is not a parameter
      continue;
    }
    c.requires_grad[t] = c.is_param[original];  // a transposed view of the embedding in PyTorch
    c.notes.push_back("'" + g.tensors[t].name + "' is the exporter's transposed copy of the tied embedding '" +
                      g.tensors[original].name + "': counted as that one parameter.");
  }
  for (int32_t t : g.initializers)
    if (module_parameter[t]) c.module_parameters.push_back(t);
  assign_parameter_shards(g, o, frozen > 0, c);  // pass 6
  for (const FusedOp& op : c.ops) {
    bool any = false;
    for (int32_t t : op.inputs) any |= c.requires_grad[t];
    for (int32_t t : op.outputs) c.requires_grad[t] = any && is_floating(g.tensors[t].dtype) && !c.shape[t];
  }
  int kept_means = 0;
  for (const FusedOp& op : c.ops) {
    c.rules.push_back(autograd_rule(g, op, c.requires_grad, c.layout.dtype, o.mean_saves_input));
    if (o.mean_saves_input && op.kind == OpKind::Node && op.op == "ReduceMean" && !c.rules.back().saved_tensors.empty() &&
        c.requires_grad[c.rules.back().saved_tensors[0]])
      ++kept_means;
  }
  if (kept_means > 0)
    c.notes.push_back(std::to_string(kept_means) + " ReduceMean ops keep their input for backward, as torch 1.13's "
                      "MeanBackward1 does (from torch 2.2 only its sizes).");
  c.separators = find_separators(g, c.ops, main_path_ops(g, c.ops));
  add_eval_export_notes(g, c.notes);
  c.held_through.resize(c.ops.size());
  if (lora) hold_to_module_end(g, lora->held_to_module_end, c);
  return c;
}

}  // namespace memplan
