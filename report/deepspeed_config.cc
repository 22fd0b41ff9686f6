// --deepspeed CONFIG.json read and checked alone (read_deepspeed_config, deepspeed_config.h): every key read, ignored
// or refused. The settings against the command line are deepspeed_config_apply.cc's.
#include "report/deepspeed_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "onnx_import/errors.h"

namespace memplan {
namespace {

using Json = nlohmann::json;

// Top-level keys that change no GPU memory memplan models, or that the graph and the options decide (the
// micro-batch is the graph's batch): logging, monitoring, the learning-rate schedule, clipping (in place,
// unscale_and_clip_grads), checkpoint saving.
const std::set<std::string> kIgnoredTop = {
    "train_batch_size", "train_micro_batch_size_per_gpu", "steps_per_print", "wall_clock_breakdown",
    "gradient_clipping", "scheduler", "prescale_gradients", "gradient_predivide_factor",
    "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "tensorboard", "wandb", "csv_monitor", "comet",
    "comms_logger", "flops_profiler", "dump_state", "memory_breakdown", "checkpoint", "disable_allgather"};
// zero_optimization keys that change no GPU memory at stages 1 and 2 (reduce_scatter and allgather_partitions
// choose collectives that work in the buckets; the stage3_* keys and sub_group_size act at stage 3 only; the rest
// are checkpoint or logging behaviour).
// The stage-3 keys (and reduce_scatter, which chooses stage 3's gradient path) are read into DeepSpeedZero and
// used at stage 3 only (cost_models/deepspeed_zero3.h).
const std::set<std::string> kIgnoredZero = {
    "allgather_partitions", "load_from_fp32_weights", "elastic_checkpoint",
    "ignore_unused_parameters", "use_multi_rank_bucket_allreduce", "stage3_gather_16bit_weights_on_model_save",
    "gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save", "log_trace_cache_warnings",
    "enable_sanity_checks"};
// fp16 / bf16 keys besides "enabled" and bf16's check_grad_overflow (read): the loss scaler's settings (scalars).
const std::set<std::string> kIgnoredPrecision = {"loss_scale", "loss_scale_window", "initial_scale_power", "hysteresis",
                                                 "consecutive_hysteresis", "min_loss_scale"};
// offload_optimizer / offload_param keys that size nothing memplan reports (super_offload and cpuadam_cores_perc are
// refused as unknown). pin_memory, the NVMe keys and ratio are read by Reader::offload.
const std::set<std::string> kIgnoredOffload = {"pin_memory"};

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw InputError("--deepspeed " + path_ + ": " + key + " " + why);
  }

  bool is_auto(const Json& v) const { return v.is_string() && v.get<std::string>() == "auto"; }

  bool boolean(const Json& v, const std::string& key) const {
    if (!v.is_boolean()) fail(key, "must be true or false" + std::string(is_auto(v) ? " (HF Trainer fills no \"auto\" here)" : ""));
    return v.get<bool>();
  }

  // A non-negative whole number (DeepSpeed's pp_int fields are ints with ge=0; JSON writes 5e8 as a float).
  uint64_t count(const Json& v, const std::string& key) const {
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number_integer()) fail(key, "must be >= 0 (DeepSpeedZeroConfig: ge=0), got " + v.dump());
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (d < 0) fail(key, "must be >= 0 (DeepSpeedZeroConfig: ge=0), got " + v.dump());
      if (d != std::floor(d) || d > 9.007199254740992e15) fail(key, "must be a whole number of elements, got " + v.dump());
      return static_cast<uint64_t>(d);
    }
    fail(key, "must be a number" + std::string(is_auto(v) ? ": HF Trainer fills no \"auto\" for it" : ", got " + v.dump()));
  }

  void unknown(const std::string& key) const {
    fail(key, "is not modelled (it may change what DeepSpeed holds on the GPU) or not a key memplan knows; the "
              "keys read and ignored are listed in docs/cost-models.md, \"DeepSpeed ZeRO\"");
  }

  void precision(const Json& section, const std::string& name, DeepSpeedSettings& s) const {
    if (!section.is_object()) fail(name, "must be an object");
    for (const auto& [key, v] : section.items()) {
      const std::string full = name + "." + key;
      if (key == "enabled") {
        if (is_auto(v)) continue;
        if (boolean(v, full)) {
          if (!s.precision.empty() && s.precision != "fp32") fail(full, "and " + s.precision + ".enabled are both true");
          s.precision = name;
        } else if (s.precision.empty()) {
          s.precision = "fp32";
        }
      } else if (key == "check_grad_overflow" && name == "bf16") {
        s.bf16_check_grad_overflow = boolean(v, full);  // the step's overflow check (DeepSpeedZero::check_grad_overflow)
      } else if (!kIgnoredPrecision.count(key)) {
        unknown(full);
      }
    }
  }

  // offload_optimizer / offload_param (offload_config.py). "nvme" is ZeRO-Infinity's (cost_models/deepspeed_zero3_nvme.h):
  // its keys are read into `swap` (nvme_path's absence is checked at stage 3, check_stage3).
  DeepSpeedOffload offload(const Json& section, const std::string& name, bool optimizer, DeepSpeedSwap& swap) const {
    if (!section.is_object()) fail(name, "must be an object");
    DeepSpeedOffload where = DeepSpeedOffload::None;
    for (const auto& [key, v] : section.items()) {
      const std::string full = name + "." + key;
      if (key == "device") {
        const std::string d = v.is_string() ? v.get<std::string>() : "";
        if (d == "cpu") where = DeepSpeedOffload::Cpu;
        else if (d == "nvme") where = DeepSpeedOffload::Nvme;
        else if (d != "none") fail(full, "must be \"none\", \"cpu\" or \"nvme\", got " + v.dump());
      } else if (key == "ratio") {
        if (!v.is_number() || v.get<double>() != 1.0) fail(full, "below 1 (partial offload) is stage 3's: not modelled");
      } else if (key == "nvme_path") {
        if (!v.is_null() && !v.is_string()) fail(full, "must be a path (a string), got " + v.dump());
        swap.nvme_path = v.is_string();
      } else if (key == "buffer_count") {
        swap.buffer_count = count(v, full);
      } else if (!optimizer && key == "buffer_size") {
        swap.buffer_size = count(v, full);
      } else if (!optimizer && key == "max_in_cpu") {
        swap.max_in_cpu = count(v, full);
      } else if (optimizer && (key == "pipeline_read" || key == "pipeline_write")) {
        swap.pipeline = boolean(v, full) || swap.pipeline;
      } else if (optimizer && key == "fast_init") {
        swap.fast_init = boolean(v, full);
      } else if (key == "pin_memory") {
        boolean(v, full);  // pinned or pageable, the same host bytes
      } else if (!kIgnoredOffload.count(key)) {
        unknown(full);
      }
    }
    return where;
  }

  // The top-level "aio" section (swap_tensor/aio_config.py get_aio_config): block_size and intra_op_parallelism size
  // the swap buffers' alignment and what is swappable; use_gds puts the parameter swap buffers on the GPU.
  void aio(const Json& section, DeepSpeedAio& a) const {
    if (!section.is_object()) fail("aio", "must be an object");
    for (const auto& [key, v] : section.items()) {
      const std::string full = "aio." + key;
      if (key == "block_size") {
        a.block_size = count(v, full);
      } else if (key == "intra_op_parallelism") {
        a.intra_op_parallelism = count(v, full);
        if (a.intra_op_parallelism < 1) fail(full, "must be at least 1, got " + v.dump());
      } else if (key == "use_gds") {
        a.use_gds = boolean(v, full);
      } else if (key == "queue_depth") {
        count(v, full);  // requests in flight: no memory
      } else if (key == "single_submit" || key == "overlap_events") {
        boolean(v, full);
      } else {
        unknown(full);
      }
    }
  }

  void zero(const Json& section, DeepSpeedSettings& s) const {
    if (!section.is_object()) fail("zero_optimization", "must be an object");
    DeepSpeedZero& z = s.zero;
    bool overlap_given = false;
    for (const auto& [key, v] : section.items()) {
      const std::string full = "zero_optimization." + key;
      if (key == "stage") {
        const uint64_t stage = count(v, full);
        if (stage > 3) fail(full, "must be 0, 1, 2 or 3, got " + v.dump());
        s.stage = static_cast<int>(stage);
      } else if (key == "reduce_bucket_size") {
        if (is_auto(v)) z.reduce_bucket_size_auto = true;
        else z.reduce_bucket_size = count(v, full);
      } else if (key == "allgather_bucket_size") {
        z.allgather_bucket_size = count(v, full);
      } else if (key == "overlap_comm") {
        z.overlap_comm = boolean(v, full);
        overlap_given = true;
      } else if (key == "contiguous_gradients") {
        z.contiguous_gradients = boolean(v, full);
      } else if (key == "round_robin_gradients") {
        z.round_robin_gradients = boolean(v, full);
      } else if (key == "stage3_prefetch_bucket_size" || key == "prefetch_bucket_size") {  // aliases (config.py)
        if (is_auto(v)) z.prefetch_bucket_size_auto = true;
        else z.prefetch_bucket_size = count(v, full);
      } else if (key == "stage3_param_persistence_threshold" || key == "param_persistence_threshold") {
        if (is_auto(v)) z.param_persistence_threshold_auto = true;
        else z.param_persistence_threshold = count(v, full);
      } else if (key == "stage3_model_persistence_threshold" || key == "model_persistence_threshold") {
        z.model_persistence_threshold = count(v, full);
      } else if (key == "stage3_max_live_parameters" || key == "max_live_parameters") {
        z.max_live_parameters = count(v, full);
      } else if (key == "stage3_max_reuse_distance" || key == "max_reuse_distance") {
        z.max_reuse_distance = count(v, full);
      } else if (key == "sub_group_size") {
        z.sub_group_size = count(v, full);
      } else if (key == "reduce_scatter") {
        z.reduce_scatter = boolean(v, full);
      } else if (key == "offload_optimizer") {
        z.offload_optimizer = offload(v, full, /*optimizer=*/true, z.optimizer_swap);
      } else if (key == "offload_param") {
        z.offload_param = offload(v, full, /*optimizer=*/false, z.param_swap);
      } else if (kIgnoredZero.count(key)) {
        continue;
      } else {
        unknown(full);
      }
    }
    // DeepSpeedZeroConfig.overlap_comm_valid: None becomes `stage == 3`.
    if (!overlap_given) z.overlap_comm = s.stage == 3;
    // DeepSpeedZeroOptimizer.__init__ asserts allgather_bucket_size % nccl_start_alignment_factor (2) == 0.
    if (z.allgather_bucket_size % 2 != 0)
      fail("zero_optimization.allgather_bucket_size", "must be a multiple of 2 (stage_1_and_2.py asserts it), got " +
                                                          std::to_string(z.allgather_bucket_size));
  }

 private:
  std::string path_;
};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

const std::vector<std::string>& deepspeed_ignored_keys() {
  static const std::vector<std::string> all = [] {
    std::vector<std::string> out(kIgnoredTop.begin(), kIgnoredTop.end());
    for (const std::string& k : kIgnoredZero) out.push_back("zero_optimization." + k);
    for (const std::string& k : kIgnoredPrecision) out.push_back("fp16/bf16." + k);
    for (const std::string& k : kIgnoredOffload) out.push_back("offload_optimizer/offload_param." + k);
    return out;
  }();
  return all;
}

DeepSpeedSettings read_deepspeed_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("--deepspeed " + path + ": cannot open the file");
  std::stringstream text;
  text << in.rdbuf();
  Json j;
  try {
    j = Json::parse(text.str());
  } catch (const Json::parse_error& e) {
    throw InputError("--deepspeed " + path + ": not valid JSON (" + e.what() + ")");
  }
  const Reader r(path);
  if (!j.is_object()) r.fail("the file", "must hold a JSON object");
  DeepSpeedSettings s;
  s.zero.enabled = true;
  for (const auto& [key, v] : j.items()) {
    if (key == "zero_optimization") {
      r.zero(v, s);
    } else if (key == "fp16" || key == "bf16" || key == "bfloat16") {
      r.precision(v, key == "fp16" ? "fp16" : "bf16", s);
    } else if (key == "aio") {
      r.aio(v, s.zero.aio);
    } else if (key == "gradient_accumulation_steps") {
      if (!r.is_auto(v)) {
        const uint64_t n = r.count(v, key);
        if (n < 1 || n > 1000000) r.fail(key, "must be at least 1, got " + v.dump());
        s.grad_accum = static_cast<int>(n);
      }
    } else if (key == "optimizer") {
      if (!v.is_object() || !v.contains("type") || !v["type"].is_string()) r.fail("optimizer", "must be an object with a \"type\"");
      s.optimizer = lower(v["type"].get<std::string>());
      for (const auto& [k, w] : v.items())
        if (k != "type" && k != "params") r.unknown("optimizer." + k);
    } else if (!kIgnoredTop.count(key)) {
      r.unknown(key);
    }
  }
  return s;
}

}  // namespace memplan
