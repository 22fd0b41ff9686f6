"""`memplan serve` on NVIDIA ModelOpt FP8 checkpoints (onnx_import/hf_modelopt.h): hf_quant_config.json beside the
config, or config.json's quantization_config with quant_method "modelopt", numbers by hand from each engine's
create_weights.

The dense llama of test_serve_fp8_block.py (hidden 512, 4 heads of 128, 2 KV heads, intermediate 768, 2 layers,
vocab 512, bf16) on H100-80GB (compute capability 9.0), tp 1. Every engine fuses a layer's linear layers into four
modules: qkv_proj out 512 + 256 + 256 = 1,024 in 512 (524,288 fp8 B), o_proj 512 x 512 (262,144), gate_up_proj out
1,536 in 512 (786,432), down_proj out 512 in 768 (393,216): 1,966,080 fp8 B a layer, 3,932,160 for two, where the
bf16 model holds 7,864,320 B. The embedding, the LM head (lm_head is in exclude_modules, and no engine quantizes it)
and the norms are the same in both, so bf16 - ModelOpt is the linear modules' difference:
  vLLM (ModelOptFp8LinearMethod: weight_scale and input_scale [shards] float32, each kept as its max, one float):
    + 8 B a module, 8 modules: 3,932,224 B; 7,864,320 - 3,932,224 = 3,932,096 B less.
  SGLang (ModelOptFp8LinearMethod: the max weight scale made float32 [out_p, 1] by convert_to_channelwise, the
    input_scale's max one float): + 4 x out_p + 4 a module, out_p a layer 1,024 + 512 + 1,536 + 512 = 3,584:
    14,336 + 16 = 14,352 B a layer, 3,960,864 for two: 3,903,456 B less; with kv_cache_quant_algo FP8 each
    RadixAttention's k_scale and v_scale (ModelOptFp8KVCacheMethod, 8 B), 2 layers: 16 B more, 3,903,440 B less.
  TensorRT-LLM (FP8QDQLinearMethod: weight_scale, input_scale, inv_input_scale float32 scalars and kv_scales,
    inv_kv_scales float32 [3]: 36 B a module): 3,932,160 + 288 = 3,932,448: 3,931,872 B less.
exclude_modules ["lm_head", "model.layers.1.mlp.down_proj"]: that module stays bf16 (786,432 B) where it held
  vLLM 393,216 + 8 = 393,224 (3,538,888 less than bf16), SGLang 393,216 + 2,048 + 4 = 395,268 (3,903,440 -
  391,164 = 3,512,276 less, its k_scale / v_scale kept), TensorRT-LLM 393,216 + 36 = 393,252 (3,538,692 less).
The KV cache: bf16 2 x 2 layers x 2 heads x 128 x 2 B = 2,048 B a token under vLLM 0.11 whatever
kv_cache_quant_algo says (--kv-cache-dtype auto is the model's type there); TensorRT-LLM takes the file's
kv_cache_quant_algo FP8 as an fp8 cache: 1,024 B a token; SGLang is run with --kv-cache-dtype fp8 (1,024 B), its auto
on kv_cache_quant_algo FP8 being refused (its copies differ on it).
"""
import json
import os
import tempfile
import unittest

import jsonschema

from tiny_serve import SRC, run, write_config

COMMON = ["--graph", "decode", "--reserve", "0", "--context", "64"]
GPU_DTYPE = ["--gpu", "H100-80GB", "--dtype", "bf16"]
ENGINES = {
    "vllm": ["--engine", "vllm", "--max-batched-tokens", "64", "--max-num-seqs", "64"],
    # SGLang's --kv-cache-dtype auto on kv_cache_quant_algo FP8 is refused (which 0.5 copies follow it is not read).
    "sglang": ["--engine", "sglang", "--mem-fraction-static", "0.5", "--kv-cache-dtype", "fp8"],
    "trtllm": ["--engine", "trtllm", "--max-num-tokens", "64"],
}
FILE = {"producer": {"name": "modelopt", "version": "0.19.0"},
        "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]}}
# config.json's form (convert_hf_quant_config_format's output for FILE).
FLAT = {"quant_method": "modelopt", "quant_algo": "FP8", "ignore": ["lm_head"],
        "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"},
        "producer": {"name": "modelopt", "version": "0.29.0"},
        "config_groups": {"group_0": {"input_activations": {"dynamic": False, "num_bits": 8, "type": "float"},
                                      "weights": {"dynamic": False, "num_bits": 8, "type": "float"},
                                      "targets": ["Linear"]}}}


def dense_config(directory, quant_file=None, **overrides):
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 512,
              "intermediate_size": 768, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "vocab_size": 512, "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000,
              "tie_word_embeddings": False, "torch_dtype": "bfloat16", "hidden_act": "silu"}
    if quant_file is not None:
        with open(os.path.join(directory, "hf_quant_config.json"), "w") as f:
            json.dump(quant_file, f)
    return write_config(directory, config, **overrides)


def with_quantization(**changes):
    return {**FILE, "quantization": {**FILE["quantization"], **changes}}


def serve(engine, path, *extra, rc=0):
    p = run("serve", path, *ENGINES[engine], *COMMON, *GPU_DTYPE, "--json", *extra)
    assert p.returncode == rc, (engine, p.returncode, p.stderr)
    return json.loads(p.stdout)


class ModelOptByHand(unittest.TestCase):
    def answers(self, quant_file=None, **overrides):
        with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as e:
            path, bf16 = dense_config(d, quant_file, **overrides), dense_config(e)
            return {engine: (serve(engine, bf16), serve(engine, path)) for engine in ENGINES}

    def test_weights_and_kv_of_each_engine(self):
        less = {"vllm": 3_932_096, "sglang": 3_903_440, "trtllm": 3_931_872}
        kv = {"vllm": 2048, "sglang": 1024, "trtllm": 1024}
        for engine, (bf16, q) in self.answers(FILE).items():
            self.assertEqual(bf16["memory"]["weights_bytes"] - q["memory"]["weights_bytes"], less[engine], engine)
            self.assertEqual(q["kv_cache"]["bytes_per_token"],
                             kv[engine], engine)
        vllm = self.answers(FILE)["vllm"][1]
        self.assertEqual(vllm["memory"]["quantized_linear_bytes"], 3_932_224)
        trt = self.answers(FILE)["trtllm"][1]
        with open(os.path.join(SRC, "docs", "schemas", "serve.engine.schema.json")) as f:
            jsonschema.validate(trt, json.load(f))
        t = trt["trtllm"]["quantization"]
        self.assertEqual((t["layout"], t["quantized_modules"], t["scalar_bytes"], t["checkpoint_fp8_kv_cache"]),
                         ("FP8QDQLinearMethod", 8, 288, True))

    def test_no_kv_cache_quant_algo(self):
        # SGLang holds no k_scale / v_scale (3,903,456 B less); TensorRT-LLM's cache stays bf16.
        answers = self.answers(with_quantization(kv_cache_quant_algo=None))
        bf16, q = answers["sglang"]
        self.assertEqual(bf16["memory"]["weights_bytes"] - q["memory"]["weights_bytes"], 3_903_456)
        self.assertEqual(answers["trtllm"][1]["kv_cache"]["bytes_per_token"], 2048)

    def test_an_excluded_module_stays_in_the_model_type(self):
        less = {"vllm": 3_538_888, "sglang": 3_512_276, "trtllm": 3_538_692}
        q = with_quantization(exclude_modules=["lm_head", "model.layers.1.mlp.down_proj"])
        for engine, (bf16, a) in self.answers(q).items():
            self.assertEqual(bf16["memory"]["weights_bytes"] - a["memory"]["weights_bytes"], less[engine], engine)

    def test_config_json_form_is_the_same_for_vllm_and_sglang(self):
        with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as e:
            flat, both = dense_config(d, quantization_config=FLAT), dense_config(e, FILE, quantization_config=FLAT)
            for engine in ("vllm", "sglang"):
                self.assertEqual(serve(engine, flat)["memory"]["weights_bytes"],
                                 serve(engine, both)["memory"]["weights_bytes"], engine)

    def test_kv_cache_dtype_fp8_halves_vllm_and_sglang(self):
        with tempfile.TemporaryDirectory() as d:
            path = dense_config(d, FILE)
            self.assertEqual(serve("vllm", path, "--kv-cache-dtype", "fp8")["kv_cache"]["bytes_per_token"], 1024)
            self.assertEqual(serve("sglang", path)["kv_cache"]["bytes_per_token"], 1024)


class ModelOptRefusals(unittest.TestCase):
    def refused(self, engine, says, quant_file=None, *extra, gpu="H100-80GB", dtype="bf16", **overrides):
        with tempfile.TemporaryDirectory() as d:
            p = run("serve", dense_config(d, quant_file, **overrides), *ENGINES[engine], *COMMON, "--gpu", gpu,
                    "--dtype", dtype, *extra)
        self.assertEqual(p.returncode, 2, (engine, p.stderr))
        self.assertIn(says, p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)

    def test_other_algorithms(self):
        for algo in ("W4A16_NVFP4", "W4A8_AWQ", "INT4_AWQ", "FP8_PB_WO"):
            self.refused("vllm", f"key \"quant_algo\" is \"{algo}\": memplan sizes ModelOpt's FP8 (per-tensor) and NVFP4",
                         with_quantization(quant_algo=algo))

    def test_other_kv_cache_quant_algo(self):
        self.refused("sglang", "key \"kv_cache_quant_algo\" is \"NVFP4\"", with_quantization(kv_cache_quant_algo="NVFP4"))

    def test_unmapped_exclude_modules(self):
        for entry in ("model.layers.0.self_attn.q_proj", "model.layers.*.mlp.down_proj", "*gate_up*"):
            self.refused("trtllm", f"key \"exclude_modules\" entry \"{entry}\"", with_quantization(exclude_modules=[entry]))
        self.refused("vllm", "excludes model.layers.2.mlp.down_proj, a layer the model (num_hidden_layers 2)",
                     with_quantization(exclude_modules=["model.layers.2.mlp.down_proj"]))

    def test_contradictory_config_json(self):
        self.refused("vllm", "contradictory quantization settings", FILE,
                     quantization_config={"quant_method": "fp8", "activation_scheme": "static"})
        self.refused("sglang", "quantization key \"kv_cache_quant_algo\" contradicts", FILE,
                     quantization_config={**FLAT, "kv_cache_scheme": None})

    def test_mixture_of_experts(self):
        self.refused("vllm", "(ModelOpt FP8) on model_type \"mixtral\"", FILE, model_type="mixtral",
                     num_local_experts=4, num_experts_per_tok=2, router_aux_loss_coef=0.01, output_router_logits=False,
                     sliding_window=None)

    def test_trtllm_reads_the_file_only(self):
        self.refused("trtllm", "TensorRT-LLM 1.0 reads ModelOpt's settings from that file only",
                     quantization_config=FLAT)

    def test_sglang_auto_kv_cache_on_fp8_kv_checkpoint(self):
        with tempfile.TemporaryDirectory() as d:
            p = run("serve", dense_config(d, FILE), "--engine", "sglang", *COMMON, *GPU_DTYPE)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("with --kv-cache-dtype auto: ", p.stderr)
        self.assertIn("states kv_cache_quant_algo FP8, which SGLang's auto follows", p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)

    def test_quantization_flag_gpu_and_version(self):
        self.refused("vllm", "a ModelOpt FP8 checkpoint, which the engines serve as their modelopt method", FILE,
                     "--quantization", "fp8")
        self.refused("sglang", "ModelOptFp8Config needs compute capability 8.9", FILE, gpu="A100-80GB")
        self.refused("trtllm", "FP8QDQLinearMethod's fp8 GEMMs need compute capability 8.9", FILE, gpu="A100-80GB")
        self.refused("vllm", "--engine-version 0.14 with --kv-cache-dtype auto", FILE, "--engine-version", "0.14")
        # 0.13.0 carries PR #29980's change reverted (#30653): auto is the model's type there, 2 layers x 2 (K, V) x
        # 2 KV heads x head_dim 128 x 2 B = 2,048 B a token, and --kv-cache-dtype fp8 half of it.
        with tempfile.TemporaryDirectory() as d:
            model = dense_config(d, FILE)
            kv = {}
            for cache in ("auto", "fp8"):
                p = run("serve", model, *ENGINES["vllm"], *COMMON, *GPU_DTYPE, "--engine-version", "0.13",
                        "--kv-cache-dtype", cache, "--json")
                self.assertEqual(p.returncode, 0, p.stderr)
                kv[cache] = json.loads(p.stdout)["kv_cache"]["bytes_per_token"]
        self.assertEqual(kv, {"auto": 2048, "fp8": 1024})

    def test_estimate_refuses_it(self):
        with tempfile.TemporaryDirectory() as d:
            p = run("estimate", dense_config(d, FILE), "--graph", "decode")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("is modelled by serve --engine vllm, sglang and trtllm only", p.stderr)


if __name__ == "__main__":
    unittest.main()
