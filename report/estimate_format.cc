#include "report/estimate_format.h"

#include <fmt/format.h>

#include "onnx_import/checked.h"
#include "report/sizes.h"

namespace memplan {
namespace {

std::string percent(uint64_t part, uint64_t whole) {
  return whole == 0 ? "" : fmt::format("{:5.1f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

std::string device_line_text(const Estimate& e) {
  std::string parts = fmt::format("total + {} CUDA context ({})", format_bytes(e.outside.context_bytes),
                                  e.outside.context_source == "catalog" ? "the catalog's reserve" : "--reserve");
  if (e.outside.nccl.bytes > 0)
    parts += fmt::format(" + {} NCCL buffers", format_bytes(e.outside.nccl.bytes));
  return fmt::format("  {:<44}{:>12}  = {}\n", "device (nvidia-smi)", format_bytes(e.device_bytes), parts);
}

}  // namespace

nlohmann::ordered_json outside_allocator_json(const OutsideAllocator& o) {
  return {{"context_bytes", o.context_bytes},
          {"context_source", o.context_source},
          {"nccl_bytes", o.nccl.bytes},
          {"nccl", {{"communicators", o.nccl.communicators},
                    {"channels", o.nccl.channels},
                    {"bytes_per_channel", o.nccl.bytes_per_channel}}}};
}

std::vector<std::pair<std::string, uint64_t>> breakdown_rows(const Estimate& e) {
  const Breakdown& b = e.breakdown;
  const bool train = e.mode == Mode::Training;
  std::vector<std::pair<std::string, uint64_t>> rows = {{"weights", b.weights}, {"activations", b.activations}};
  if (train) {
    rows.push_back({"activation gradients", b.activation_grads});
    rows.push_back({"parameter gradients", b.gradients});
    rows.push_back({"optimizer states", b.optimizer_states});
  }
  rows.push_back({"workspace", b.workspace});
  rows.push_back({"allocator rounding", b.allocator_rounding});
  rows.push_back({e.runtime == Runtime::Ideal ? "arena fragmentation" : "allocator overhead (reserved - allocated)",
                  b.allocator_overhead});
  rows.push_back({"fixed runtime costs", b.fixed});
  return rows;
}

nlohmann::ordered_json bound_values_json(const Graph& graph) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const std::string& name : graph.bound_values) {
    const auto id = graph.find_tensor(name);
    if (!id) continue;
    const Tensor& t = graph.tensors[static_cast<size_t>(*id)];
    std::vector<nlohmann::ordered_json> items;
    if (t.int_value)
      for (const int64_t v : *t.int_value) {
        nlohmann::ordered_json item;
        if (t.dtype == DType::Bool) item = v != 0;
        else item = v;
        items.push_back(std::move(item));
      }
    else if (t.real_value)
      for (const double v : *t.real_value) items.emplace_back(v);
    if (t.shape.empty() && items.size() == 1) {
      out[name] = items.front();
    } else {
      nlohmann::ordered_json list = nlohmann::ordered_json::array();
      for (auto& item : items) list.push_back(std::move(item));
      out[name] = std::move(list);
    }
  }
  return out;
}

nlohmann::ordered_json breakdown_to_json(const Breakdown& b) {
  return {{"weights", b.weights},
          {"activations", b.activations},
          {"activation_grads", b.activation_grads},
          {"gradients", b.gradients},
          {"optimizer_states", b.optimizer_states},
          {"workspace", b.workspace},
          {"allocator_rounding", b.allocator_rounding},
          {"allocator_overhead", b.allocator_overhead},
          {"fixed", b.fixed}};
}

nlohmann::ordered_json estimate_to_json(const Estimate& e, const Graph& graph, const std::string& configuration) {
  nlohmann::ordered_json j;
  j["schema"] = kEstimateSchema;
  j["model"] = e.model;
  j["mode"] = mode_name(e.mode);
  j["runtime"] = runtime_name(e.runtime);
  j["configuration"] = configuration;
  nlohmann::ordered_json dims = nlohmann::ordered_json::object();
  for (const auto& [k, v] : graph.bound_dims) dims[k] = v;
  j["dims"] = dims;
  if (!graph.bound_values.empty()) j["values"] = bound_values_json(graph);
  j["total_bytes"] = e.total_bytes;
  j["required_bytes"] = e.required_bytes;
  if (e.runtime != Runtime::Ideal) {
    j["allocated_bytes"] = e.allocated_bytes;
    j["reserved_bytes"] = e.reserved_bytes;
    j["device_bytes"] = e.device_bytes;
    j["outside_allocator"] = outside_allocator_json(e.outside);
  }
  if (e.at_budget)
    j["at_budget"] = {{"budget_bytes", e.at_budget->budget_bytes},
                      {"runs", e.at_budget->runs},
                      {"alloc_retries", e.at_budget->alloc_retries},
                      {"reserved_bytes", e.at_budget->reserved_bytes},
                      {"out_of_memory_at", e.at_budget->runs ? nlohmann::ordered_json(nullptr)
                                                             : nlohmann::ordered_json(e.at_budget->out_of_memory_at)}};
  j["breakdown"] = breakdown_to_json(e.breakdown);
  j["lower_bound_bytes"] = e.lower_bound_bytes;
  j["arena_bytes"] = e.arena_bytes;
  j["resident_bytes"] = e.resident_bytes;
  j["schedule"] = {{"used", e.schedule_used},
                   {"steps", e.num_steps},
                   {"model_order_peak_bytes", e.model_order_peak_bytes},
                   {"memory_order_peak_bytes", e.memory_order_peak_bytes}};
  nlohmann::ordered_json top = nlohmann::ordered_json::array();
  for (const LiveTensor& t : e.top_live)
    top.push_back({{"name", t.name}, {"op", t.op}, {"category", category_name(t.category)}, {"bytes", t.bytes}});
  j["peak"] = {{"step", e.peak_step},
               {"name", e.peak_step_name},
               {"op", e.peak_op},
               {"phase", phase_name(e.peak_phase)},
               {"largest_live_tensors", top}};
  if (e.mode == Mode::Training) {
    j["training"] = {{"first_iteration_total_bytes", e.first_iteration_total_bytes.value_or(0)},
                     {"param_bytes", e.param_bytes},
                     {"grad_bytes", e.grad_bytes},
                     {"optimizer_state_bytes", e.optimizer_state_bytes},
                     {"recompute_percent_of_forward_flops", e.recompute_percent},
                     {"checkpoint_boundaries", e.checkpoint_boundaries}};
    if (e.lora_adapted_layers > 0 || e.lora_adapted_parameters > 0) {
      j["training"]["lora"] = {{"adapted_layers", e.lora_adapted_layers}, {"adapter_parameters", e.lora_parameters}};
      if (e.lora_adapted_parameters > 0) j["training"]["lora"]["target_parameters"] = e.lora_adapted_parameters;
    }
    if (e.frozen_stored_bytes > 0) j["training"]["frozen_stored_bytes"] = e.frozen_stored_bytes;
    if (e.paged_state_bytes > 0) j["training"]["paged_optimizer_state_bytes"] = e.paged_state_bytes;
    if (e.offloaded_host_bytes > 0) j["training"]["offloaded_activation_host_bytes"] = e.offloaded_host_bytes;
    if (e.deepspeed_host_bytes > 0) j["training"]["deepspeed_offload_host_bytes"] = e.deepspeed_host_bytes;
    if (e.deepspeed_param_host_bytes > 0) j["training"]["deepspeed_param_host_bytes"] = e.deepspeed_param_host_bytes;
    if (e.deepspeed_nvme_bytes > 0) j["training"]["deepspeed_nvme_bytes"] = e.deepspeed_nvme_bytes;
    if (e.fsdp_offload_host_bytes > 0) j["training"]["fsdp_offload_host_bytes"] = e.fsdp_offload_host_bytes;
    if (!e.pipeline_stages.empty()) {
      nlohmann::ordered_json stages = nlohmann::ordered_json::array();
      for (size_t i = 0; i < e.pipeline_stages.size(); ++i) {
        const PipelineStageFacts& s = e.pipeline_stages[i];
        stages.push_back({{"stage", i}, {"first_unit", s.first_unit}, {"last_unit", s.last_unit}, {"units", s.units},
                          {"in_flight_micro_batches", s.in_flight_micro_batches},
                          {"saved_bytes_per_micro_batch", s.saved_bytes_per_micro_batch},
                          {"param_bytes", s.param_bytes}, {"peak_bytes", s.peak_bytes},
                          {"required_bytes", s.required_bytes}});
      }
      j["training"]["pipeline"] = {{"busiest_stage", e.pipeline_busiest_stage}, {"stages", stages}};
    }
  }
  if (e.tp > 1)  // every figure is one GPU's; TP ranks are symmetric, rank 0 holds the most (uneven vocabulary)
    j["parallel"] = {{"tp", e.tp}, {"sequence_parallel", e.sequence_parallel}, {"busiest_tp_rank", 0}};
  if (e.cudnn_workspace) {
    const CudnnWorkspaceRange& c = *e.cudnn_workspace;
    j["cudnn_workspace"] = {{"convolution_steps", c.convolution_steps},
                            {"counted_bytes", c.counted_bytes},
                            {"least_allocated_at_convolution_bytes", c.least_allocated_at_convolution},
                            {"fit_uses", "counted_bytes"},
                            {"benchmark", c.benchmark}};
    if (c.first_iteration_extra_free) {
      j["cudnn_workspace"]["first_iteration_extra_free_bytes"] = *c.first_iteration_extra_free;
      j["cudnn_workspace"]["first_iteration_extra_free_at"] = c.first_iteration_extra_free_at;
    }
  }
  if (e.kv_phases) {
    auto step = [](const KvStep& s) {
      return nlohmann::ordered_json{{"batch", s.batch},
                                    {"cached_tokens", s.cached_tokens},
                                    {"new_tokens", s.new_tokens},
                                    {"required_bytes", s.required_bytes},
                                    {"activation_peak_bytes", s.activation_peak_bytes},
                                    {"kv_cache_bytes", s.kv_cache_bytes}};
    };
    j["kv_cache"] = {{"cached_dim", e.kv_phases->cached_dim},
                     {"new_tokens_dim", e.kv_phases->new_dim},
                     {"bytes_per_token", e.kv_phases->bytes_per_token},
                     {"prefill", step(e.kv_phases->prefill)},
                     {"decode", step(e.kv_phases->decode)}};
  }
  j["notes"] = e.notes;
  j["warnings"] = graph.warnings;
  return j;
}

std::string estimate_to_text(const Estimate& e, const std::string& configuration) {
  std::string out = fmt::format("{}\n  {}\n\n", e.model, configuration);
  const bool train = e.mode == Mode::Training;
  out += fmt::format("  {:<44}{:>12}  ({} B)\n", train ? "total (steady-state step)" : "total", format_bytes(e.total_bytes),
                     format_count(e.total_bytes));
  for (const auto& [label, bytes] : breakdown_rows(e))
    out += fmt::format("    {:<42}{:>12}  {}\n", label, format_bytes(bytes), percent(bytes, e.total_bytes));
  if (train && e.first_iteration_total_bytes)
    out += fmt::format("  {:<44}{:>12}\n", "first iteration (before optimizer states exist)",
                       format_bytes(*e.first_iteration_total_bytes));
  if (e.runtime == Runtime::PyTorch) {
    out += fmt::format("  {:<44}{:>12}\n", "torch.cuda.max_memory_allocated()", format_bytes(e.allocated_bytes));
    out += fmt::format("  {:<44}{:>12}\n", "torch.cuda.max_memory_reserved()", format_bytes(e.reserved_bytes));
    out += device_line_text(e);
    out += fmt::format("  {:<44}{:>12}  (the allocator flushes its cache and retries before failing)\n",
                       "runs on a device budget of at least", format_bytes(e.required_bytes));
    if (const auto& b = e.at_budget; b && b->runs)
      out += fmt::format("  {:<44}{:>12}  runs, reserving {}, {} cache flush{}\n", "on the budget of", format_bytes(b->budget_bytes),
                         format_bytes(b->reserved_bytes), b->alloc_retries, b->alloc_retries == 1 ? "" : "es");
    else if (b)
      out += fmt::format("  {:<44}{:>12}  out of memory at {}\n", "on the budget of", format_bytes(b->budget_bytes),
                         b->out_of_memory_at);
  } else if (e.runtime == Runtime::OnnxRuntime) {
    out += fmt::format("  {:<44}{:>12}\n", "arena MaxInUse", format_bytes(e.allocated_bytes));
    out += fmt::format("  {:<44}{:>12}\n", "arena TotalAllocated", format_bytes(e.reserved_bytes));
    out += device_line_text(e);
  }
  out += fmt::format("  {:<44}{:>12}   static arena {} ({})\n", "live bytes at peak (lower bound)",
                     format_bytes(e.lower_bound_bytes), format_bytes(e.arena_bytes), e.packing_algorithm);
  if (e.memory_order_peak_bytes)
    out += fmt::format("  {:<44}{:>12}   memory-aware order {} (using: {} order)\n", "model-order peak",
                       format_bytes(e.model_order_peak_bytes), format_bytes(e.memory_order_peak_bytes), e.schedule_used);
  if (train) {
    out += fmt::format("  {:<44}{:>12}  grads {}  optimizer states {}\n", "parameters", format_bytes(e.param_bytes),
                       format_bytes(e.grad_bytes), format_bytes(e.optimizer_state_bytes));
    if (e.paged_state_bytes > 0)
      out += fmt::format("  {:<44}{:>12}  CUDA managed memory outside the allocator: not in the figures above\n",
                         "paged optimizer states", format_bytes(e.paged_state_bytes));
    if (e.offloaded_host_bytes > 0)
      out += fmt::format("  {:<44}{:>12}  pinned host memory (--offload-activations): not in the figures above\n",
                         "offloaded activations", format_bytes(e.offloaded_host_bytes));
    if (e.deepspeed_host_bytes > 0)
      out += fmt::format("  {:<44}{:>12}  host memory (--deepspeed offload_optimizer): not in the figures above\n",
                         "DeepSpeed offloaded optimizer", format_bytes(e.deepspeed_host_bytes));
    if (e.deepspeed_param_host_bytes > 0)
      out += fmt::format("  {:<44}{:>12}  pinned host memory (--deepspeed offload_param): not in the figures above\n",
                         "DeepSpeed offloaded parameters", format_bytes(e.deepspeed_param_host_bytes));
    if (e.deepspeed_nvme_bytes > 0)
      out += fmt::format("  {:<44}{:>12}  NVMe swap files (--deepspeed ... nvme): not in the figures above\n",
                         "DeepSpeed NVMe offload", format_bytes(e.deepspeed_nvme_bytes));
    if (e.fsdp_offload_host_bytes > 0)
      out += fmt::format("  {:<44}{:>12}  host memory (--fsdp-cpu-offload: shards, grads, states): not in the figures above\n",
                         "FSDP CPU offload", format_bytes(e.fsdp_offload_host_bytes));
    for (size_t i = 0; i < e.pipeline_stages.size(); ++i) {
      const PipelineStageFacts& s = e.pipeline_stages[i];
      out += fmt::format("  {:<44}{:>12}  {} to {}, {} micro-batch(es) in flight{}\n",
                         fmt::format("pipeline stage {} (GPU {}) lower bound", i, i), format_bytes(s.peak_bytes),
                         s.first_unit, s.last_unit, s.in_flight_micro_batches,
                         static_cast<int>(i) == e.pipeline_busiest_stage ? "  <- busiest: the estimate above" : "");
    }
    if (!e.checkpoint_boundaries.empty())
      out += fmt::format("  checkpointing: {} boundaries, recompute {:.1f}% of forward FLOPs\n",
                         e.checkpoint_boundaries.size(), e.recompute_percent);
  }
  if (const auto& kv = e.kv_phases) {
    out += fmt::format("  KV cache along {} (new tokens: {}), {} B per token and sequence; each step with the cache\n"
                       "  held apart (paged, as serve counts it):\n",
                       kv->cached_dim, kv->new_dim, format_count(kv->bytes_per_token));
    auto line = [&](const char* label, const KvStep& s) {
      out += fmt::format("    {:<8} {} x {} new, {} cached: activation peak {}, step {}, cache {}\n", label, s.batch,
                         s.new_tokens, s.cached_tokens, format_bytes(s.activation_peak_bytes),
                         format_bytes(s.required_bytes), format_bytes(s.kv_cache_bytes));
    };
    line("prefill", kv->prefill);
    line("decode", kv->decode);
  }
  out += fmt::format("\npeak at step {} of {}: {} ({}, {})\n", e.peak_step, e.num_steps, e.peak_step_name, e.peak_op,
                     phase_name(e.peak_phase));
  if (!e.top_live.empty()) {
    out += "  largest tensors live there:\n";
    for (const LiveTensor& t : e.top_live)
      out += fmt::format("    {:>10}  {:<16} {:<18} {}\n", format_bytes(t.bytes), category_name(t.category),
                         t.op.empty() ? "-" : t.op, t.name);
  }
  if (!e.notes.empty()) {
    out += "\nnotes:\n";
    for (const std::string& n : e.notes) out += "  - " + n + "\n";
  }
  out += "\nsizes: KiB/MiB/GiB = 1024^k bytes.\n";
  return out;
}

std::string estimate_to_markdown(const Estimate& e, const std::string& configuration) {
  std::string out = fmt::format("### memplan: `{}`\n\n{}\n\n| | bytes | |\n|---|---:|---:|\n", e.model, configuration);
  out += fmt::format("| **total** | **{}** | {} B |\n", format_bytes(e.total_bytes), format_count(e.total_bytes));
  for (const auto& [label, bytes] : breakdown_rows(e))
    out += fmt::format("| {} | {} | {} |\n", label, format_bytes(bytes), percent(bytes, e.total_bytes));
  if (e.runtime == Runtime::PyTorch) {
    out += fmt::format("| max_memory_allocated | {} | |\n", format_bytes(e.allocated_bytes));
    out += fmt::format("| max_memory_reserved | {} | |\n", format_bytes(e.reserved_bytes));
  }
  if (e.runtime != Runtime::Ideal)
    out += fmt::format("| device (nvidia-smi) | {} | + {} outside the allocator |\n", format_bytes(e.device_bytes),
                       format_bytes(e.outside.total()));
  if (e.runtime == Runtime::PyTorch) {
    out += fmt::format("| runs on a device budget of at least | {} | |\n", format_bytes(e.required_bytes));
  }
  if (e.offloaded_host_bytes > 0)
    out += fmt::format("| offloaded activations (pinned host memory, not in the figures above) | {} | {} B |\n",
                       format_bytes(e.offloaded_host_bytes), format_count(e.offloaded_host_bytes));
  if (e.deepspeed_host_bytes > 0)
    out += fmt::format("| DeepSpeed offloaded optimizer (host memory, not in the figures above) | {} | {} B |\n",
                       format_bytes(e.deepspeed_host_bytes), format_count(e.deepspeed_host_bytes));
  if (e.deepspeed_param_host_bytes > 0)
    out += fmt::format("| DeepSpeed offloaded parameters (pinned host memory, not in the figures above) | {} | {} B |\n",
                       format_bytes(e.deepspeed_param_host_bytes), format_count(e.deepspeed_param_host_bytes));
  if (e.deepspeed_nvme_bytes > 0)
    out += fmt::format("| DeepSpeed NVMe offload (swap files, not in the figures above) | {} | {} B |\n",
                       format_bytes(e.deepspeed_nvme_bytes), format_count(e.deepspeed_nvme_bytes));
  if (e.fsdp_offload_host_bytes > 0)
    out += fmt::format("| FSDP CPU offload: shards, grads, optimizer states (host memory, not in the figures above) | {} | {} B |\n",
                       format_bytes(e.fsdp_offload_host_bytes), format_count(e.fsdp_offload_host_bytes));
  if (const auto& kv = e.kv_phases)
    for (const auto* s : {&kv->prefill, &kv->decode})
      out += fmt::format("| {} ({} x {} new, {} cached; KV cache apart) | {} | activation peak {} |\n",
                         s == &kv->prefill ? "prefill" : "decode", s->batch, s->new_tokens, s->cached_tokens,
                         format_bytes(s->required_bytes), format_bytes(s->activation_peak_bytes));
  out += fmt::format("\nPeak at step {} of {}: `{}` ({}, {}).\n", e.peak_step, e.num_steps, e.peak_step_name,
                     e.peak_op, phase_name(e.peak_phase));
  if (!e.top_live.empty()) {
    out += "\n| live at peak | op | category | bytes |\n|---|---|---|---:|\n";
    for (const LiveTensor& t : e.top_live)
      out += fmt::format("| `{}` | {} | {} | {} |\n", t.name, t.op.empty() ? "-" : t.op, category_name(t.category),
                         format_bytes(t.bytes));
  }
  if (!e.notes.empty()) {
    out += "\n";
    for (const std::string& n : e.notes) out += "- " + n + "\n";
  }
  return out;
}

uint64_t cudnn_free_at_least_loaded_convolution(const CudnnWorkspaceRange& r, uint64_t budget_bytes, uint64_t fixed) {
  const uint64_t in_use = checked_add(r.least_allocated_at_convolution, fixed);
  return budget_bytes > in_use ? budget_bytes - in_use : 0;
}

nlohmann::ordered_json cudnn_decision_json(const CudnnWorkspaceRange& r, uint64_t budget_bytes, uint64_t fixed) {
  nlohmann::ordered_json j{{"benchmark", r.benchmark}, {"decision_bytes", r.counted_bytes}};
  if (r.benchmark) {
    j["least_free_at_convolution_bytes"] = cudnn_free_at_least_loaded_convolution(r, budget_bytes, fixed);
    if (r.first_iteration_extra_free) j["first_iteration_extra_free_bytes"] = *r.first_iteration_extra_free;
  }
  return j;
}

std::string cudnn_decision_text(const CudnnWorkspaceRange& r, uint64_t budget_bytes, uint64_t fixed) {
  std::string text = fmt::format("  cuDNN convolution workspace: {} of the decision (PyTorch never fails a step on it: "
                                 "another\n    engine is taken when a workspace cannot be allocated)",
                                 format_bytes(r.counted_bytes));
  if (!r.benchmark) return text + "; --cudnn-benchmark off: heuristic engines, tried in order\n";
  const uint64_t free = cudnn_free_at_least_loaded_convolution(r, budget_bytes, fixed);
  text += fmt::format("; with cudnn.benchmark a plan may take up to\n    the free memory at its convolution: {} ({} B) "
                      "at the least loaded one\n",
                      format_bytes(free), format_count(free));
  if (r.first_iteration_extra_free && *r.first_iteration_extra_free > 0)
    text += fmt::format("  first iteration: up to {} ({} B) more free at a convolution than later ones; a plan chosen\n"
                        "    there that needs more is timed again in the second iteration, not an OOM\n",
                        format_bytes(*r.first_iteration_extra_free), format_count(*r.first_iteration_extra_free));
  return text;
}

}  // namespace memplan
