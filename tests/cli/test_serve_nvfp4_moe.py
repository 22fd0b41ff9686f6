"""`memplan serve --engine vllm` on ModelOpt NVFP4 mixtures of experts (hf_quant_config.json quant_algo "NVFP4"):
the experts as vLLM's ModelOptNvFp4FusedMoE holds them on Marlin and its fused_marlin_moe's buffers (MarlinExperts' from 0.14)
(cost_models/vllm_nvfp4.h, vllm_fused_moe.h), numbers by hand; each case compares the checkpoint with the same config
without its hf_quant_config.json, so every other weights term cancels.

Tiny qwen3_moe of test_serve_fp8_moe.py (hidden 256, 2 heads and 2 KV heads of 128, one sparse layer of 4 experts
of 128, top-2, vocab 256), bf16, --max-batched-tokens 64 (T = 64 tokens a profile call).
H100 (9.0, 132 SMs), tp 1:
  dense modules on Marlin (cost_models/vllm_nvfp4.h): qkv_proj N 768, K 256: 256 x 768 / 2 + 16 x 768 + 132 x 4 + 16 =
    111,136; o_proj 256 x 256: 32,768 + 4,096 + 528 + 16 = 37,408.
  experts: E (2 I H + H I) = 4 x 256 x 384 = 393,216 values: 196,608 B of weights, 24,576 of fp8 scales, global scales
    [4] twice in bf16 16, input scales float32 [4, 2] and [4] 48, workspace 132 x 4 int32 2,112: 223,360.
  The router (mlp.gate) in exclude_modules stays bf16: 371,904 B quantized for the bf16 graph's 393,216 + 131,072 +
    786,432 = 1,310,720: 938,816 less. Not listed, qwen3_moe's gate takes the quant_config (qwen3_moe.py at 2e0831b):
    one more module N 4 (64 on Marlin), K 256: 8,192 + 1,024 + 528 + 16 = 9,760 for 2,048: 931,104 less.
  fused_marlin_moe at T 64, k 2, E 4: block_size_m 48 (128 / 4 / 32 = 1 >= 0.9, / 48 = 0.67); sorted ids 128 +
    4 x 47 = 316, expert ids 7, 1: 1,296 B; fused_topk 64 x 2 x 12 = 1,536; cache13 128 x max(256, 256) x 2 = 65,536;
    cache2 128 x 128 x 2 = 32,768; output 64 x 256 x 2 = 32,768; atomic add on 9.0, no c_tmp: 133,904. The bf16
    fused_experts' 134,156 (block 64: 380 + 6 + 1 ids, 1,548 B): the MoE peak 252 B lower at the same router step.
A100 (8.0, 108 SMs): workspaces 108 x 4 x 4 = 1,728 (experts 222,976) and 432 a dense module; no atomic add below
  9.0: c_tmp min(max(256, 256) x 316, 108 x 4 x 48 x 256) = 80,896 floats, 323,584 B: kernel 457,488.
From 0.14 (PR #31692) MarlinExperts in the modular kernel (cost_models/vllm_fused_moe.h), H100: the layer drops its
  input scales, 223,312; a call holds fused_topk 1,536, alignment 1,296 (block 48 as before), the output 32,768, a
  lock workspace of 132 x 4 int32 zeroed, 2,112, and c_tmp (no atomic add from 0.12) 323,584: 361,296; cache13 and
  cache2 are the WorkspaceManager's buffer, 128 x max(128, 256) x 2 + 128 x max(256, 256) x 2 = 131,072, held from
  the router on as the bf16 model's TritonExperts' (the same shapes), whose call is 1,536 + 1,548 + 32,768 = 35,852:
  the MoE peak 325,444 higher. From 0.20 the global scales are float32: 223,328. From 0.24 Marlin pads the width:
  experts 80 wide (refused unpadded: 2 x 80 is off 64) held 128 wide (H 256 a multiple of 128: round_up(80, 64)),
  the layer of 128 (223,328) for the graph's 4 x 3 x 256 x 80 x 2 = 491,520, the kernel the same 361,296.
tp 2 (I_p 64), H100: qkv N 384, K 256: 49,152 + 6,144 + 544 = 55,840; o_proj N 256, K 128: 16,384 + 2,048 + 544 =
  18,976; experts 4 x 256 x 192 = 196,608 values: 98,304 + 12,288 + 16 + 48 + 2,112 = 112,768: 187,584 quantized for
  196,608 + 65,536 + 393,216 = 655,360: 467,776 less. Kernel: cache13 128 x max(128, 256) x 2 = 65,536, cache2
  128 x 64 x 2 = 16,384: 117,520.
"""
import json
import os
import tempfile
import unittest

import jsonschema

from test_serve_fp8_moe import qwen3_moe_config
from tiny_serve import SRC, run

NVFP4 = {"producer": {"name": "modelopt", "version": "0.37.0"},
         "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16,
                          "exclude_modules": ["lm_head", "model.layers.0.mlp.gate"]}}
ARGS = ["--engine", "vllm", "--graph", "decode", "--reserve", "0", "--context", "64", "--max-batched-tokens", "64",
        "--max-num-seqs", "64", "--dtype", "bf16"]


def checkpoint(directory, quant=NVFP4, **overrides):
    path = qwen3_moe_config(directory, **overrides)
    if quant is not None:
        with open(os.path.join(directory, "hf_quant_config.json"), "w") as f:
            json.dump(quant, f)
    return path


def serve(path, *extra):
    p = run("serve", path, *ARGS, "--json", *extra)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


class Nvfp4ExpertsByHand(unittest.TestCase):
    def answers(self, *extra, quant=NVFP4):
        with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as e:
            return serve(checkpoint(e, None), *extra), serve(checkpoint(d, quant), *extra)

    def test_h100_by_hand(self):
        bf16, q = self.answers("--gpu", "H100-80GB")
        with open(os.path.join(SRC, "docs", "schemas", "serve.vllm.schema.json")) as f:
            jsonschema.validate(q, json.load(f))
        self.assertEqual(q["memory"]["quantized_linear_bytes"], 371_904)
        self.assertEqual(bf16["memory"]["weights_bytes"] - q["memory"]["weights_bytes"], 938_816)
        x = q["replaced"]["nvfp4"]["experts"]
        self.assertEqual((x["kernel"], x["sparse_layers"], x["unquantized_routers"]), ("marlin", 1, 1))
        self.assertEqual((x["weight_bytes"], x["scale_bytes"], x["global_scale_bytes"], x["input_scale_bytes"],
                          x["workspace_bytes"], x["layer_bytes"]), (196_608, 24_576, 16, 48, 2_112, 223_360))
        moe = q["replaced"]["fused_moe"]
        self.assertEqual(moe["kernel"], "vllm fused_marlin_moe (nvfp4)")
        self.assertEqual(moe["expert_weight_bytes"], 223_360)
        self.assertEqual((moe["block_size_m"], moe["topk_bytes"], moe["align_bytes"]), (48, 1_536, 1_296))
        self.assertEqual((moe["cache13_bytes"], moe["cache2_bytes"], moe["output_bytes"]), (65_536, 32_768, 32_768))
        self.assertEqual((moe["reduce_bytes"], moe["kernel_bytes"]), (0, 133_904))
        self.assertEqual(bf16["replaced"]["fused_moe"]["kernel_bytes"], 134_156)
        self.assertEqual(moe["peak_allocated_bytes"], bf16["replaced"]["fused_moe"]["peak_allocated_bytes"] - 252)

    def test_a_router_the_checkpoint_quantizes(self):
        quant = {**NVFP4, "quantization": {**NVFP4["quantization"], "exclude_modules": ["lm_head"]}}
        bf16, q = self.answers("--gpu", "H100-80GB", quant=quant)
        self.assertEqual(q["memory"]["quantized_linear_bytes"], 381_664)
        self.assertEqual(bf16["memory"]["weights_bytes"] - q["memory"]["weights_bytes"], 931_104)
        self.assertEqual(q["replaced"]["nvfp4"]["experts"]["unquantized_routers"], 0)

    def test_every_router_by_wildcard(self):
        # "model.layers.*.mlp.gate", which vLLM's fnmatch matches to every router: the listed answer.
        quant = {**NVFP4, "quantization": {**NVFP4["quantization"],
                                           "exclude_modules": ["lm_head", "model.layers.*.mlp.gate"]}}
        _, q = self.answers("--gpu", "H100-80GB", quant=quant)
        self.assertEqual(q["memory"]["quantized_linear_bytes"], 371_904)
        self.assertEqual(q["replaced"]["nvfp4"]["experts"]["unquantized_routers"], 1)

    def test_a100_reduces_in_float32(self):
        _, q = self.answers("--gpu", "A100-80GB")
        self.assertEqual(q["replaced"]["nvfp4"]["experts"]["layer_bytes"], 222_976)
        moe = q["replaced"]["fused_moe"]
        self.assertEqual((moe["reduce_bytes"], moe["kernel_bytes"]), (323_584, 457_488))
        # From 0.12 (PR #24722: use_atomic_add=False always) the H100 reduces in float32 too; min(n x sorted ids,
        # SMs x 4 x block x 256) takes its first term at either SM count here, so the H100's is the A100's 323,584 B.
        _, q = self.answers("--gpu", "H100-80GB", "--engine-version", "0.13")
        moe = q["replaced"]["fused_moe"]
        self.assertEqual((moe["reduce_bytes"], moe["kernel_bytes"]), (323_584, 457_488))

    def test_tp2(self):
        bf16, q = self.answers("--gpu", "H100-80GB", "--tp", "2")
        self.assertEqual(q["memory"]["quantized_linear_bytes"], 187_584)
        self.assertEqual(bf16["memory"]["weights_bytes"] - q["memory"]["weights_bytes"], 467_776)
        self.assertEqual(q["replaced"]["fused_moe"]["kernel_bytes"], 117_520)

    def test_0_14_marlin_experts_in_the_modular_kernel(self):
        bf16, q = self.answers("--gpu", "H100-80GB", "--engine-version", "0.14")
        with open(os.path.join(SRC, "docs", "schemas", "serve.vllm.schema.json")) as f:
            jsonschema.validate(q, json.load(f))
        x = q["replaced"]["nvfp4"]["experts"]
        self.assertEqual((x["width"], x["input_scale_bytes"], x["layer_bytes"]), (128, 0, 223_312))
        self.assertEqual(bf16["memory"]["weights_bytes"] - q["memory"]["weights_bytes"], 938_864)
        moe = q["replaced"]["fused_moe"]
        self.assertEqual(moe["kernel"], "vllm modular MarlinExperts (nvfp4)")
        self.assertEqual((moe["block_size_m"], moe["topk_bytes"], moe["align_bytes"]), (48, 1_536, 1_296))
        self.assertEqual((moe["cache13_bytes"], moe["cache2_bytes"], moe["output_bytes"]), (0, 0, 32_768))
        self.assertEqual((moe["lock_bytes"], moe["reduce_bytes"], moe["kernel_bytes"]), (2_112, 323_584, 361_296))
        self.assertEqual(moe["workspace_bytes"], 131_072)
        self.assertEqual(bf16["replaced"]["fused_moe"]["kernel"], "vllm modular TritonExperts")
        self.assertEqual(bf16["replaced"]["fused_moe"]["workspace_bytes"], 131_072)
        self.assertEqual(bf16["replaced"]["fused_moe"]["kernel_bytes"], 35_852)
        self.assertEqual(moe["peak_allocated_bytes"], bf16["replaced"]["fused_moe"]["peak_allocated_bytes"] + 325_444)

    def test_0_20_float32_global_scales(self):
        _, q = self.answers("--gpu", "H100-80GB", "--engine-version", "0.20", "--enforce-eager")
        x = q["replaced"]["nvfp4"]["experts"]
        self.assertEqual((x["global_scale_bytes"], x["layer_bytes"]), (32, 223_328))

    def test_0_24_pads_the_width(self):
        with tempfile.TemporaryDirectory() as d:
            path = checkpoint(d, moe_intermediate_size=80)
            p = run("serve", path, *ARGS, "--gpu", "H100-80GB", "--engine-version", "0.23", "--enforce-eager")
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("gptq_marlin_repack needs size_n a multiple of 64", p.stderr)
            q = serve(path, "--gpu", "H100-80GB", "--engine-version", "0.24", "--enforce-eager")
            p = run("serve", path, *ARGS, "--gpu", "H100-80GB", "--engine-version", "0.24", "--enforce-eager")
        x = q["replaced"]["nvfp4"]["experts"]
        self.assertEqual((x["width"], x["layer_bytes"]), (128, 223_328))
        moe = q["replaced"]["fused_moe"]
        self.assertEqual((moe["expert_intermediate_size"], moe["kernel_bytes"]), (80, 361_296))
        self.assertEqual(moe["workspace_bytes"], 131_072)
        self.assertIn("repacked for Marlin with the width padded to 128", p.stdout)

    def test_text_output(self):
        with tempfile.TemporaryDirectory() as d:
            p = run("serve", checkpoint(d), *ARGS, "--gpu", "H100-80GB")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("of which the experts of 1 sparse layers, repacked for Marlin", p.stdout)
        self.assertIn("by vLLM's Marlin MoE (fused_marlin_moe: 4 experts, top-2", p.stdout)


class Nvfp4ExpertsRefusals(unittest.TestCase):
    def refused(self, says, *extra, quant=NVFP4, args=ARGS, **overrides):
        with tempfile.TemporaryDirectory() as d:
            p = run("serve", checkpoint(d, quant, **overrides), *args, *extra)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(says, p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)

    def test_gpus_vllm_runs_otherwise(self):
        self.refused("on compute capability 10.0: vLLM runs them there with its CUTLASS FP4 MoE", "--gpu", "B200")
        self.refused("ModelOpt NVFP4 on compute capability 7.5 with --engine-version 0.11: vLLM's "
                     "ModelOptNvFp4Config needs 8.0 (get_min_capability", "--gpu", "T4",
                     args=[*ARGS[:-1], "fp16"])

    def test_versions_whose_path_is_not_read(self):
        self.refused("memplan sizes vLLM's Marlin path for them from 0.11", "--gpu", "H100-80GB",
                     "--engine-version", "0.10")

    def test_expert_parallel_and_lora(self):
        self.refused("memplan sizes vLLM's expert parallelism for unquantized and fp8 experts", "--gpu", "H100-80GB",
                     "--tp", "2", "--enable-expert-parallel")
        self.refused("LoRA stacks memplan does not size", "--gpu", "H100-80GB", "--enable-lora")

    def test_widths_marlin_cannot_repack(self):
        self.refused("gptq_marlin_repack needs size_n a multiple of 64", "--gpu", "H100-80GB",
                     moe_intermediate_size=80)

    def test_fp8_experts_and_routers_without_experts(self):
        fp8 = {**NVFP4, "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None,
                                         "exclude_modules": ["lm_head"]}}
        self.refused("ModelOpt FP8 MoE path (ModelOptFp8MoEMethod) is not sized", "--gpu", "H100-80GB", quant=fp8)
        with tempfile.TemporaryDirectory() as d:
            from test_serve_modelopt import dense_config
            p = run("serve", dense_config(d, NVFP4), *ARGS, "--gpu", "H100-80GB")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("excludes 1 routers (mlp.gate), and", p.stderr)
        self.assertIn("has no experts", p.stderr)


if __name__ == "__main__":
    unittest.main()
