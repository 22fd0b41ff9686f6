// ServeProbe (report/serve_probe.h): the model's serving steps, read once and remembered.
#include "report/serve_probe.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "onnx_import/errors.h"
#include "report/option_choices.h"

namespace memplan {

ServeProbe::ServeProbe(std::string path, Bindings user, const ServeSettings& settings, EstimateOptions options)
    : session_(std::move(path), user.graph, user.moe_routing, uses_vllm_analysis(settings.engine), user.experts),
      user_(std::move(user)), settings_(settings), options_(std::move(options)) {
  // vLLM serves in its --dtype auto's type; memplan's --dtype fp32 (the default, "as stored") stands for it. The
  // other engines answer over vLLM's analysis (report/serve_engines.h), in the same type.
  auto_dtype_ = uses_vllm_analysis(settings_.engine) && options_.inference.float_dtype == DType::Float32;
  serve_in_type();
}

DType ServeProbe::auto_served_dtype() {
  return vllm_auto_dtype(session_.stored_float_dtype(), options_.execution.cuda_arch_major, session_.model_type());
}

void ServeProbe::serve_in_type() {
  if (auto_dtype_) options_.inference.float_dtype = auto_served_dtype();
  const bool fp8 = kKvCacheDtypeChoices.parse(settings_.kv_cache_dtype, "--kv-cache-dtype");
  kv_ = find_kv_cache(session_, user_, settings_.kv_dim, fp8 ? DType::Float8E4M3FN : options_.inference.float_dtype);
  options_.inference.held_outside = kv_.tensors();
  weights_bytes_.reset();
}

void ServeProbe::use_gpu_architecture(const GpuSpec& gpu) {
  apply_gpu_architecture(gpu, options_);
  if (auto_dtype_ && auto_served_dtype() != options_.inference.float_dtype) serve_in_type();
}

std::shared_ptr<const Graph> ServeProbe::shape_step(int64_t batch, int64_t cached, int64_t fresh) {
  std::shared_ptr<const Graph> g = session_.shape(kv_step_bindings(user_, kv_, batch, cached, fresh));
  if (std::find(steps_shaped_.begin(), steps_shaped_.end(), g) == steps_shaped_.end()) steps_shaped_.push_back(g);
  return g;
}

const EngineKernelSites& ServeProbe::kernel_sites(const std::shared_ptr<const Graph>& step) {
  if (std::find(steps_shaped_.begin(), steps_shaped_.end(), step) == steps_shaped_.end())
    throw std::logic_error("ServeProbe::kernel_sites: a graph shape_step did not return");
  auto it = sites_.find(step.get());
  if (it == sites_.end()) {
    std::vector<std::string> presents;
    for (const auto& [past, present] : kv_.pairs) presents.push_back(present);
    it = sites_.emplace(step.get(), find_engine_kernel_sites(*step, presents)).first;
  }
  return it->second;
}

uint64_t ServeProbe::weights_bytes() {
  if (!weights_bytes_)
    weights_bytes_ = estimate_graph(*shape_step(1, 0, settings_.max_batched_tokens), options_).breakdown.weights;
  return *weights_bytes_;
}

ServeStep ServeProbe::step(int64_t batch, int64_t cached, int64_t fresh) {
  const auto key = std::make_tuple(options_.execution.cuda_arch_major, batch, cached, fresh);
  auto it = memo_.find(key);
  if (it == memo_.end()) {
    std::optional<uint64_t> need;
    try {
      need = estimate_totals(*session_.shape(kv_step_bindings(user_, kv_, batch, cached, fresh)), options_).required_bytes;
    } catch (const ShapeOverflow&) {
      need = std::nullopt;
    }
    it = memo_.emplace(key, need).first;
  }
  if (!it->second) throw ShapeOverflow("serve: a step of " + std::to_string(batch) + " sequences, " +
                                       std::to_string(cached) + " cached tokens, overflows 64-bit byte counts");
  ServeStep s;
  s.batch = batch;
  s.cached_tokens = cached;
  s.new_tokens = fresh;
  s.required_bytes = *it->second;
  s.activation_peak_bytes = s.required_bytes > weights_bytes() ? s.required_bytes - weights_bytes() : 0;
  return s;
}

ServeStep ServeProbe::prefill() { return step(1, 0, settings_.max_batched_tokens); }
ServeStep ServeProbe::decode(int64_t batch, int64_t cached_tokens) { return step(batch, cached_tokens, 1); }

}  // namespace memplan
