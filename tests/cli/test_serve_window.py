"""`memplan serve --engine vllm` on a sliding-window decoder (a tiny mistral config.json), every figure by hand.

vLLM gives every attention layer of a mistral model the config's sliding_window (ModelConfig.get_sliding_window;
llama.py sets no per-layer window without layer_types), so every layer's KV cache spec is a SlidingWindowSpec and
all of them form one group (vllm/v1/core/kv_cache_utils.py get_kv_cache_groups). The blocks, their size and the
logged "GPU KV cache size" are full attention's; one request holds at most
    cdiv(min(sliding_window - 1 + max_num_batched_tokens, max_model_len), block_size) + 1 blocks
(vllm/v1/kv_cache_interface.py SlidingWindowSpec.max_memory_usage_bytes), which sets "Maximum concurrency"
(get_max_concurrency_for_kv_cache_config), the start check (check_enough_kv_cache_memory) and the longest
max_model_len vLLM suggests when it refuses (estimate_max_model_len).

The config: 2 layers, 4 query heads, 2 KV heads, head_dim 4 (hidden 16), intermediate 32, vocab 64, 256 positions,
window 32, float16, untied head. Served with --dtype fp16 --context 256 --max-batched-tokens 64
--max-num-seqs 64 --reserve 0 (block_size 16, gpu_memory_utilization 0.9, the default sm90):
  KV          = 2 (K, V) x 2 layers x 2 KV heads x 4 x 2 B = 64 B a token, 1,024 B a block of 16
  weights     = per layer q 16x16, k and v 16x8, o 16x16, gate and up 16x32, down 32x16, two norms of 16 = 2,336
                elements; x 2 + embedding 64x16 + head 16x64 + final norm 16 = 6,736 elements = 13,472 B, the
                rotary inv_freq buffer of head_dim / 2 = 2 elements (LlamaRotaryEmbedding's, a constant [1, 2] of the
                export) = 4 B, and vLLM's rotary cache [256 positions, 4] = 2,048 B (vocab 64 is already a multiple
                of 64: no padding rows): 15,524 B
  profile run = the sampler's warm-up on min(64, 64) = 64 rows of 64 logits while the weights, the cuBLAS
                workspace (32 MiB on sm90) and the hidden states [64, 16] (2,048 B) are allocated:
                2 x 64 x 64 + 26 x 64 x 64 + 2 x 2 x 64 x 16 = 118,784 B (above the tiny forward's peak)
  peak        = 15,524 + 33,554,432 + 2,048 + 118,784 = 33,690,788 B
  a request   = cdiv(min(32 - 1 + 64, 256), 16) + 1 = cdiv(95, 16) + 1 = 7 blocks (full attention: 16)
"""
import json
import os
import subprocess
import tempfile
import unittest

import jsonschema

BIN = os.environ["MEMPLAN_BIN"]
SRC = os.environ["MEMPLAN_SOURCE_DIR"]

BLOCK = 16
KV_PER_TOKEN = 2 * 2 * 2 * 4 * 2           # 64
BLOCK_BYTES = BLOCK * KV_PER_TOKEN           # 1,024
WEIGHTS = (2 * (16 * 16 + 2 * 16 * 8 + 16 * 16 + 2 * 16 * 32 + 32 * 16 + 2 * 16) + 64 * 16 + 16 * 64 + 16 + 2) * 2
ROTARY = 256 * 4 * 2
SAMPLER = 2 * 64 * 64 + 26 * 64 * 64 + 2 * 2 * 64 * 16
PEAK = WEIGHTS + ROTARY + (32 << 20) + 64 * 16 * 2 + SAMPLER
WINDOW, TOKENS, CONTEXT = 32, 64, 256


def cdiv(a, b):
    return -(-a // b)


PER_REQUEST = cdiv(min(WINDOW - 1 + TOKENS, CONTEXT), BLOCK) + 1  # 7


def memory_for(available):
    """The smallest --memory (bytes) whose int(total x 0.9) leaves `available` bytes beside the peak."""
    total = (PEAK + available) * 10 // 9
    while int(total * 0.9) < PEAK + available:
        total += 1
    assert int(total * 0.9) == PEAK + available
    return total


def config(directory, **overrides):
    c = {"model_type": "mistral", "architectures": ["MistralForCausalLM"], "hidden_size": 16,
         "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "vocab_size": 64, "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
         "tie_word_embeddings": False, "torch_dtype": "float16", "hidden_act": "silu", "sliding_window": WINDOW}
    c.update(overrides)
    path = os.path.join(directory, "config.json")
    with open(path, "w") as f:
        json.dump(c, f)
    return path


def run(*args):
    return subprocess.run([BIN, *args], cwd=SRC, capture_output=True, text=True, timeout=600)


ARGS = ["--graph", "decode", "--engine", "vllm", "--dtype", "fp16", "--context", str(CONTEXT), "--max-batched-tokens",
        str(TOKENS), "--max-num-seqs", "64", "--reserve", "0"]


class SlidingWindowByHand(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = config(self.dir.name)

    def tearDown(self):
        self.dir.cleanup()

    def serve(self, available, path=None, extra=(), rc=0):
        p = run("serve", path or self.path, *ARGS, "--memory", str(memory_for(available)), *extra, "--json")
        self.assertEqual(p.returncode, rc, p.stderr)
        return json.loads(p.stdout)

    def test_a_hundred_blocks(self):
        available = 100 * BLOCK_BYTES + BLOCK_BYTES - 1  # 100 blocks; one more does not fit
        j = self.serve(available)
        self.assertEqual(j["profile_run"]["peak_set_by"], "sampler")
        self.assertEqual(j["memory"]["weights_bytes"], WEIGHTS + ROTARY)
        self.assertEqual(j["memory"]["available_kv_cache_bytes"], available)
        self.assertEqual(j["kv_cache"]["bytes_per_token"], KV_PER_TOKEN)
        self.assertEqual(j["kv_cache"]["block_bytes"], BLOCK_BYTES)
        self.assertEqual(j["kv_cache"]["layer_groups"], [{"attention": "sliding_window", "sliding_window": WINDOW,
                                                          "layers": 2, "bytes_per_token": KV_PER_TOKEN,
                                                          "vllm_groups": 1}])
        self.assertEqual(j["kv_cache"]["blocks_per_request"], PER_REQUEST)
        self.assertEqual(PER_REQUEST, 7)
        self.assertEqual(j["num_gpu_blocks"], 100)
        self.assertGreater(101 * BLOCK_BYTES, available)
        self.assertEqual(j["gpu_kv_cache_tokens"], 100 * BLOCK)
        self.assertEqual(j["max_concurrency"], 100 / 7)
        self.assertEqual(j["max_concurrent_sequences"], 14)
        self.assertTrue(j["starts"])
        with open(os.path.join(SRC, "docs", "schemas", "serve.vllm.schema.json")) as f:
            jsonschema.validate(j, json.load(f))
        text = run("serve", self.path, *ARGS, "--memory", str(memory_for(available))).stdout
        self.assertIn("GPU KV cache size: 1,600 tokens", text)
        self.assertIn("Maximum concurrency for 256 tokens per request: 14.29x", text)
        self.assertIn("sliding window 32 on all 2 layers, 64 B per token", text)
        self.assertIn("cdiv(min(32 - 1 + 64, 256), 16) + 1 = 7 blocks, not cdiv(256, 16) = 16", text)

    def test_without_the_window_the_same_blocks_hold_fewer_requests(self):
        # sliding_window null: full attention, the same budget (the window changes no term of it), 16 blocks a request.
        j = self.serve(100 * BLOCK_BYTES, path=config(self.dir.name, sliding_window=None))
        self.assertEqual(j["num_gpu_blocks"], 100)
        self.assertEqual(j["max_concurrency"], 100 / 16)
        self.assertNotIn("layer_groups", j["kv_cache"])

    def test_a_window_past_the_position_limit_still_slides_in_vllm(self):
        # vLLM reads the key as it is: a window of 4096 over 256 positions is still a SlidingWindowSpec, one block
        # more than full attention: cdiv(min(4095 + 64, 256), 16) + 1 = 17.
        j = self.serve(170 * BLOCK_BYTES, path=config(self.dir.name, sliding_window=4096))
        self.assertEqual(j["kv_cache"]["blocks_per_request"], 17)
        self.assertEqual(j["max_concurrency"], 10.0)

    def test_starts_with_one_request_and_not_a_block_less(self):
        j = self.serve(PER_REQUEST * BLOCK_BYTES)
        self.assertTrue(j["starts"])
        self.assertEqual(j["max_concurrency"], 1.0)
        j = self.serve(PER_REQUEST * BLOCK_BYTES - 1, rc=1)  # 6 blocks: vLLM refuses to start
        self.assertFalse(j["starts"])
        self.assertEqual(j["num_gpu_blocks"], 6)
        # estimate_max_model_len: 80 tokens hold cdiv(80, 16) + 1 = 6 blocks; 81 would hold 7.
        self.assertEqual(j["estimated_max_model_len"], (6 - 1) * BLOCK)
        self.assertEqual(cdiv(min(WINDOW - 1 + TOKENS, 81), BLOCK) + 1, 7)

    def test_eager_and_estimate_refuse_the_windowed_decoder(self):
        for args in (["serve", self.path, "--graph", "decode", "--engine", "eager", "--memory", "1GiB", "--context", "64"],
                     ["estimate", self.path, "--graph", "decode", "--batch", "1", "--dim", "sequence_length=1",
                      "--dim", "past_sequence_length=8"]):
            p = run(*args)
            self.assertEqual(p.returncode, 2, args)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
            self.assertIn('"sliding_window" is 32', p.stderr)
            self.assertIn("transformers' cache keeps the last sliding_window - 1 tokens", p.stderr)

    def test_trtllm_refuses_the_window_and_sglang_serves_one_pool(self):
        # TensorRT-LLM's variable-window cache (VSWA) is not sized: one message. SGLang serves MistralForCausalLM
        # (not in model_config.py is_hybrid_swa_model) with one pool over both layers, 64 B a token
        # (cost_models/sglang_swa.h). --memory 1GiB --reserve 0 --mem-fraction-static 0.8: SGLang's weights are the
        # graph's 13,476 B (not vLLM's fp16 rotary cache) and its own in float32, 256 x 4 x 4 = 4,096 B: 17,572 B;
        # rest = (2^30 - 17,572) - 2^30 x 0.2 = 858,975,887.2 B; tokens = 858,975,887 // 64 = 13,421,498.
        p = run("serve", self.path, "--graph", "decode", "--engine", "trtllm", "--memory", "1GiB", "--context", "64")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        self.assertIn("attention slides over a window of 32 tokens; TensorRT-LLM's variable-window cache (VSWA) is "
                      "not modelled", p.stderr)
        p = run("serve", self.path, "--graph", "decode", "--engine", "sglang", "--memory", "1GiB", "--reserve", "0",
                "--context", "64", "--mem-fraction-static", "0.8", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        j = json.loads(p.stdout)
        self.assertEqual(j["memory"]["weights_bytes"], WEIGHTS + 256 * 4 * 4)
        self.assertEqual(j["sglang"]["sliding_window"]["hybrid_swa_pool"], False)
        self.assertEqual((j["sglang"]["sliding_window"]["swa_layers"], j["sglang"]["sliding_window"]["full_layers"]),
                         (2, 0))
        self.assertEqual(j["sglang"]["max_total_num_tokens"], 13421498)
        self.assertEqual(j["kv_cache_bytes"], 13421498 * 64)

    def test_engine_version_08_is_refused(self):
        p = run("serve", self.path, *ARGS, "--memory", "1GiB", "--engine-version", "0.8")
        self.assertEqual(p.returncode, 2)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        self.assertIn("sliding window", p.stderr)

    def test_catalog_table_says_the_bound_of_each_step_size(self):
        p = run("serve", self.path, "--graph", "decode", "--engine", "vllm", "--context", "256", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        t = json.loads(p.stdout)
        with open(os.path.join(SRC, "docs", "schemas", "serve.vllm.schema.json")) as f:
            jsonschema.validate(t, json.load(f))
        self.assertEqual(t["sliding_window"], WINDOW)
        # vLLM's default step: 8,192 tokens on >= 70 GiB GPUs other than the A100, 2,048 elsewhere; both cap at 256.
        for row in t["gpus"]:
            if row["starts"]:
                self.assertEqual(row["blocks_per_request"], cdiv(min(WINDOW - 1 + 2048, 256), BLOCK) + 1)
        for fmt in ("table", "markdown"):
            p = run("serve", self.path, "--graph", "decode", "--engine", "vllm", "--context", "256", "--format", fmt)
            self.assertIn("every layer slides over a window of 32 tokens: a request holds at most cdiv(min(32 - 1 + "
                          "max_num_batched_tokens, 256), 16) + 1 blocks: 17 at max_num_batched_tokens 8,192", p.stdout)

    def test_tensor_parallel_halves_the_group_bytes(self):
        # --tp 2 over 2 KV heads: one head a rank, 2 x 2 layers x 1 x 4 x 2 B = 32 B a token; the bound unchanged.
        j = self.serve(100 * BLOCK_BYTES // 2, extra=("--tp", "2"))
        self.assertEqual(j["kv_cache"]["layer_groups"][0]["bytes_per_token"], KV_PER_TOKEN // 2)
        self.assertEqual(j["kv_cache"]["blocks_per_request"], PER_REQUEST)


class Phi3Window(unittest.TestCase):
    """Phi-3 with sliding_window below its position limit: vLLM's Phi3ForCausalLM is its llama.py, the model's window
    on every layer, so the same group as Mistral's; its decoder is hf_archs.DecoderWithCache's (the window's mask).
    A tiny config: 2 layers, 4 heads = 4 KV heads, head_dim 4, fp16: 2 x 2 x 4 x 4 x 2 = 128 B a token."""

    def test_every_layer_slides(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "config.json")
            c = {"model_type": "phi3", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 64, "max_position_embeddings": 256,
                 "rms_norm_eps": 1e-5, "hidden_act": "silu", "torch_dtype": "float16", "sliding_window": 47}
            with open(path, "w") as f:
                json.dump(c, f)
            p = run("serve", path, *ARGS, "--memory", "1GiB", "--json")
            self.assertEqual(p.returncode, 0, p.stderr)
            j = json.loads(p.stdout)
            self.assertEqual(j["kv_cache"]["layer_groups"], [{"attention": "sliding_window", "sliding_window": 47,
                                                              "layers": 2, "bytes_per_token": 128, "vllm_groups": 1}])
            # cdiv(min(47 - 1 + 64, 256), 16) + 1 = cdiv(110, 16) + 1 = 8
            self.assertEqual(j["kv_cache"]["blocks_per_request"], 8)
            self.assertEqual(j["max_concurrency"], j["num_gpu_blocks"] / 8)
            eager = run("serve", path, "--graph", "decode", "--engine", "eager", "--memory", "1GiB", "--context", "64")
            self.assertEqual(eager.returncode, 2)
            self.assertIn('"sliding_window" is 47', eager.stderr)
            # Without a window the decoder is a plain one: eager serves it, vLLM names no group.
            with open(path, "w") as f:
                json.dump({**c, "sliding_window": None}, f)
            eager = run("serve", path, "--graph", "decode", "--engine", "eager", "--memory", "1GiB", "--context", "64",
                        "--json")
            self.assertEqual(eager.returncode, 0, eager.stderr)
            self.assertEqual(json.loads(eager.stdout)["kv_cache_bytes_per_token"], 2 * 2 * 4 * 4 * 4)  # float32
            p = run("serve", path, *ARGS, "--memory", "1GiB", "--json")
            self.assertNotIn("layer_groups", json.loads(p.stdout)["kv_cache"])


class GemmaHybrid(unittest.TestCase):
    """Gemma 3: a window on five of six layers (here sliding_window_pattern 3: layers 0, 1, 3, 4 slide, 2 and 5 are
    full), vLLM's hybrid groups (vllm/v1/core/kv_cache_utils.py _get_kv_cache_groups_uniform_page_size) by hand:
    4 sliding and 2 full layers, group_size 2 (4 is not below 1.5 x 2), 2 sliding groups and 1 full; one layer
    2 (K, V) x 1 KV head x 16 x 2 B = 64 B a token, a block of the 2 pools 16 x 64 x 2 = 2,048 B; a request of 256
    tokens with steps of 64 holds 2 x (cdiv(min(24 - 1 + 64, 256), 16) + 1) + cdiv(256, 16) = 2 x 7 + 16 = 30 blocks.
    Gemma 2: alternating layers, its soft-caps in vLLM's kernels."""

    GEMMA3 = {"model_type": "gemma3_text", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 6,
              "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 64,
              "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "hidden_activation": "gelu_pytorch_tanh",
              "query_pre_attn_scalar": 16, "attn_logit_softcapping": None, "final_logit_softcapping": None,
              "sliding_window": 24, "sliding_window_pattern": 3, "rope_theta": 1000000.0,
              "rope_local_base_freq": 10000.0, "torch_dtype": "bfloat16"}

    def config(self, d, **overrides):
        path = os.path.join(d, "config.json")
        with open(path, "w") as f:
            json.dump({**self.GEMMA3, **overrides}, f)
        return path

    def test_groups_by_hand(self):
        with tempfile.TemporaryDirectory() as d:
            path = self.config(d)
            p = run("serve", path, *ARGS, "--memory", "1GiB", "--json")
            self.assertEqual(p.returncode, 0, p.stderr)
            j = json.loads(p.stdout)
            with open(os.path.join(SRC, "docs", "schemas", "serve.vllm.schema.json")) as f:
                jsonschema.validate(j, json.load(f))
            kv = j["kv_cache"]
            self.assertEqual(kv["layer_groups"], [
                {"attention": "sliding_window", "sliding_window": 24, "layers": 4, "bytes_per_token": 256,
                 "vllm_groups": 2},
                {"attention": "full", "sliding_window": None, "layers": 2, "bytes_per_token": 128, "vllm_groups": 1}])
            self.assertEqual(kv["group_size"], 2)
            self.assertEqual(kv["padding_layers"], 0)
            self.assertEqual(kv["block_bytes"], 2048)
            self.assertEqual(kv["blocks_per_request"], 30)
            # The grouping's arithmetic on the available bytes: whole blocks of the pools, one more not fitting;
            # "GPU KV cache size" the blocks // 3 groups x 16; concurrency the blocks / 30.
            available = j["memory"]["available_kv_cache_bytes"]
            blocks = available // 2048
            self.assertEqual(j["num_gpu_blocks"], blocks)
            self.assertGreater((blocks + 1) * 2048, available)
            self.assertEqual(j["gpu_kv_cache_tokens"], blocks // 3 * 16)
            self.assertEqual(j["max_concurrency"], blocks / 30)
            # Two rotary caches (get_rope's one per configuration: rope_theta and rope_local_base_freq),
            # [256 positions, 16] in bf16 each.
            self.assertEqual(j["memory"]["rotary_cache_bytes"], 2 * 256 * 16 * 2)
            text = run("serve", path, *ARGS, "--memory", "1GiB").stdout
            self.assertIn("3 groups of 2 layers (2 sliding, 1 full; 0 padding layers)", text)
            self.assertIn("= 2 x 7 + 1 x 16 = 30 blocks", text)
            eager = run("serve", path, "--graph", "decode", "--engine", "eager", "--memory", "1GiB", "--context", "64")
            self.assertEqual(eager.returncode, 2)
            self.assertIn('"sliding_window" is 24', eager.stderr)

    def test_the_start_check_by_release(self):
        # Seven layers (sliding_window_pattern 3: 2 and 5 full, 5 sliding): group_size 2 (5 is not below 1.5 x 2),
        # the sliding kind in cdiv(5, 2) = 3 groups (1 padding slot), a page 16 x 64 = 1,024 B, a request of 256
        # tokens 7 blocks a sliding group and 16 the full one. vLLM's check (kv_cache_utils.py at the tags) asks:
        #   0.11 to 0.13, every layer unpadded:     (5 x 7 + 2 x 16) x 1,024 = 68,608 B
        #   0.14 to 0.18.0, the first group only:  2 x 7 x 1,024 = 14,336 B (layer 0 slides)
        #   0.18.1 on, every group:                2 x (3 x 7 + 16) x 1,024 = 75,776 B
        # With --gpu-memory-utilization 1.0 the available bytes are --memory less the weights and profile peak.
        need = {"0.13": 68608, "0.16": 14336, "0.18.1": 75776}
        with tempfile.TemporaryDirectory() as d:
            path = self.config(d, num_hidden_layers=7)

            def serve(version, available=None, json_out=True):
                args = ["serve", path, *ARGS, "--gpu-memory-utilization", "1.0", "--engine-version", version]
                if available is None:
                    p = run(*args, "--memory", "1GiB", "--json")
                    j = json.loads(p.stdout)
                    return j["memory"]["total_bytes"] - j["memory"]["available_kv_cache_bytes"]
                return run(*args, "--memory", str(serve(version) + available), *(["--json"] if json_out else []))

            for version, bytes_ in need.items():
                p = serve(version, 10 ** 6)
                self.assertEqual(p.returncode, 0, p.stderr)
                kv = json.loads(p.stdout)["kv_cache"]
                self.assertEqual((kv["group_size"], kv["padding_layers"], kv["blocks_per_request"]), (2, 1, 37))
                self.assertEqual(kv["start_check_bytes"], bytes_, version)
            # At exactly 0.13's need it starts and 0.18.1 does not; a byte less and 0.13 does not either.
            self.assertTrue(json.loads(serve("0.13", 68608).stdout)["starts"])
            self.assertEqual(serve("0.13", 68607).returncode, 1)
            self.assertEqual(serve("0.18.1", 68608).returncode, 1)
            # 20,000 B: 0.13 names the longest request whose pages fit, 5 x (cdiv(m, 16) + 1) + 2 x cdiv(m, 16)
            # <= 19.5: m = 32; 0.16 starts with 9 blocks where a request of 256 tokens takes 37.
            self.assertEqual(json.loads(serve("0.13", 20000).stdout)["estimated_max_model_len"], 32)
            p = serve("0.16", 20000)
            self.assertEqual(p.returncode, 0, p.stderr)
            j = json.loads(p.stdout)
            self.assertEqual((j["starts"], j["num_gpu_blocks"], j["max_concurrent_sequences"]), (True, 9, 0))
            self.assertAlmostEqual(j["max_concurrency"], 9 / 37)
            self.assertIn("vLLM starts, though one request of 256 tokens takes 37 blocks of the 9: its start check "
                          "counts group_size x the first group's blocks: 0.14 to 0.18.0",
                          serve("0.16", 20000, json_out=False).stdout)

    def test_gemma2_soft_caps_run_in_the_kernels(self):
        # Gemma 2: even layers slide (0, 2, 4), odd ones are full (1, 3, 5): 3 + 3, group_size 3, 1 + 1 groups; a
        # request of 256 tokens holds cdiv(min(24 - 1 + 64, 256), 16) + 1 + cdiv(256, 16) = 7 + 16 = 23 blocks, a
        # block of the 3 pools 16 x 64 x 3 = 3,072 B. Its soft-capped scores (attn_logit_softcapping) run in
        # vLLM's attention kernels (logits_soft_cap) and its soft-capped logits (final_logit_softcapping) at the
        # sampled rows (LogitsProcessor's soft_cap): every layer's attention and the head are replaced.
        with tempfile.TemporaryDirectory() as d:
            c = {k: v for k, v in self.GEMMA3.items() if k not in ("sliding_window_pattern", "rope_local_base_freq")}
            path = os.path.join(d, "config.json")
            with open(path, "w") as f:
                json.dump({**c, "model_type": "gemma2", "attn_logit_softcapping": 50.0,
                           "final_logit_softcapping": 30.0}, f)
            p = run("serve", path, *ARGS, "--memory", "1GiB", "--json")
            self.assertEqual(p.returncode, 0, p.stderr)
            j = json.loads(p.stdout)
            self.assertEqual(j["replaced"]["attention_kernels"], 6)
            self.assertIsNotNone(j["replaced"]["lm_head"])
            kv = j["kv_cache"]
            self.assertEqual(kv["layer_groups"], [
                {"attention": "sliding_window", "sliding_window": 24, "layers": 3, "bytes_per_token": 192,
                 "vllm_groups": 1},
                {"attention": "full", "sliding_window": None, "layers": 3, "bytes_per_token": 192, "vllm_groups": 1}])
            self.assertEqual((kv["group_size"], kv["padding_layers"], kv["block_bytes"]), (3, 0, 3072))
            self.assertEqual(kv["blocks_per_request"], 23)
            blocks = j["memory"]["available_kv_cache_bytes"] // 3072
            self.assertEqual(j["num_gpu_blocks"], blocks)
            self.assertEqual(j["gpu_kv_cache_tokens"], blocks // 2 * 16)
            self.assertEqual(j["max_concurrency"], blocks / 23)
            # One rotary cache (no local base): [256, 16] in bf16.
            self.assertEqual(j["memory"]["rotary_cache_bytes"], 256 * 16 * 2)

if __name__ == "__main__":
    unittest.main()
