"""`memplan serve --engine sglang` on sliding-window models (cost_models/sglang_swa.h), the split by hand.

SGLang gives its hybrid pool (SWAKVPool) to the architectures of configs/model_config.py is_hybrid_swa_model only:
of those memplan reads, GptOssForCausalLM. gpt-oss-20b: 24 layers, layer_types alternating sliding_attention /
full_attention (12 each), window 128, 8 KV heads, head_dim 64; in bf16 one token and layer holds
F = S = 8 x (64 + 64) x 2 B = 2,048 B, 49,152 B over the 24 layers (the pool's cell_size). As shipped its experts
are MXFP4 (their SGLang layout: tests/cli/test_serve_mxfp4.py); here the bf16 checkpoint (the same config.json
without quantization_config) is served. model_runner_kv_cache_mixin.py set_num_tokens_hybrid_swa, from the
profiled max_total_num_tokens T (page 1, no --max-total-tokens; its terms are the existing pool's,
tests/cli/test_serve_engines.py):
  full_layer_tokens = int(T x 49,152 / (2,048 x 12 + r x 2,048 x 12)),  r = 0.8: / 44,236.8
  swa_layer_tokens  = int(full_layer_tokens x r)
  max_total_num_tokens = full_layer_tokens; max_running_requests = min(full // 2, the request pool)
  the pool's bytes = 2,048 x 12 x (full + swa)
A request of the 131,072-token context holds them all in the full layers' pool: concurrency = full / 131,072.
Gemma-2 (Gemma2ForCausalLM) and Mistral are not hybrid there: one pool over every layer, max_total_num_tokens = T.
"""
import json
import os
import subprocess
import tempfile
import unittest

import jsonschema

BIN = os.environ["MEMPLAN_BIN"]
SRC = os.environ["MEMPLAN_SOURCE_DIR"]
CONFIGS = os.path.join(SRC, "tests", "models", "hf_configs")
H100 = ["--graph", "decode", "--gpu", "H100"]


def run(*args):
    return subprocess.run([BIN, *args], cwd=SRC, capture_output=True, text=True, timeout=600)


def serve_json(path, *args):
    p = run("serve", path, *H100, *args, "--json")
    assert p.returncode == 0, (p.returncode, p.stderr)
    return json.loads(p.stdout)


class GptOssHybridPool(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        with open(os.path.join(CONFIGS, "gpt-oss-20b.json")) as f:
            config = json.load(f)
        del config["quantization_config"]  # the bf16 checkpoint
        cls.bf16 = os.path.join(cls.tmp.name, "config.json")
        with open(cls.bf16, "w") as f:
            json.dump(config, f)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_the_split_by_hand(self):
        j = serve_json(self.bf16, "--engine", "sglang")
        with open(os.path.join(SRC, "docs", "schemas", "serve.engine.schema.json")) as f:
            jsonschema.validate(j, json.load(f))
        g = j["sglang"]
        self.assertEqual(j["kv_cache"]["bytes_per_token"], 49152)
        t = g["profiled_tokens"]
        full = int(t * 49152 / 44236.8)
        swa = int(full * 0.8)
        self.assertEqual(g["sliding_window"], {"window": 128, "swa_layers": 12, "full_layers": 12,
                                               "hybrid_swa_pool": True, "swa_full_tokens_ratio": 0.8,
                                               "full_layer_tokens": full, "swa_layer_tokens": swa,
                                               "index_mapping_bytes": (full + 2) * 8})
        self.assertEqual(g["max_total_num_tokens"], full)
        self.assertEqual(j["kv_cache_tokens"], full)
        self.assertEqual(g["max_running_requests"], min(full // 2, g["req_to_token_pool_size"]))
        self.assertEqual(j["kv_cache_bytes"], 2048 * 12 * (full + swa))
        self.assertEqual(j["settings"]["context"], 131072)
        self.assertAlmostEqual(j["max_concurrency"], full / 131072)
        self.assertEqual(j["max_concurrent_sequences"], full // 131072)
        self.assertEqual(j["prints"][0],
                         f"Use sliding window memory pool. full_layer_tokens={full}, swa_layer_tokens={swa}")
        self.assertTrue(j["prints"][1].startswith(f"max_total_num_tokens={full}, "), j["prints"])
        # The split holds more tokens than one pool over every layer would (T), in the same bytes or fewer.
        self.assertGreater(full, t)
        self.assertLessEqual(j["kv_cache_bytes"], t * 49152)

    def test_a_context_within_the_window_is_bound_by_the_windowed_pool(self):
        # --context 64 <= the window of 128: nothing falls behind the window, so a request holds its 64 tokens in
        # both pools and the smaller (swa = int(full x 0.8)) binds: swa / 64 requests.
        j = serve_json(self.bf16, "--engine", "sglang", "--context", "64")
        w = j["sglang"]["sliding_window"]
        self.assertEqual(w["swa_layer_tokens"], int(w["full_layer_tokens"] * 0.8))
        self.assertAlmostEqual(j["max_concurrency"], w["swa_layer_tokens"] / 64)
        self.assertEqual(j["max_concurrent_sequences"], w["swa_layer_tokens"] // 64)

    def test_ratio_and_disable(self):
        j = serve_json(self.bf16, "--engine", "sglang", "--swa-full-tokens-ratio", "0.5")
        t = j["sglang"]["profiled_tokens"]
        full = int(t * 49152 / (24576 + 0.5 * 24576))  # / 36,864
        self.assertEqual(j["sglang"]["sliding_window"]["full_layer_tokens"], full)
        self.assertEqual(j["sglang"]["sliding_window"]["swa_layer_tokens"], int(full * 0.5))
        j = serve_json(self.bf16, "--engine", "sglang", "--disable-hybrid-swa-memory")
        g = j["sglang"]
        self.assertFalse(g["sliding_window"]["hybrid_swa_pool"])
        self.assertIsNone(g["sliding_window"]["full_layer_tokens"])
        self.assertEqual(g["max_total_num_tokens"], g["profiled_tokens"])
        self.assertEqual(j["kv_cache_bytes"], g["profiled_tokens"] * 49152)
        self.assertTrue(j["prints"][0].startswith("max_total_num_tokens="), j["prints"])

    def test_text_and_engine_table(self):
        p = run("serve", self.bf16, *H100, "--engine", "sglang")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("hybrid sliding-window pool (SWAKVPool): 12 full layers, 12 windowed over 128 tokens", p.stdout)
        self.assertIn("Use sliding window memory pool. full_layer_tokens=", p.stdout)
        p = run("serve", self.bf16, *H100, "--engine", "all", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        rows = {r["engine"]: r for r in json.loads(p.stdout)["engines"]}
        self.assertTrue(rows["sglang"]["prints"].startswith("Use sliding window memory pool. full_layer_tokens="))
        self.assertIn("; max_total_num_tokens=", rows["sglang"]["prints"])
        self.assertIn("variable-window cache (VSWA) is not modelled", rows["trtllm"]["not_modelled"])
        p = run("serve", self.bf16, *H100, "--engine", "all", "--format", "markdown")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("`Use sliding window memory pool. full_layer_tokens=", p.stdout)

    def test_refusals_that_still_hold(self):
        p = run("serve", self.bf16, *H100, "--engine", "trtllm")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("TensorRT-LLM's variable-window cache (VSWA) is not modelled", p.stderr)
        p = run("serve", self.bf16, *H100, "--engine", "vllm", "--swa-full-tokens-ratio", "0.5")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--swa-full-tokens-ratio applies to --engine sglang", p.stderr)


class Gemma2OnePool(unittest.TestCase):
    def test_gemma2_is_served_with_one_pool_over_every_layer(self):
        # gemma-2-9b: 42 layers, every other one windowed over 4,096 tokens; Gemma2ForCausalLM is not in
        # is_hybrid_swa_model, so max_total_num_tokens = the profiled tokens, a token in all 42 layers:
        # 8 KV heads x (256 + 256) x 2 B x 42 = 344,064 B.
        j = serve_json(os.path.join(CONFIGS, "gemma-2-9b.json"), "--engine", "sglang")
        g = j["sglang"]
        self.assertEqual(j["kv_cache"]["bytes_per_token"], 344064)
        self.assertEqual(g["sliding_window"]["window"], 4096)
        self.assertEqual((g["sliding_window"]["swa_layers"], g["sliding_window"]["full_layers"]), (21, 21))
        self.assertFalse(g["sliding_window"]["hybrid_swa_pool"])
        self.assertEqual(g["max_total_num_tokens"], g["profiled_tokens"])
        self.assertEqual(j["kv_cache_bytes"], g["profiled_tokens"] * 344064)
        self.assertTrue(j["prints"][0].startswith(f"max_total_num_tokens={g['profiled_tokens']}, "))


if __name__ == "__main__":
    unittest.main()
