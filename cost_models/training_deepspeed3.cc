// Training under DeepSpeed ZeRO-3 (--deepspeed, zero_optimization.stage 3): DeepSpeedZeroOptimizer_Stage3 and its
// PartitionedParameterCoordinator around the step, rank 0's share. Sizes and release rules: deepspeed_zero3.h; the
// order of allocations and frees: deepspeed/runtime/zero/ at DeepSpeed edaa7221267243c7be7fb49c5d5f5c4fb97b4641,
// named per function. The gradient bucket's hooks are ZeRO-1/2's (training_deepspeed.cc ds_hook: the same
// reduce_independent_p_g_buckets_and_remove_grads rule in stage3.py); what a bucket's reduce allocates, the end of
// backward and the optimizer step are training_deepspeed3_optimizer.cc's.
// The fetch unit is the module that owns parameters directly (iter_params(module, recurse=False)): on an exported
// graph, the name of a parameter up to its last '.'. Its forward fetch runs before the first op reading its
// parameters and its release after the last; its backward fetch before the backward of that last op
// (PreBackwardFunctionForModule on its outputs, when one requires grad), its release after the backward of the first
// (PostBackwardFunctionModule on its inputs, when one requires grad; otherwise release_backward_leftovers at the end
// of backward).
#include <algorithm>
#include <map>
#include <set>

#include "cost_models/deepspeed_zero3.h"
#include "cost_models/graph_facts.h"
#include "cost_models/lora_adapters.h"
#include "cost_models/training_step.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {

namespace {

std::string owner_of(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? std::string() : name.substr(0, dot);
}

}  // namespace

// The modules, their op spans and the fetch trace. A parameter read in a module apart from its owner's (a tied head)
// is that module's too. Refused (InputError) where the graph does not show DeepSpeed's fetches one to one: a folded
// copy of a tied parameter (the export hides which module reads it), a module that owns parameters and contains
// another (its fetch spans its children's), a parameter read in a module around its owner (F.linear on the embedding
// in the model's own forward: that module's whole call holds it), two modules whose ops interleave (a module called
// twice, or names that are not module paths).
void TrainingStep::ds3_find_modules() {
  const std::string where = "--deepspeed at stage 3, model '" + graph_.model_path + "': ";
  for (size_t t = 0; t < graph_.tensors.size(); ++t)
    if (context_.tied_to[t] >= 0)
      throw InputError(where + "'" + graph_.tensors[t].name + "' is tied to '" + graph_.tensors[context_.tied_to[t]].name +
                       "': a parameter two modules own is not modelled at stage 3");
  std::map<std::string, int32_t> by_name;
  ds3_index_.assign(graph_.tensors.size(), -1);
  // --lora-rank's adapted Linears: PEFT's lora.Linear holds the base Linear as its child `base_layer`, beside lora_A
  // and lora_B (peft/tuners/lora/layer.py), so the base weight is base_layer's parameter, fetched by that module's
  // hooks; the what-if keeps the base weight's name (lora_adapters.h), its nodes under <module>/base_layer/.
  std::set<std::string> adapted;
  for (int32_t p : context_.module_parameters)
    if (const std::string m = lora_adapter_module(graph_.tensors[p].name); !m.empty()) adapted.insert(m);
  for (int32_t p : context_.module_parameters) {
    if (layout().restored(p)) throw InputError(where + "'" + graph_.tensors[p].name + "' is stored in another type: not modelled");
    std::string owner = owner_of(graph_.tensors[p].name);
    if (adapted.count(owner) && lora_adapter_module(graph_.tensors[p].name).empty()) owner += ".base_layer";
    auto it = by_name.find(owner);
    if (it == by_name.end()) {
      it = by_name.emplace(owner, static_cast<int32_t>(ds3_modules_.size())).first;
      ds3_modules_.push_back({owner, {}, -1, -1, -1, -1, -1, false});
    }
    ds3_index_[p] = static_cast<int32_t>(ds3_tensor_.size());
    ds3_tensor_.push_back(p);
    ds3_numel_.push_back(static_cast<uint64_t>(graph_.tensors[p].elements()));
    ds3_modules_[it->second].params.push_back(ds3_index_[p]);
  }
  std::vector<int32_t> module_of(ds3_tensor_.size(), -1);
  for (size_t m = 0; m < ds3_modules_.size(); ++m)
    for (int32_t q : ds3_modules_[m].params) module_of[q] = static_cast<int32_t>(m);
  // Each op's reads of parameters, by the module whose call makes them: the owner's, unless the node reading it runs
  // in a module apart from the owner (neither inside nor around it). That module holds the parameter too: a tied one
  // (transformers' tie_weights: lm_head.weight is embed_tokens.weight, so iter_params(lm_head) yields it) or an
  // external one (ZeROOrderedDict.__getitem__ registers a parameter another module reads in its forward,
  // register_external_parameter, and iter_params yields ds_external_parameters() too). Either way its hooks fetch and
  // release it with that module's call.
  // Module scopes are read only where the graph has them (torch.onnx.export's /<module>/<Op> names, some node below
  // the root); elsewhere each parameter is its owner's alone.
  const bool scoped = std::any_of(graph_.nodes.begin(), graph_.nodes.end(),
                                  [](const Node& n) { return scope_paths(n.name).size() > 1; });
  const auto reading_node = [&](const FusedOp& op, int32_t t) {  // the node of op reading t
    for (int32_t n : op.nodes)
      if (std::find(graph_.nodes[n].inputs.begin(), graph_.nodes[n].inputs.end(), t) != graph_.nodes[n].inputs.end()) return n;
    return op.nodes.back();
  };
  for (size_t i = 0; i < context_.ops.size(); ++i)
    for (int32_t t : context_.ops[i].inputs) {
      if (!ds3_param(t)) continue;
      const int32_t q = ds3_index_[t];
      int32_t m = module_of[q];
      const Node& node = graph_.nodes[reading_node(context_.ops[i], t)];
      const std::vector<std::string> scopes = scoped ? scope_paths(node.name) : std::vector<std::string>{};
      const std::string& owner = ds3_modules_[m].name;
      const auto inside = [](const std::string& a, const std::string& b) { return b.empty() || a.rfind(b + ".", 0) == 0; };
      const std::string reader = scopes.empty() ? owner : scopes.back();
      if (reader != owner && inside(owner, reader))
        throw InputError(where + "'" + graph_.tensors[t].name + "' is read by node '" + node.name + "' in module '" +
                         (reader.empty() ? std::string("(the root)") : reader) + "', around its own module '" + owner +
                         "': not modelled (DeepSpeed fetches such a parameter for the whole call of the module reading "
                         "it, register_external_parameter; transformers' tied head is a module of its own, lm_head)");
      if (reader != owner && !inside(reader, owner)) {
        auto it = by_name.find(reader);
        if (it == by_name.end()) {
          it = by_name.emplace(reader, static_cast<int32_t>(ds3_modules_.size())).first;
          ds3_modules_.push_back({reader, {}, -1, -1, -1, -1, -1, false});
        }
        m = it->second;
        if (std::find(ds3_modules_[m].params.begin(), ds3_modules_[m].params.end(), q) == ds3_modules_[m].params.end())
          ds3_modules_[m].params.push_back(q);
      }
      ds3_read_module_[{static_cast<int32_t>(i), q}] = m;
      if (ds3_modules_[m].first_op < 0) ds3_modules_[m].first_op = static_cast<int32_t>(i);
      ds3_modules_[m].last_op = static_cast<int32_t>(i);
    }
  // A module's children sort right after it ("a" < "a.b" < "a.c"): the first name past "a." tells.
  for (const auto& [name, m] : by_name) {
    const std::string prefix = name.empty() ? name : name + ".";
    auto inner = by_name.lower_bound(prefix);
    if (inner != by_name.end() && inner->first == name) ++inner;
    if (inner != by_name.end() && inner->first.rfind(prefix, 0) == 0)
      throw InputError(where + "module '" + (name.empty() ? std::string("(the root)") : name) +
                       "' owns parameters and contains module '" + inner->first +
                       "': not modelled (its fetch spans its children's)");
  }
  ds3_ending_at_.assign(context_.ops.size(), {});
  ds3_starting_at_.assign(context_.ops.size(), {});
  for (size_t m = 0; m < ds3_modules_.size(); ++m)
    if (ds3_modules_[m].first_op >= 0) {
      ds3_starting_at_[ds3_modules_[m].first_op].push_back(static_cast<int32_t>(m));
      ds3_ending_at_[ds3_modules_[m].last_op].push_back(static_cast<int32_t>(m));
    }
  std::vector<int32_t> order;  // modules read by some op, in forward order
  for (size_t m = 0; m < ds3_modules_.size(); ++m)
    if (ds3_modules_[m].first_op >= 0) order.push_back(static_cast<int32_t>(m));
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return ds3_modules_[a].first_op < ds3_modules_[b].first_op; });
  for (size_t k = 1; k < order.size(); ++k)
    if (ds3_modules_[order[k]].first_op <= ds3_modules_[order[k - 1]].last_op)
      throw InputError(where + "the ops reading module '" + ds3_modules_[order[k - 1]].name + "' and module '" +
                       ds3_modules_[order[k]].name + "' interleave: not modelled (one fetch per module call; a module "
                       "called twice, or, in a graph without torch.onnx's /<module>/<Op> node names, a parameter "
                       "another module reads too, such as an embedding the head reuses)");
  // The trace: forward fetches, then backward fetches in the backward's order (the latest last op first), with the
  // checkpointed segments' recomputations (training_deepspeed3_recompute.cc).
  std::vector<std::vector<int32_t>> trace;
  for (int32_t m : order) {
    ds3_modules_[m].forward_at = static_cast<int32_t>(trace.size());
    trace.push_back(ds3_modules_[m].params);
  }
  ds3_backward_trace(order, trace);
  const DeepSpeedZero& z = ds_config_;
  ds3_persistent_ = zero3_persistent(ds3_numel_, z.param_persistence_threshold, z.model_persistence_threshold);
  ds3_releases_ = zero3_releases(trace, ds3_numel_, ds3_persistent_, z.max_reuse_distance);
  if (ds3_prefetch()) ds3_scope_calls();  // every module call, from the node scopes (training_deepspeed3_prefetch.cc)
}

// Init._partition_param: every module parameter's partition (ds_tensor), trained or frozen, in its type; the trainable
// ones moved into one flat buffer (_create_fp16_partitions_with_defragmentation, lp_param_buffer: the same bytes).
// A persistent parameter also stays whole from its first fetch on (the whole copy that fetch made: see
// deepspeed_zero3.h zero3_gather). stage3.py __init__: the float32 partitions of the sub-groups
// (_create_fp32_partitions), the IPG bucket (one per communication type, reduce_bucket_size elements) and
// grad_partitions_flat_buffer, torch.zeros of every trainable partition in gradient_accumulation_dtype (the
// parameters' type), all resident; the optimizer states are on the float32 sub-groups (update_targets).
void TrainingStep::ds3_add_resident() {
  ds3_find_modules();
  const int gpus = options_.gpus;
  auto resident = [&](const std::string& name, uint64_t bytes, Category category) {
    const int32_t b = writer_.new_buffer(name, bytes, category);
    program().buffers[b].resident = true;
    return b;
  };
  ds3_whole_.assign(ds3_tensor_.size(), -1);
  std::vector<uint64_t> trainable_partitions, elements;
  uint64_t grad_partition = 0, host_partitions = 0;
  for (size_t q = 0; q < ds3_tensor_.size(); ++q) {
    const int32_t p = ds3_tensor_[q];
    const uint64_t element = dtype_bytes(layout().dtype[p], 1).value_or(1);
    elements.push_back(element);
    const uint64_t part = zero3_partition_numel(ds3_numel_[q], gpus);
    const uint64_t bytes = checked_mul(part, element, "DeepSpeed bytes");
    if (ds3_offload_param()) {  // on the host (training_deepspeed3_offload.cc)
      forward_buffer_[p] = -1;
      host_partitions = checked_add(host_partitions, bytes, "DeepSpeed host bytes");
    } else {
      forward_buffer_[p] = resident("deepspeed:ds_tensor:" + graph_.tensors[p].name, bytes, Category::Weight);
      result_.param_bytes = checked_add(result_.param_bytes, bytes, "parameter bytes");
    }
    if (context_.is_param[p]) {
      trainable_partitions.push_back(part);
      grad_partition = checked_add(grad_partition, checked_mul(part, element, "DeepSpeed bytes"), "DeepSpeed bytes");
    }
  }
  // The persistent parameters' whole copies. The first micro-batch has no complete trace: release_sub_module frees
  // every parameter, persistent ones too. With one micro-batch per step, the first step's _post_step gathers them
  // again (_allgather_params_coalesced / _sequential: a buffer of ceil(numel / N) x N elements the parameter views),
  // and from the second forward on (trace complete) they are never released: that copy stays. With gradient
  // accumulation the second micro-batch's fetch gathers them first, with its module's other parameters (zero3_gather).
  for (const Ds3Module& m : ds3_modules_) {
    std::vector<uint64_t> numel;
    for (int32_t q : m.params) numel.push_back(ds3_numel_[q]);
    Zero3Gather g = zero3_gather(numel, gpus);
    if (options_.grad_accum <= 1)
      for (size_t k = 0; k < numel.size(); ++k) g.gathered[k] = zero3_gather({numel[k]}, gpus).gathered[0];
    for (size_t k = 0; k < m.params.size(); ++k) {
      const int32_t q = m.params[k];
      if (!ds3_persistent_[q] || m.first_op < 0 || ds3_whole_[q] >= 0) continue;  // a tied one: one copy
      const int32_t p = ds3_tensor_[q];
      const uint64_t bytes = checked_mul(g.gathered[k], dtype_bytes(layout().dtype[p], 1).value_or(1), "DeepSpeed bytes");
      ds3_whole_[q] = resident("deepspeed:persistent:" + graph_.tensors[p].name, bytes, Category::Weight);
      result_.param_bytes = checked_add(result_.param_bytes, bytes, "parameter bytes");
    }
  }
  ds3_sub_groups_ = zero3_sub_groups(trainable_partitions, ds_config_.sub_group_size);
  uint64_t fp32 = 0;
  for (uint64_t e : ds3_sub_groups_) fp32 = checked_add(fp32, checked_mul(e, 4, "DeepSpeed bytes"), "DeepSpeed bytes");
  // offload_optimizer cpu: the float32 sub-groups, their grads and states and the gradient partitions are the host's
  // (zero3_host_bytes; the report's host line), the step runs there (training_deepspeed3_offload.cc).
  if (ds3_offload()) result_.deepspeed_host_bytes = zero3_host_bytes(ds3_sub_groups_, grad_partition, states_per_param());
  result_.deepspeed_param_host_bytes = host_partitions;
  // nvme for either: the host and NVMe lines as ZeRO-Infinity lays them out (training_deepspeed3_nvme.cc).
  const bool param_nvme = ds_config_.offload_param == DeepSpeedOffload::Nvme;
  if (param_nvme || ds3_swap_optimizer()) ds3_nvme_resident(elements, trainable_partitions, grad_partition);
  // Float32 parameters (no bf16/fp16): the partitions already are the float32 sub-groups (_create_fp32_partitions:
  // the same dtype and device, "we don't need another copy of the weights"; DeepSpeed PR #7651).
  if (fp32 > 0 && !ds3_offload() && !ds3_fp32_shared()) {
    ds_fp32_ = resident("deepspeed:fp32_partitioned_groups_flat", fp32, Category::OptimizerState);
    result_.optimizer_state_bytes = checked_add(result_.optimizer_state_bytes, fp32, "optimizer state bytes");
  }
  if (grad_partition > 0 && !ds3_offload()) {
    ds3_grad_partitions_ = resident("deepspeed:grad_partitions_flat_buffer", grad_partition, Category::Gradient);
    result_.grad_bytes = checked_add(result_.grad_bytes, grad_partition, "gradient bytes");
  }
  if (grad_partition > 0) {
    ds_buckets_.push_back(resident("deepspeed:ipg_bucket",
                                   checked_mul(ds_config_.reduce_bucket_size, ds_grad_element_bytes_, "DeepSpeed bytes"),
                                   Category::Gradient));
  }
  result_.notes.push_back(
      "DeepSpeed ZeRO-3 (--deepspeed, stage3.py): each parameter padded to a multiple of " + std::to_string(gpus) +
      " and partitioned" +
      (!ds3_offload_param() ? std::string()
       : ", the partitions off the GPU (offload_param " +
             (param_nvme ? std::string("nvme") : "cpu: " + std::to_string(host_partitions) + " bytes of pinned host memory") +
             "), copied to the GPU per gather") +
      "; " + std::to_string(std::count(ds3_persistent_.begin(), ds3_persistent_.end(), true)) +
      " parameters of at most stage3_param_persistence_threshold " + std::to_string(ds_config_.param_persistence_threshold) +
      " elements stay whole on every GPU; the others are gathered per module (" + std::to_string(ds3_modules_.size()) +
      " modules) in forward and in backward, released after use unless reused within stage3_max_reuse_distance " +
      std::to_string(ds_config_.max_reuse_distance) + " elements; " + ds3_prefetch_note() +
      "; grads reduce-scattered through one bucket of reduce_bucket_size " +
      std::to_string(ds_config_.reduce_bucket_size) + " elements into the gradient partitions; " +
      std::to_string(ds3_sub_groups_.size()) + " float32 optimizer sub-group(s) of sub_group_size " +
      std::to_string(ds_config_.sub_group_size) +
      (!ds3_offload() ? "." : std::string(" off the GPU (offload_optimizer ") + (ds3_swap_optimizer() ? "nvme" : "cpu") +
                                  ", with their grads, the optimizer states and the gradient partitions; the GPU copies "
                                  "each reduced grad partition back for its norm and float32 cast)."));
}

int32_t TrainingStep::ds3_buffer(int32_t t) const { return ds3_whole_[ds3_index_[t]]; }

// fetch_sub_module -> __all_gather_params: the module's parameters not available (neither persistent nor kept by an
// earlier release's reuse rule), in one all_gather_coalesced (sorted by ds_id: the flat transient is order-free).
void TrainingStep::ds3_fetch(int32_t m, Phase phase) {
  std::vector<int32_t> missing;
  for (int32_t q : ds3_modules_[m].params)
    if (ds3_whole_[q] < 0) missing.push_back(q);
  if (!missing.empty()) ds3_gather(ds3_modules_[m].name, missing, phase);
}

// One all_gather_coalesced of `missing` (parameters of `module`), waited on at once.
void TrainingStep::ds3_gather(const std::string& module, const std::vector<int32_t>& missing, Phase phase) {
  std::vector<uint64_t> numel;
  for (int32_t q : missing) numel.push_back(ds3_numel_[q]);
  const Zero3Gather g = zero3_gather(numel, options_.gpus);
  ds3_nvme_swap_in(missing);  // offload_param nvme: the swap buffers the NVMe-resident ones take
  const char* kind = recomputing_ ? "deepspeed:fetch_recompute:" : phase == Phase::Forward ? "deepspeed:fetch:" : "deepspeed:fetch_backward:";
  Step st{std::string(kind) + module,
          "all_gather_coalesced", phase, {}, {}, 0};
  const uint64_t element = ds_grad_element_bytes_ > 0 ? ds_grad_element_bytes_
                                                      : dtype_bytes(layout().dtype[ds3_tensor_[missing[0]]], 1).value_or(1);
  if (g.transient > 0)
    st.writes.push_back(writer_.new_buffer("deepspeed:all_gather_flat:" + module, checked_mul(g.transient, element, "DeepSpeed bytes"),
                                           Category::Weight));
  for (size_t k = 0; k < missing.size(); ++k) {
    const int32_t p = ds3_tensor_[missing[k]];
    const uint64_t own = dtype_bytes(layout().dtype[p], 1).value_or(1);
    ds3_whole_[missing[k]] = writer_.new_buffer("deepspeed:gathered:" + graph_.tensors[p].name,
                                                checked_mul(g.gathered[k], own, "DeepSpeed bytes"), Category::Weight);
    st.writes.push_back(ds3_whole_[missing[k]]);
  }
  ds3_stage_partitions(missing, st);  // the partitions it sends (their GPU copies under offload_param)
  program().steps.push_back(std::move(st));
}

// __release_param -> partition(free_data): the whole copy freed (a step reading it last).
void TrainingStep::ds3_release(const std::vector<int32_t>& params, const std::string& why, Phase phase) {
  Step st{why, "partition", phase, {}, {}, 0};
  for (int32_t q : params)
    if (ds3_whole_[q] >= 0 && !ds3_persistent_[q]) {
      st.reads.push_back(ds3_whole_[q]);
      ds3_whole_[q] = -1;
    }
  if (!st.reads.empty()) program().steps.push_back(std::move(st));
}

// Op i reads the whole parameter (fetched with the module whose call reads it, where no earlier fetch left it
// whole); autograd saves the parameter itself, whose data the release swaps out: nothing whole is held for the
// backward (rule_saved skips it).
void TrainingStep::ds3_prepare_input(int32_t i, int32_t t, Step& st, std::map<int32_t, int32_t>& effective) {
  const int32_t q = ds3_index_[t];
  if (ds3_whole_[q] < 0) ds3_fetch(ds3_read_module_.at({i, q}), st.phase);
  effective[t] = ds3_whole_[q];
  add_unique(st.reads, ds3_whole_[q]);
}

// release_sub_module after a module's forward (the op that last reads its parameters).
void TrainingStep::ds3_after_forward(int32_t i) {
  if (ds3_prefetch()) return ds3_run_calls(kDs3AfterForward, i);
  for (int32_t k : ds3_ending_at_[i]) {
    const Ds3Module& m = ds3_modules_[k];
    if (m.forward_at >= 0) ds3_release(ds3_releases_[m.forward_at], "deepspeed:release:" + m.name, Phase::Forward);
  }
}

// pre_sub_module_backward_function: before the backward of the module's last op.
void TrainingStep::ds3_pre_backward(int32_t i) {
  if (ds3_prefetch()) return ds3_run_calls(kDs3BeforeBackward, i);
  for (int32_t m : ds3_ending_at_[i])
    if (ds3_modules_[m].backward_at >= 0) ds3_fetch(m, Phase::Backward);
}

// post_sub_module_backward_function: after the backward of the module's first op (its grad hooks ran first:
// AccumulateGrad nodes are scheduled before the PostBackwardFunctionModule node).
void TrainingStep::ds3_post_backward(int32_t i) {
  if (ds3_prefetch()) return ds3_run_calls(kDs3AfterBackward, i);
  for (int32_t k : ds3_starting_at_[i]) {
    const Ds3Module& m = ds3_modules_[k];
    if (m.backward_at >= 0 && m.post_backward)
      ds3_release(ds3_releases_[m.backward_at], "deepspeed:release_backward:" + m.name, Phase::Backward);
  }
}

}  // namespace memplan
