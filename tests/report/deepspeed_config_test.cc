// --deepspeed CONFIG.json (report/deepspeed_config.h): what the reader takes, what it ignores, and the refusals, each
// one message naming the key (and, for a contradiction, both sides).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "onnx_import/errors.h"
#include "report/deepspeed_config.h"
#include "report/estimate_config.h"
#include "tests/cost_models/graph_builder.h"

namespace memplan {
namespace {

std::string write_config(const std::string& name, const std::string& text) {
  const std::filesystem::path dir = testing::process_temp_dir("memplan_deepspeed_config_test");
  const std::string path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

std::string ds_refusal(const std::string& text, const std::string& shard = "none", const std::string& precision = "bf16",
                    int grad_accum = 1) {
  try {
    const std::string path = write_config("refused.json", text);
    TrainingOptions t;
    t.grad_accum = grad_accum;
    apply_deepspeed(read_deepspeed_config(path), path, shard, precision, false, false, t);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(DeepSpeedConfig, ReadsTheKeysAndDeepSpeedsDefaults) {
  // 5e8 is a JSON float: a whole number of elements. overlap_comm absent: DeepSpeedZeroConfig.overlap_comm_valid
  // makes it stage == 3, false here. Logging and the scheduler are ignored.
  const std::string path = write_config(
      "stage2.json",
      R"({"bf16": {"enabled": true}, "steps_per_print": 10, "scheduler": {"type": "WarmupLR"},
          "zero_optimization": {"stage": 2, "reduce_bucket_size": 2e8, "round_robin_gradients": true,
                                "offload_optimizer": {"device": "cpu", "pin_memory": true}}})");
  const DeepSpeedSettings s = read_deepspeed_config(path);
  EXPECT_EQ(s.stage, 2);
  EXPECT_EQ(s.precision, "bf16");
  EXPECT_EQ(s.zero.reduce_bucket_size, 200000000u);
  EXPECT_EQ(s.zero.allgather_bucket_size, 500000000u);  // DeepSpeedZeroConfig's default, pp_int(5e8)
  EXPECT_FALSE(s.zero.overlap_comm);
  EXPECT_TRUE(s.zero.contiguous_gradients);
  EXPECT_TRUE(s.zero.round_robin_gradients);
  EXPECT_EQ(s.zero.offload_optimizer, DeepSpeedOffload::Cpu);
  TrainingOptions t;
  t.precision = Precision::Bf16;
  apply_deepspeed(s, path, "none", "bf16", false, false, t);  // the stage from the config
  EXPECT_EQ(t.shard, Sharding::Zero2);
  EXPECT_EQ(t.deepspeed.stage, 2);
}

TEST(DeepSpeedConfig, DeepSpeedsOwnAdamIsFused) {
  const std::string path = write_config("adam.json", R"({"optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
                                                         "zero_optimization": {"stage": 1}})");
  TrainingOptions t;
  apply_deepspeed(read_deepspeed_config(path), path, "zero1", "fp32", false, false, t);
  EXPECT_EQ(t.optimizer_impl, OptimizerImpl::Fused);
  EXPECT_EQ(t.shard, Sharding::Zero1);
}

TEST(DeepSpeedConfig, BadInputIsOneMessageNamingTheKey) {
  EXPECT_TRUE(has(ds_refusal(R"({"zero_optimization": {"stage": 2,)"), "not valid JSON")) << ds_refusal("{");
  EXPECT_TRUE(has(ds_refusal("[1, 2]"), "JSON object"));
  const std::string mismatch = ds_refusal(R"({"zero_optimization": {"stage": 2}})", "zero1");
  EXPECT_TRUE(has(mismatch, "zero_optimization.stage 2") && has(mismatch, "--shard zero1")) << mismatch;
  const std::string negative = ds_refusal(R"({"zero_optimization": {"stage": 2, "reduce_bucket_size": -1}})");
  EXPECT_TRUE(has(negative, "zero_optimization.reduce_bucket_size") && has(negative, ">= 0")) << negative;
  const std::string fraction = ds_refusal(R"({"zero_optimization": {"stage": 2, "reduce_bucket_size": 1.5}})");
  EXPECT_TRUE(has(fraction, "whole number")) << fraction;
  const std::string overlap_auto = ds_refusal(R"({"zero_optimization": {"stage": 2, "overlap_comm": "auto"}})");
  EXPECT_TRUE(has(overlap_auto, "zero_optimization.overlap_comm")) << overlap_auto;
  const std::string unknown = ds_refusal(R"({"activation_checkpointing": {}, "zero_optimization": {"stage": 2}})");
  EXPECT_TRUE(has(unknown, "activation_checkpointing") && has(unknown, "not modelled")) << unknown;
  const std::string quantized = ds_refusal(R"({"zero_optimization": {"stage": 2, "zero_quantized_gradients": true}})");
  EXPECT_TRUE(has(quantized, "zero_optimization.zero_quantized_gradients")) << quantized;
  const std::string no_stage = ds_refusal(R"({"zero_optimization": {"overlap_comm": true}})");
  EXPECT_TRUE(has(no_stage, "no zero_optimization.stage")) << no_stage;
  const std::string precision = ds_refusal(R"({"fp16": {"enabled": true}, "zero_optimization": {"stage": 2}})");
  EXPECT_TRUE(has(precision, "fp16.enabled") && has(precision, "--precision bf16")) << precision;
  const std::string accumulation = ds_refusal(R"({"gradient_accumulation_steps": 4, "zero_optimization": {"stage": 2}})");
  EXPECT_TRUE(has(accumulation, "gradient_accumulation_steps 4") && has(accumulation, "--grad-accum 1")) << accumulation;
  // At stage 1 nvme is refused (the engine may pick BF16_Optimizer); at stage 2 it is cpu (stage_1_and_2.py
  // cpu_offload for any device but none; nvme_path is never read there).
  const std::string nvme1 =
      ds_refusal(R"({"zero_optimization": {"stage": 1, "offload_optimizer": {"device": "nvme", "nvme_path": "/x"}}})");
  EXPECT_TRUE(has(nvme1, "'nvme' at stage 1 is not modelled")) << nvme1;
  {
    const std::string file =
        write_config("nvme2.json", R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"}}})");
    TrainingOptions o;
    EXPECT_NO_THROW(apply_deepspeed(read_deepspeed_config(file), file, "none", "bf16", false, false, o));
    EXPECT_EQ(o.deepspeed.offload_optimizer, DeepSpeedOffload::Cpu);
  }
  const std::string param = ds_refusal(R"({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})");
  // "Valid only with stage 3" (offload_config.py DeepSpeedZeroOffloadParamConfig).
  EXPECT_TRUE(has(param, "offload_param at stage 2") && has(param, "valid only with stage 3")) << param;
  const std::string ddp = ds_refusal(R"({"zero_optimization": {"stage": 2}})", "ddp");
  EXPECT_TRUE(has(ddp, "--shard ddp")) << ddp;
}

// Stage 3: the stage-3 keys and their aliases are read; "auto" persistence waits for the graph (10 x hidden_size);
// what the modelled subset cannot take is refused naming the key or the flag.
TEST(DeepSpeedConfig, Stage3KeysAndItsRefusals) {
  const std::string path = write_config(
      "stage3.json",
      R"({"bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 0,
          "max_reuse_distance": 7, "stage3_max_live_parameters": 9, "stage3_param_persistence_threshold": "auto",
          "model_persistence_threshold": 11, "sub_group_size": 1e6, "reduce_bucket_size": 300}})");
  const DeepSpeedSettings s = read_deepspeed_config(path);
  EXPECT_EQ(s.stage, 3);
  EXPECT_EQ(s.zero.prefetch_bucket_size, 0u);
  EXPECT_EQ(s.zero.max_reuse_distance, 7u);
  EXPECT_EQ(s.zero.max_live_parameters, 9u);
  EXPECT_TRUE(s.zero.param_persistence_threshold_auto);
  EXPECT_EQ(s.zero.model_persistence_threshold, 11u);
  EXPECT_EQ(s.zero.sub_group_size, 1000000u);
  EXPECT_TRUE(s.zero.overlap_comm);  // overlap_comm_valid: absent at stage 3 is true
  TrainingOptions t;
  t.precision = Precision::Bf16;
  apply_deepspeed(s, path, "none", "bf16", false, false, t);
  EXPECT_EQ(t.shard, Sharding::Zero3);
  EXPECT_EQ(t.deepspeed.stage, 3);
  const std::string z3 = R"("stage": 3, "stage3_prefetch_bucket_size": 0)";
  // Prefetch is accepted: DeepSpeedZeroConfig's default 5e7 (no key) and HF's "auto", resolved from the graph later
  // (resolve_deepspeed_auto); a graph without module scopes is refused there (cost_models/deepspeed3_prefetch_test.cc).
  for (const char* text : {R"({"zero_optimization": {"stage": 3}})",
                           R"({"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": "auto"}})"}) {
    const std::string file = write_config("prefetch.json", text);
    const DeepSpeedSettings p = read_deepspeed_config(file);
    EXPECT_TRUE(p.zero.prefetch_bucket_size_auto || p.zero.prefetch_bucket_size == 50000000u) << text;
    TrainingOptions o;
    EXPECT_NO_THROW(apply_deepspeed(p, file, "none", "fp32", false, false, o)) << text;
    EXPECT_EQ(o.shard, Sharding::Zero3);
  }
  // offload_param cpu is modelled at stage 3, with or without offload_optimizer (training_deepspeed3_offload.cc).
  {
    const std::string file = write_config("offload_param3.json", R"({"zero_optimization": {)" + z3 + R"(, "offload_param": {"device": "cpu", "pin_memory": true}}})");
    TrainingOptions o;
    EXPECT_NO_THROW(apply_deepspeed(read_deepspeed_config(file), file, "none", "fp32", false, false, o));
    EXPECT_EQ(o.deepspeed.offload_param, DeepSpeedOffload::Cpu);
    EXPECT_EQ(o.deepspeed.offload_optimizer, DeepSpeedOffload::None);
  }
  // nvme is read (cost_models/training_deepspeed3_nvme.cc) with its keys and the aio section; without nvme_path
  // DeepSpeed stops (Init._validate_remote_device), and so does memplan.
  const std::string nvme = ds_refusal(R"({"zero_optimization": {)" + z3 + R"(, "offload_param": {"device": "nvme"}}})");
  EXPECT_TRUE(has(nvme, "offload_param.nvme_path is missing") && has(nvme, "_validate_remote_device")) << nvme;
  {
    const std::string file = write_config(
        "nvme3.json", R"({"aio": {"block_size": 2097152, "intra_op_parallelism": 2, "queue_depth": 16, "use_gds": false},
        "zero_optimization": {)" + z3 + R"(, "offload_param": {"device": "nvme", "nvme_path": "/local_nvme",
        "buffer_count": 6, "buffer_size": 2e8, "max_in_cpu": 5e8, "pin_memory": true},
        "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "buffer_count": 5, "fast_init": false}}})");
    TrainingOptions o;
    EXPECT_NO_THROW(apply_deepspeed(read_deepspeed_config(file), file, "none", "fp32", false, false, o));
    EXPECT_EQ(o.deepspeed.offload_param, DeepSpeedOffload::Nvme);
    EXPECT_EQ(o.deepspeed.offload_optimizer, DeepSpeedOffload::Nvme);
    EXPECT_EQ(o.deepspeed.param_swap.buffer_count, 6u);
    EXPECT_EQ(o.deepspeed.param_swap.buffer_size, 200000000u);
    EXPECT_EQ(o.deepspeed.param_swap.max_in_cpu, 500000000u);
    EXPECT_EQ(o.deepspeed.optimizer_swap.buffer_count, 5u);
    EXPECT_EQ(o.deepspeed.aio.block_size, 2097152u);
    EXPECT_EQ(o.deepspeed.aio.intra_op_parallelism, 2u);
  }
  // DeepSpeed's defaults (offload_config.py): 5 buffers of 1e8 elements, max_in_cpu 1e9; 4 optimizer buffers.
  {
    const std::string file = write_config("nvme_defaults.json", R"({"zero_optimization": {)" + z3 +
        R"(, "offload_param": {"device": "nvme", "nvme_path": "/n"}, "offload_optimizer": {"device": "nvme", "nvme_path": "/n"}}})");
    const DeepSpeedSettings d = read_deepspeed_config(file);
    EXPECT_EQ(d.zero.param_swap.buffer_count, 5u);
    EXPECT_EQ(d.zero.param_swap.buffer_size, 100000000u);
    EXPECT_EQ(d.zero.param_swap.max_in_cpu, 1000000000u);
    EXPECT_EQ(d.zero.optimizer_swap.buffer_count, 4u);
    EXPECT_EQ(d.zero.aio.block_size, 1048576u);
  }
  const std::string gds = ds_refusal(R"({"aio": {"use_gds": true}, "zero_optimization": {)" + z3 +
                                  R"(, "offload_param": {"device": "nvme", "nvme_path": "/n"}}})");
  EXPECT_TRUE(has(gds, "aio.use_gds true")) << gds;
  const std::string pipeline = ds_refusal(R"({"zero_optimization": {)" + z3 +
                                       R"(, "offload_optimizer": {"device": "nvme", "nvme_path": "/n", "pipeline_read": true}}})");
  EXPECT_TRUE(has(pipeline, "pipeline_read/pipeline_write true")) << pipeline;
  const std::string no_buffer = ds_refusal(R"({"zero_optimization": {)" + z3 +
                                        R"(, "offload_param": {"device": "nvme", "nvme_path": "/n", "buffer_count": 0}}})");
  EXPECT_TRUE(has(no_buffer, "offload_param.buffer_count 0")) << no_buffer;
  const std::string aio_key = ds_refusal(R"({"aio": {"thread_count": 2}, "zero_optimization": {)" + z3 + "}}");
  EXPECT_TRUE(has(aio_key, "aio.thread_count")) << aio_key;
  // offload_optimizer cpu is modelled at stage 3 (training_deepspeed3_offload.cc).
  {
    const std::string file = write_config("offload3.json", R"({"zero_optimization": {)" + z3 + R"(, "offload_optimizer": {"device": "cpu"}}})");
    TrainingOptions o;
    EXPECT_NO_THROW(apply_deepspeed(read_deepspeed_config(file), file, "none", "fp32", false, false, o));
    EXPECT_EQ(o.deepspeed.offload_optimizer, DeepSpeedOffload::Cpu);
  }
  const std::string nvme3 = ds_refusal(R"({"zero_optimization": {)" + z3 + R"(, "offload_optimizer": {"device": "nvme"}}})");
  EXPECT_TRUE(has(nvme3, "offload_optimizer.nvme_path is missing")) << nvme3;
  const std::string scatter = ds_refusal(R"({"zero_optimization": {)" + z3 + R"(, "reduce_scatter": false}})");
  EXPECT_TRUE(has(scatter, "zero_optimization.reduce_scatter")) << scatter;
  // fp16 is modelled at stage 3 (the step's overflow check, training_deepspeed3_optimizer.cc). check_grad_overflow, the
  // engine's choice for stages 1 and 2 (engine.py _configure_zero_optimizer): fp16 always, bf16 unless its section
  // says false (DeepSpeedBF16Config's default true, #8035), float32 never.
  const auto check_grad_overflow = [&](const std::string& text, const char* precision, Precision p) {
    const std::string file = write_config("precision.json", text);
    TrainingOptions o;
    o.precision = p;
    apply_deepspeed(read_deepspeed_config(file), file, "none", precision, false, false, o);
    return o.deepspeed.check_grad_overflow;
  };
  EXPECT_TRUE(check_grad_overflow(R"({"fp16": {"enabled": true}, "zero_optimization": {)" + z3 + "}}", "fp16",
                                  Precision::Fp16));
  EXPECT_TRUE(check_grad_overflow(R"({"bf16": {"enabled": true}, "zero_optimization": {"stage": 2}})", "bf16",
                                  Precision::Bf16));
  EXPECT_FALSE(check_grad_overflow(R"({"bf16": {"enabled": true, "check_grad_overflow": false}, "zero_optimization": )"
                                   R"({"stage": 2}})", "bf16", Precision::Bf16));
  EXPECT_FALSE(check_grad_overflow(R"({"zero_optimization": {"stage": 2}})", "fp32", Precision::Fp32));
  // --checkpoint layers is modelled at stage 3 (training_deepspeed3_recompute.cc); the op-range modes and torchtitan's
  // non-reentrant selective ones are refused, naming the mode.
  const std::string checkpointed = write_config("checkpointed.json", R"({"zero_optimization": {)" + z3 + "}}");
  TrainingOptions layers;
  layers.checkpoint.mode = CheckpointMode::Layers;
  EXPECT_NO_THROW(apply_deepspeed(read_deepspeed_config(checkpointed), checkpointed, "none", "bf16", false, false, layers));
  const std::pair<CheckpointMode, const char*> refused[] = {{CheckpointMode::Sqrt, "--checkpoint sqrt"},
                                                            {CheckpointMode::Every, "every:K"},
                                                            {CheckpointMode::At, "at:"},
                                                            {CheckpointMode::Auto, "auto"},
                                                            {CheckpointMode::SelectiveOp, "--checkpoint selective"},
                                                            {CheckpointMode::SelectiveLayers, "--checkpoint selective"}};
  for (const auto& [mode, named] : refused) {
    try {
      TrainingOptions c;
      c.checkpoint.mode = mode;
      apply_deepspeed(read_deepspeed_config(checkpointed), checkpointed, "none", "bf16", false, false, c);
      ADD_FAILURE() << "stage 3 with --checkpoint " << named << " was accepted";
    } catch (const InputError& e) {
      EXPECT_TRUE(has(e.what(), named) && has(e.what(), "--checkpoint layers")) << e.what();
    }
  }
  // transformers' use_reentrant=False (--checkpoint-impl non-reentrant): the recomputation's order and aliases differ
  // under DeepSpeed's hooks (docs/cost-models.md, DeepSpeed ZeRO-3, Checkpointing): refused.
  TrainingOptions non_reentrant = layers;
  non_reentrant.checkpoint.reentrant = false;
  try {
    apply_deepspeed(read_deepspeed_config(checkpointed), checkpointed, "none", "bf16", false, false, non_reentrant);
    ADD_FAILURE() << "stage 3 with a non-reentrant checkpoint was accepted";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "stage 3 with --checkpoint-impl non-reentrant is not modelled")) << e.what();
  }
}

// The tiny Llama's training step at batch 2, seq 16, on 2 GPUs: the end-to-end tests' model.
EstimateArgs tiny_llama_on_two_gpus() {
  EstimateArgs a;
  a.model.path = std::string(MEMPLAN_ZOO_DIR) + "/llama_tiny_train.onnx";
  a.model.batch = 2;
  a.model.dims = {"seq=16"};
  a.top = 0;
  a.mode = "train";
  a.gpus = 2;
  return a;
}

// End to end on the tiny Llama: "auto" becomes hidden_size^2 = 128^2 = 16384 (tests/models/llama.py: llama_tiny's
// hidden_size 128) from its embedding table, named in the note.
TEST(DeepSpeedConfig, AutoRunsOnTheTinyLlama) {
  EstimateArgs a = tiny_llama_on_two_gpus();
  a.deepspeed = write_config("auto.json", R"({"bf16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": "auto",
      "zero_optimization": {"stage": 2, "overlap_comm": true, "reduce_bucket_size": "auto"}})");
  const ConfiguredEstimate c = estimate_model(a);
  bool noted = false;
  for (const std::string& n : c.estimate.notes) noted |= has(n, "DeepSpeed ZeRO-2") && has(n, "2 gradient bucket(s) of reduce_bucket_size 16384 elements");
  EXPECT_TRUE(noted);
  EXPECT_GT(c.estimate.total_bytes, 0u);
}

// Stage 3 end to end on the tiny Llama (hidden_size 128, 4 layers, untied head): "auto" persistence is
// 10 x 128 = 1280 elements, so the 9 RMSNorm weights (128 each) persist and nothing else does; the fetch units are
// the 39 modules owning parameters (embed_tokens, 4 x (2 norms + q/k/v/o + gate/up/down), norm, lm_head).
TEST(DeepSpeedConfig, Stage3RunsOnTheTinyLlama) {
  EstimateArgs a = tiny_llama_on_two_gpus();
  a.deepspeed = write_config("auto3.json", R"({"bf16": {"enabled": "auto"},
      "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 0, "reduce_bucket_size": "auto",
                            "stage3_param_persistence_threshold": "auto"}})");
  const ConfiguredEstimate c = estimate_model(a);
  bool noted = false;
  for (const std::string& n : c.estimate.notes)
    noted |= has(n, "DeepSpeed ZeRO-3") && has(n, "9 parameters of at most stage3_param_persistence_threshold 1280") &&
             has(n, "(39 modules)") && has(n, "bucket of reduce_bucket_size 16384 elements");
  EXPECT_TRUE(noted);
  EXPECT_GT(c.estimate.total_bytes, 0u);
}

}  // namespace
}  // namespace memplan
