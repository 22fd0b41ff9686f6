"""`memplan serve --engine sglang` on quantized weights (cost_models/sglang_weights.h), numbers by hand.

SGLang sizes its pool from the free memory after loading (cost_models/sglang_engine.h), so what counts is what each
quantized module keeps allocated, read in sgl-project/sglang python/sglang/srt/layers/quantization/: fp8.py at
00563d3 (Fp8LinearMethod.create_weights / process_weights_after_loading, Fp8MoEMethod), awq.py at 0149944
(AWQLinearMethod), gptq.py at 006d096 (GPTQLinearMethod); qwen3_moe.py at 008af3a (the gate's quant_config None).

Tiny llama (hidden 256, intermediate 512, 1 layer, 2 heads and 2 KV heads of 128, vocab 256, 256 positions, untied):
  bf16 weights: embed 256 x 256 x 2 = 131,072; qkv (256 + 256 + 256) x 256 x 2 = 393,216; o 256 x 256 x 2 = 131,072;
  gate+up 2 x 512 x 256 x 2 = 524,288; down 256 x 512 x 2 = 262,144; three RMSNorms 3 x 256 x 2 = 1,536; lm_head
  131,072: 1,574,400 B, + the export's LlamaRotaryEmbedding inv_freq constant [1, 64] in bf16 = 128 B (kept as the
  graph holds it, serve_engines.h) + SGLang's float32 rotary cache [256, 128] x 4 = 131,072: 1,705,600 B. The
  linear layers are 1,310,720 B of it. vLLM's modules (one on each activation): qkv out 768 in 256, o 256/256, gate_up 1,024/256,
  down 256/512.
  fp8 per-tensor (no weight_block_size), compute capability 9.0 (--memory's default sm90: cutlass_fp8_supported):
    weight fp8 out x in, weight_scale made per channel by convert_to_channelwise, float32 [out, 1]:
      qkv 196,608 + 3,072; o 65,536 + 1,024; gate_up 262,144 + 4,096; down 131,072 + 1,024 = 664,576 B (dynamic);
      static: input_scale [shards] made its max, + 4 B a module: 664,592 B.
    vLLM's layout of the same modules: one float32 scale a module (requantize to the max): 655,360 + 4 x 4 = 655,376
      (dynamic), 655,392 (static).
    Fp8Config.get_quant_method gives the layer's RadixAttention an Fp8KVCacheMethod (layers/quantization/kv_cache.py
      at 078e5e2): k_scale and v_scale, float32 scalars, 8 B (any fp8 config).
    SGLang's weights: 1,705,600 - 1,310,720 + 664,592 + 8 = 1,059,480 (static); 1,059,464 (dynamic, and
      --quantization fp8 on the bf16 config: per_token_group_quant_fp8 over each row, a float32 [out, 1] scale, no
      input scale).
    Pool, --memory 16MiB --reserve 0 --mem-fraction-static 0.5, cell 1 layer x 2 KV heads x (128 + 128) x 2 B =
      1,024 B: rest = (16,777,216 - 1,059,480 - 16,777,216 x 0.5) B = 7,329,128 B (every term a multiple of 2^-30
      GiB: exact in doubles); 7,329,128 // 1,024 = 7,157 tokens (static).
  fp8 block-wise [128, 128]: weight fp8 + weight_scale_inv float32 [ceil(out / 128), ceil(in / 128)]: qkv 196,608 +
    6 x 2 x 4 = 196,656; o 65,536 + 16; gate_up 262,144 + 8 x 2 x 4 = 262,208; down 131,072 + 2 x 4 x 4 = 131,104:
    655,520 B, vLLM's layout byte for byte; weights 1,705,600 - 1,310,720 + 655,520 + 8 = 1,050,408.
  awq (--quantization awq; bits 4, group 128; served fp16, AWQConfig's only type; same sizes as bf16):
    qweight int32 [in, out / 8], qzeros int32 [in / 128, out / 8], scales fp16 [in / 128, out]:
      qkv 256 x 96 x 4 = 98,304 + 2 x 96 x 4 = 768 + 2 x 768 x 2 = 3,072 -> 102,144;
      o 32,768 + 256 + 1,024 = 34,048; gate_up 131,072 + 1,024 + 4,096 = 136,192;
      down 512 x 32 x 4 = 65,536 + 4 x 32 x 4 = 512 + 4 x 256 x 2 = 2,048 -> 68,096: 340,480 B, vLLM's too;
    weights 1,705,600 - 1,310,720 + 340,480 = 735,360.
  gptq at tp 2 (--quantization gptq; bits 4, group 128; one head and one KV head a rank): qkv in 256 out 384, o
    row-parallel in 128 (of 256) out 256, gate_up in 256 out 512, down row-parallel in 256 (of 512) out 256.
    SGLang: qweight int32 [in x 4 / 32, out], g_idx int32 [in] always, qzeros int32 [S, out / 8], scales fp16
    [S, out], S = in_p / 128 on a row-parallel layer, else input / 128:
      qkv 49,152 + 1,024 + 2 x 48 x 4 = 384 + 2 x 384 x 2 = 1,536 -> 52,096; o 16,384 + 512 + 128 + 512 = 17,536;
      gate_up 65,536 + 1,024 + 512 + 2,048 = 69,120; down 32,768 + 1,024 + 256 + 1,024 = 35,072: 173,824 B,
      with desc_act or without.
    vLLM (desc_act false): g_idx replaced by an empty tensor: 173,824 - 4 x (256 + 128 + 256 + 256) = 170,240;
      (desc_act true): g_idx kept, but a row-parallel layer keeps the whole input's rows: o + 128 + 512, down + 256 +
      1,024: 173,824 + 1,920 = 175,744.
Tiny qwen3_moe (tests/cli/test_serve_fp8_moe.py's: hidden 256, 2 + 2 heads of 128, q/k norms, one sparse layer of 4
  experts of 128, top-2, vocab 256), per-tensor fp8 dynamic:
    bf16 weights: embed 131,072; qkv 393,216; o 131,072; router 256 x 4 x 2 = 2,048; experts 4 x 3 x 128 x 256 x 2 =
      786,432; norms (256 + 256 + 128 + 128 + 256) x 2 = 2,048; lm_head 131,072: 1,576,960, + inv_freq 128 + rotary
      131,072 = 1,708,160.
    SGLang: the router stays bf16 (2,048; vLLM quantizes it: 1,024 + 4); qkv 196,608 + 3,072 = 199,680; o 65,536 +
      1,024 = 66,560: 268,288 B of linear modules (2 quantized, 1 router), vLLM's 1,028 + 196,612 + 65,540 = 263,180;
      experts Fp8MoEMethod's, vLLM's layout: 393,216 fp8 + [4] + [4] float32 = 393,248.
    k_scale and v_scale 8 B.
    weights 1,708,160 - (2,048 + 393,216 + 131,072 + 786,432) + 268,288 + 393,248 + 8 = 1,056,936.
DeepSeek-V3's block fp8: test_serve_sglang_deepseek_fp8.py.
"""
import json
import os
import tempfile
import unittest

import jsonschema

from tiny_serve import SRC, TinyConfigCase, run, write_config

SGLANG = ["--engine", "sglang", "--graph", "decode", "--memory", "16MiB", "--reserve", "0", "--context", "64",
          "--mem-fraction-static", "0.5", "--json"]
STATIC = {"quant_method": "fp8", "activation_scheme": "static"}
DYNAMIC = {"quant_method": "fp8", "activation_scheme": "dynamic"}
BLOCK = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}


def gptq(desc_act):
    return {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": desc_act, "sym": True}


def llama_config(directory, **overrides):
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 256,
              "intermediate_size": 512, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
              "vocab_size": 256, "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
              "tie_word_embeddings": False, "torch_dtype": "bfloat16", "hidden_act": "silu"}
    return write_config(directory, config, **overrides)


def qwen3_moe_config(directory, **overrides):
    config = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 256,
              "intermediate_size": 256, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
              "head_dim": 128, "vocab_size": 256, "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
              "rope_theta": 1000000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "hidden_act": "silu",
              "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 128, "norm_topk_prob": True,
              "decoder_sparse_step": 1, "mlp_only_layers": [], "output_router_logits": False,
              "router_aux_loss_coef": 0.001, "attention_bias": False}
    return write_config(directory, config, **overrides)


def mixtral_config(directory, **overrides):
    config = {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "hidden_size": 256,
              "intermediate_size": 256, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
              "vocab_size": 256, "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 1000000.0,
              "tie_word_embeddings": False, "torch_dtype": "bfloat16", "hidden_act": "silu", "num_local_experts": 4,
              "num_experts_per_tok": 2, "sliding_window": None}
    return write_config(directory, config, **overrides)


class SglangQuantCase(TinyConfigCase):
    def serve(self, quantization, *extra, rc=0):
        with tempfile.TemporaryDirectory() as d:
            config = type(self).make_config(d, quantization_config=quantization) if quantization else self.config
            p = run("serve", config, *SGLANG, *extra)
        self.assertEqual(p.returncode, rc, p.stderr)
        j = json.loads(p.stdout)
        with open(os.path.join(SRC, "docs", "schemas", "serve.engine.schema.json")) as f:
            jsonschema.validate(j, json.load(f))
        return j

    def refused(self, words, quantization, *extra, make_config=None):
        with tempfile.TemporaryDirectory() as d:
            config = (make_config or type(self).make_config)(d, quantization_config=quantization)
            p = run("serve", config, *SGLANG, *extra)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(words, p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)


class DenseByHand(SglangQuantCase):
    make_config = staticmethod(llama_config)

    def test_unquantized_weights_are_the_hand_count(self):
        j = self.serve(None)
        self.assertEqual(j["memory"]["weights_bytes"], 1705600)
        self.assertIsNone(j["sglang"]["quantization"])

    def test_fp8_per_tensor_scales_are_per_channel(self):
        for quantization, linear, vllm, weights in ((STATIC, 664592, 655392, 1059480),
                                                    (DYNAMIC, 664576, 655376, 1059464)):
            j = self.serve(quantization)
            q = j["sglang"]["quantization"]
            scheme = quantization["activation_scheme"]
            self.assertEqual((q["method"], q["quantized_modules"], q["routers_unquantized"]), ("fp8", 4, 0), scheme)
            self.assertEqual((q["linear_bytes"], q["vllm_linear_bytes"], q["expert_bytes"]), (linear, vllm, 0), scheme)
            self.assertEqual(q["kv_scale_bytes"], 8, scheme)
            self.assertEqual(j["memory"]["weights_bytes"], weights, scheme)
        # The static checkpoint's pool: rest 7,329,128 B over 1,024 B a token.
        j = self.serve(STATIC)
        self.assertEqual(j["kv_cache"]["bytes_per_token"], 1024)
        self.assertEqual(j["sglang"]["profiled_tokens"], 7157)
        self.assertEqual(j["kv_cache_tokens"], 7157)
        # --quantization fp8 on the bf16 config: quantized at load per channel, no input scale: the dynamic bytes.
        j = self.serve(None, "--quantization", "fp8")
        self.assertEqual(j["sglang"]["quantization"]["linear_bytes"], 664576)
        self.assertEqual(j["sglang"]["quantization"]["source"], "--quantization")
        self.assertEqual(j["memory"]["weights_bytes"], 1059464)

    def test_fp8_block_is_vllms_layout(self):
        j = self.serve(BLOCK)
        q = j["sglang"]["quantization"]
        self.assertEqual((q["linear_bytes"], q["vllm_linear_bytes"]), (655520, 655520))
        self.assertEqual(j["memory"]["weights_bytes"], 1050408)

    def test_awq_is_vllms_layout(self):
        j = self.serve(AWQ, "--quantization", "awq", "--dtype", "fp16")
        q = j["sglang"]["quantization"]
        self.assertEqual((q["method"], q["quantized_modules"], q["kv_scale_bytes"]), ("awq", 4, 0))
        self.assertEqual((q["linear_bytes"], q["vllm_linear_bytes"]), (340480, 340480))
        self.assertEqual(j["memory"]["weights_bytes"], 735360)

    def test_gptq_keeps_g_idx_and_splits_row_parallel_groups(self):
        for desc_act, vllm in ((False, 170240), (True, 175744)):
            j = self.serve(gptq(desc_act), "--quantization", "gptq", "--dtype", "fp16", "--tp", "2")
            q = j["sglang"]["quantization"]
            self.assertEqual((q["linear_bytes"], q["vllm_linear_bytes"]), (173824, vllm), desc_act)

    def test_text_output(self):
        with tempfile.TemporaryDirectory() as d:
            args = [a for a in SGLANG if a != "--json"]
            p = run("serve", llama_config(d, quantization_config=STATIC), *args)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("fp8 from the config's quantization_config: the linear modules hold 649 KiB as SGLang loads them "
                      "(4 quantized", p.stdout)
        self.assertIn("one float32 scale an output row (per channel)", p.stdout)

    def test_refusals(self):
        # A config's awq without the flag: SGLang serves it as awq_marlin (override_quantization_method).
        self.refused("awq_marlin", AWQ, "--dtype", "fp16")
        self.refused("gptq_marlin", gptq(False), "--dtype", "fp16")
        # Below 8.0 Marlin does not run (check_marlin_supported): the checkpoint's awq is AWQLinearMethod's, sized.
        with tempfile.TemporaryDirectory() as d:
            p = run("serve", llama_config(d, quantization_config=AWQ), *SGLANG, "--dtype", "fp16", "--arch", "sm75")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout)["sglang"]["quantization"]["linear_bytes"], 340480)
        # Below 8.9: FP8 Marlin; ROCm; a per-tensor checkpoint on 12.x (the scales changed within the 0.5 series).
        self.refused("FP8 Marlin", STATIC, "--arch", "sm80")
        self.refused("not sized", BLOCK, "--arch", "sm100")
        self.refused("use_sm120_fp8_pertensor", STATIC, "--arch", "sm120")
        with tempfile.TemporaryDirectory() as d:
            budget = SGLANG.index("--memory")
            p = run("serve", llama_config(d, quantization_config=STATIC), *SGLANG[:budget], *SGLANG[budget + 2:],
                    "--gpu", "MI300X")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("ROCm", p.stderr)
        # TensorRT-LLM 1.0 does not load a config.json's per-tensor fp8 (NotImplementedError; test_serve_trtllm_quant).
        with tempfile.TemporaryDirectory() as d:
            p = run("serve", llama_config(d, quantization_config=STATIC), "--engine", "trtllm", "--graph", "decode",
                    "--memory", "16MiB", "--reserve", "0", "--context", "64")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("raises NotImplementedError", p.stderr)


class Qwen3MoeByHand(SglangQuantCase):
    make_config = staticmethod(qwen3_moe_config)

    def test_router_stays_bf16_experts_are_vllms(self):
        j = self.serve(DYNAMIC)
        q = j["sglang"]["quantization"]
        self.assertEqual((q["quantized_modules"], q["routers_unquantized"], q["router_bytes"]), (2, 1, 2048))
        self.assertEqual((q["linear_bytes"], q["vllm_linear_bytes"], q["expert_bytes"]), (268288, 263180, 393248))
        self.assertEqual(j["memory"]["weights_bytes"], 1056936)

    def test_another_models_router_is_refused(self):
        self.refused("router is not read", DYNAMIC, make_config=mixtral_config)


if __name__ == "__main__":
    unittest.main()
