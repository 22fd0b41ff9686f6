"""`memplan serve --engine sglang` (and `all`, `trtllm`) on multi-head latent attention, numbers by hand.

SGLang (cost_models/sglang_mla.h over cost_models/sglang_engine.h):
  pool:    MLATokenToKVPool, one buffer [tokens, 1, kv_lora_rank + qk_rope_head_dim] a layer; get_cell_size_per_token's
           MLA branch (kv_lora_rank + qk_rope_head_dim) x layers x element size, whole on every tensor-parallel rank.
  backend: FA3 on compute capability 9.x, FlashInfer's MLA on 10.x (DeepseekV2ForCausalLM; DeepseekV3ForCausalLM is
           set to trtllm_mla and online fp8 there: refused), Triton elsewhere; none forces a page size: --page-size.
  weights: the graph's in the served type, with vLLM's float32 e_score_correction_bias (SGLang's MoEGate holds it in
           float32 too), SGLang's rotary cache in float32 in place of vLLM's in the served type, and post_load_weights'
           w_kc (heads x nope x rank, a copy) and w_vc (heads x v x rank, a copy unless one head a rank) every layer.

The tiny deepseek_v3 config of tests/cli/test_serve_mla.py (2 layers, 2 heads, kv_lora_rank 8, qk_nope_head_dim 4,
qk_rope_head_dim 2, v_head_dim 4, vocab 64, 256 positions, bf16, no rope_scaling):
  cell      2 x (8 + 2) x 2 B = 40 B a token, at tp 1 and tp 2 alike;
  rotary    vLLM's [256, 2] in bf16 = 1,024 B, SGLang's in float32 = 2,048 B;
  w_kc/w_vc 2 layers x 2 heads x (4 + 4) x 8 x 2 B = 512 B; tp 2 (one head a rank): 2 x 1 x 4 x 8 x 2 = 128 B
            (w_vc a view of kv_b_proj);
  weights   = the eager engine's (the graph's parameters, 6,964 elements by hand in test_serve_mla.py, and its
            constants) + 8 (the bias's float32 bytes) + 2,048 + 512;
  pool (--memory 1GiB --reserve 0 --mem-fraction-static 0.8, sm90):
            rest = (2^30 - weights) / 2^30 - 2^30 / 2^30 x (1 - 0.8) GiB; tokens = int(rest x 2^30) // 40, page 1.

DeepSeek-V2-Lite (tests/models/hf_configs/DeepSeek-V2-Lite.json, bf16) on the catalog's H100-80GB (85,045,477,376 B,
81,105 whole MiB), --reserve 1GiB: see SglangDeepSeekV2Lite's docstring.
"""
import json
import os
import unittest

import jsonschema

from tiny_serve import SRC, TinyConfigCase, deepseek_v3_config, run

SGLANG = ["--engine", "sglang", "--graph", "decode", "--memory", "1GiB", "--reserve", "0", "--context", "64",
          "--mem-fraction-static", "0.8", "--json"]
GIB = 1 << 30


def tiny_mla_config(directory, **overrides):
    return deepseek_v3_config(directory, hidden=16, heads=2, q_lora=8, kv_lora=8, nope=4, rope=2, v=4,
                              intermediate=32, moe_intermediate=8, vocab=64, **overrides)


def pool_tokens(free_before, weights, fraction, cell):
    """profile_max_num_token by hand: the two GiB floats, the rest, int(rest x 2^30) // cell."""
    total, available = free_before / GIB, (free_before - weights) / GIB
    rest = available - total * (1 - fraction)
    return int(rest * GIB) // cell


class SglangMlaByHand(TinyConfigCase):
    make_config = staticmethod(tiny_mla_config)

    def sglang(self, *extra, rc=0):
        p = run("serve", self.config, *SGLANG, *extra)
        self.assertEqual(p.returncode, rc, p.stderr)
        return json.loads(p.stdout)

    def eager_weights(self):
        e = run("serve", self.config, "--engine", "eager", "--graph", "decode", "--memory", "1GiB", "--context", "64",
                "--max-batched-tokens", "64", "--dtype", "bf16", "--json")
        self.assertEqual(e.returncode, 0, e.stderr)
        return json.loads(e.stdout)["weights_bytes"]

    def test_the_pool_holds_the_latent_and_every_weights_term(self):
        j = self.sglang()
        with open(os.path.join(SRC, "docs", "schemas", "serve.engine.schema.json")) as f:
            jsonschema.validate(j, json.load(f))
        g = j["sglang"]
        self.assertEqual(j["kv_cache"]["bytes_per_token"], 40)
        self.assertEqual((g["mla_attention_backend"], g["page_size"]), ("fa3", 1))
        self.assertEqual(g["rotary_cache_bytes"], 2048)
        self.assertEqual(g["mla_absorbed_bytes"], 512)
        weights = self.eager_weights() + 8 + 2048 + 512
        self.assertEqual(j["memory"]["weights_bytes"], weights)
        tokens = pool_tokens(GIB, weights, 0.8, 40)
        self.assertEqual(g["profiled_tokens"], tokens)
        self.assertEqual(j["kv_cache_tokens"], tokens)
        self.assertEqual(j["kv_cache_bytes"], tokens * 40)
        self.assertEqual(j["max_concurrent_sequences"], tokens // 64)
        text = run("serve", self.config, *SGLANG[:-1]).stdout
        self.assertIn("multi-head latent attention by SGLang's fa3 backend", text)
        self.assertIn(f"max_total_num_tokens={tokens}, chunked_prefill_size=2048", text)

    def test_tensor_parallel_replicates_the_pool(self):
        one, two = self.sglang(), self.sglang("--tp", "2")
        self.assertEqual(two["kv_cache"]["bytes_per_token"], 40)
        self.assertEqual(two["sglang"]["mla_absorbed_bytes"], 128)
        # A rank's graph weights: 7,720 B less 6,208 B than tp 1's 13,928 (test_serve_mla.py's count); the rotary
        # cache and the float32 bias are whole on each rank; w_kc/w_vc 512 -> 128.
        self.assertEqual(one["memory"]["weights_bytes"] - two["memory"]["weights_bytes"], 13928 - 7720 + 512 - 128)
        # The same free memory and fraction and a smaller rank's weights: more tokens a rank, each the whole latent.
        self.assertEqual(two["sglang"]["profiled_tokens"], pool_tokens(GIB, two["memory"]["weights_bytes"], 0.8, 40))

    def test_the_backend_and_the_page_size(self):
        a = self.sglang("--arch", "sm80")
        self.assertEqual((a["sglang"]["mla_attention_backend"], a["sglang"]["page_size"]), ("triton", 1))
        p = self.sglang("--page-size", "64")  # FA3 keeps the user's page size
        self.assertEqual(p["sglang"]["page_size"], 64)
        self.assertEqual(p["kv_cache_tokens"], p["sglang"]["profiled_tokens"] // 64 * 64)
        # DeepseekV3ForCausalLM on sm100: trtllm_mla and SGLang's own fp8 quantization, not modelled.
        b = run("serve", self.config, *SGLANG, "--arch", "sm100")
        self.assertEqual(b.returncode, 2, b.stderr)
        self.assertIn("quantizes the weights to fp8 itself", b.stderr)
        self.assertEqual(b.stderr.count("\n"), 1, b.stderr)

    def test_trtllm_and_rocm_are_refused_and_all_has_a_row_each(self):
        t = run("serve", self.config, "--engine", "trtllm", "--graph", "decode", "--memory", "1GiB", "--reserve", "0",
                "--context", "64")
        self.assertEqual(t.returncode, 2, t.stderr)
        self.assertIn("TensorRT-LLM's profiling run decompresses the latent", t.stderr)
        self.assertEqual(t.stderr.count("\n"), 1, t.stderr)
        m = run("serve", self.config, "--engine", "sglang", "--graph", "decode", "--gpu", "MI300X", "--context", "64")
        self.assertEqual(m.returncode, 2, m.stderr)
        self.assertIn("SGLang's MLA backends on ROCm", m.stderr)
        p = run("serve", self.config, "--engine", "all", "--graph", "decode", "--memory", "1GiB", "--reserve", "0",
                "--context", "64", "--mem-fraction-static", "0.8", "--json")
        self.assertIn(p.returncode, (0, 1), p.stderr)
        j = json.loads(p.stdout)
        with open(os.path.join(SRC, "docs", "schemas", "serve.engines.schema.json")) as f:
            jsonschema.validate(j, json.load(f))
        rows = {r["engine"]: r for r in j["engines"]}
        self.assertEqual(rows["sglang"]["kv_cache_tokens"], self.sglang()["kv_cache_tokens"])
        self.assertEqual(rows["vllm"]["block_tokens"], 64)  # vLLM's FlashMLA block on sm90
        self.assertIn("TensorRT-LLM's profiling run", rows["trtllm"]["not_modelled"])


class SglangDeepSeekV2Lite(unittest.TestCase):
    """DeepSeek-V2-Lite (27 layers, 16 heads, q_lora_rank null, kv_lora_rank 512, qk_nope_head_dim 128,
    qk_rope_head_dim 64, v_head_dim 128, vocab 102,400, yarn factor 40 on 4,096 positions) in bf16 on H100-80GB,
    --reserve 1GiB, SGLang's defaults:
      cell       27 x (512 + 64) x 2 B = 31,104 B a token, at tp 1 and tp 2 alike (the latent is not split);
      weights    15,706,484,224 parameters (tests/import/hf_config_counts_test.py's hand count) x 2 B
                 = 31,412,968,448 B and 64 B of the graph's constants (not by hand: vLLM's weights term,
                 31,433,940,032 B, less its bf16 rotary cache and the parameters); no router bias (topk_method
                 greedy); vocab 102,400 a multiple of 64 (no padded rows); SGLang's rotary cache 4,096 x 40
                 = 163,840 rows x 64 x 4 B = 41,943,040 B (vLLM's in bf16: 20,971,520 B); w_kc and w_vc
                 27 x 16 x (128 + 128) x 512 x 2 B = 113,246,208 B (a full copy of kv_b_proj);
      reserve    chunked prefill 8192, CUDA-graph batches 256: 512 + 8192 x 1.5 + 256 x 2 + 1/8 x 1024 = 13,440 MiB
                 (over the 10 GiB floor): mem_fraction_static round((81,105 - 13,440) / 81,105, 3) = 0.834;
                 tp 2: 13,568 MiB, round(67,537 / 81,105, 3) = round(0.83271, 3) = 0.833;
      pool       free before the weights 85,045,477,376 - 1,073,741,824 = 83,971,735,552 B (78.20477294921875 GiB);
                 W = 31,412,968,448 + 64 + 41,943,040 + 113,246,208 = 31,568,157,760 B;
                 available (83,971,735,552 - W) / 2^30 = 48.80463... GiB; rest = 48.80463... - 78.20477... x 0.166
                 = 35.82264... GiB; int(rest x 2^30) = 38,464,269,690 B // 31,104 = 1,236,634 tokens (page 1: FA3 on
                 sm90 forces none); requests of 4,096 tokens: 1,236,634 // 4,096 = 301 at once.
      tp 2       a rank's parameters: embedding and head halves 2 x 104,857,600; a layer's q_proj half 3,145,728,
                 kv_a_proj_with_mqa whole 1,179,648 (replicated), kv_a_layernorm 512, kv_b_proj half 1,048,576, o_proj
                 half 2,097,152 and the two norms 4,096 (7,475,712, x 27 = 201,844,224); layer 0's MLP half
                 33,619,968; a sparse layer's gate whole 131,072, experts half 276,824,064 and shared experts half
                 8,650,752 (285,605,888, x 26 = 7,425,753,088); the final norm 2,048: 7,870,934,528 x 2 B
                 = 15,741,869,056 B, + 64 + 41,943,040 (whole on each rank) + 56,623,104 (8 heads) = 15,840,435,264 B;
                 the same 83,971,735,552 B free at fraction 0.833: rest int(...) // 31,104 = 1,739,583 tokens, each
                 the whole latent of every layer.
    """

    PATH = os.path.join(SRC, "tests", "models", "hf_configs", "DeepSeek-V2-Lite.json")
    ARGS = ["serve", PATH, "--graph", "decode", "--gpu", "H100-80GB", "--reserve", "1GiB", "--context", "4096",
            "--json"]

    def answer(self, engine, *extra):
        p = run(*self.ARGS, "--engine", engine, *extra)
        self.assertIn(p.returncode, (0, 1), p.stderr)
        return json.loads(p.stdout)

    def test_tensorrt_llm_does_not_load_deepseek_v2(self):
        # TensorRT-LLM's PyTorch backend registers DeepseekV3ForCausalLM and DeepseekV32ForCausalLM, no
        # DeepseekV2ForCausalLM: refused for what it is, not for the MLA profiling run a deepseek_v3 is refused for.
        t = run(*self.ARGS[:-1], "--engine", "trtllm")
        self.assertEqual(t.returncode, 2, t.stderr)
        self.assertIn("DeepseekV2ForCausalLM (deepseek_v2), which TensorRT-LLM's PyTorch backend does not load", t.stderr)
        self.assertEqual(t.stderr.count("\n"), 1, t.stderr)
        rows = {r["engine"]: r for r in self.answer("all")["engines"]}
        self.assertIn("does not load", rows["trtllm"]["not_modelled"])
        self.assertGreater(rows["sglang"]["kv_cache_tokens"], 0)

    def test_published_figures(self):
        v, s = self.answer("vllm"), self.answer("sglang")
        self.assertEqual(s["kv_cache"]["bytes_per_token"], 27 * 576 * 2)
        self.assertEqual(s["kv_cache"]["bytes_per_token"], 31104)
        g = s["sglang"]
        self.assertEqual(g["rotary_cache_bytes"], 41943040)
        self.assertEqual(g["mla_absorbed_bytes"], 113246208)
        self.assertEqual((g["mla_attention_backend"], g["page_size"]), ("fa3", 1))
        self.assertEqual((g["chunked_prefill_size"], g["cuda_graph_max_bs"], g["reserved_mib"]), (8192, 256, 13440))
        self.assertEqual(g["mem_fraction_static"], 0.834)
        # vLLM's weights term holds the graph's (31,412,968,448 B and the constants) and its bf16 rotary cache.
        self.assertEqual(v["memory"]["rotary_cache_bytes"], 20971520)
        graph = v["memory"]["weights_bytes"] - 20971520
        self.assertEqual(graph - 15706484224 * 2, 64)  # the graph's constants
        weights = graph + 41943040 + 113246208
        self.assertEqual(s["memory"]["weights_bytes"], weights)
        self.assertEqual(weights, 31412968448 + 64 + 41943040 + 113246208)
        self.assertEqual(weights, 31568157760)
        free = 85045477376 - (1 << 30)
        self.assertEqual(free, 83971735552)
        tokens = pool_tokens(free, weights, 0.834, 31104)
        self.assertEqual(tokens, 1236634)
        self.assertEqual(g["profiled_tokens"], tokens)
        self.assertEqual(s["kv_cache_tokens"], tokens)
        self.assertEqual(s["max_concurrent_sequences"], tokens // 4096)

    def test_tensor_parallel_two_replicates_the_cache(self):
        one, two = self.answer("sglang"), self.answer("sglang", "--tp", "2")
        self.assertEqual(two["kv_cache"]["bytes_per_token"], 31104)
        self.assertEqual(two["sglang"]["mla_absorbed_bytes"], 113246208 // 2)
        self.assertEqual(two["sglang"]["reserved_mib"], 13568)
        self.assertEqual(two["sglang"]["mem_fraction_static"], 0.833)
        self.assertEqual(two["memory"]["weights_bytes"], 7870934528 * 2 + 64 + 41943040 + 113246208 // 2)
        self.assertEqual(two["memory"]["weights_bytes"], 15840435264)
        self.assertEqual(pool_tokens(83971735552, 15840435264, 0.833, 31104), 1739583)
        self.assertEqual(two["sglang"]["profiled_tokens"], 1739583)
        self.assertGreater(two["kv_cache_tokens"], one["kv_cache_tokens"])


if __name__ == "__main__":
    unittest.main()
