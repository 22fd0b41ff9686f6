"""`memplan serve --engine sglang | trtllm | all` on kv_tiny (tests/models/serve/make_kv_tiny.py), numbers by hand.

kv_tiny: 2 layers, 2 heads = 2 KV heads, head_dim 4, hidden 8, vocab 16, 768 float weights; served, as vLLM's
--dtype auto serves a float32 checkpoint on sm90, in bfloat16: the graph's weights 768 x 2 = 1,536 B (vLLM's own
padded vocabulary rows are not the other engines'), one token's KV over both layers 2 (K, V) x 2 layers x 2 heads
x 4 x 2 B = 64 B.

SGLang (cost_models/sglang_engine.h), --memory 64MiB --reserve 0 --context 64 --mem-fraction-static 0.8:
  total     = 67,108,864 / 2^30                   = 0.0625 GiB free before the weights
  available = (67,108,864 - 1,536) / 2^30          GiB free after them
  rest      = available - total x (1 - 0.8)       = (67,107,328 - 13,421,772.8) B = 53,685,555.2 B
  tokens    = int(53,685,555.2) // 64             = 838,836 (838,837 x 64 = 53,685,568 > 53,685,555)
  the request pool min(max(int(838,836 / 64 x 512), 2048), 4096) = 4096; max_running_requests = min(838,836 // 2,
  4096) = 4096
  with --page-size 16: 838,836 // 16 x 16 = 838,832; with --max-total-tokens 1000: 1000.
SGLang's default mem_fraction_static on the catalog's H100-80GB (85,045,477,376 B, 81,105 whole MiB; SGLang reads
nvidia-smi's 81,559, which memplan's catalog does not hold, and would take 0.835): chunked prefill 8192
and CUDA-graph batches up to 256 (80 to 160 GiB, tp < 4), reserved = 512 + 8192 x 1.5 + 256 x 2 + 1/8 x 1024 =
13,440 MiB (over the 10 GiB floor), fraction = round((81,105 - 13,440) / 81,105, 3) = round(0.83429, 3) = 0.834.

TensorRT-LLM (cost_models/trtllm_engine.h), --memory 64MiB --reserve 0 --context 64 --max-num-tokens 64:
  peak      = 1,536 weights + A (the profiling forward's peak above the weights: vLLM's profile forward over the same
              64 tokens, forward_peak_allocated_bytes - its weights, PyTorch's 32 MiB cuBLAS workspace and a few KiB)
  available = (67,108,864 - peak) x 0.9;  max_tokens = available // 64;  blocks = ceil(max_tokens / 32)
              (calculate_max_num_blocks' math.ceil: a part block is a whole one).
"""
import json
import math
import os
import subprocess
import tempfile
import unittest

import jsonschema

BIN = os.environ["MEMPLAN_BIN"]
SRC = os.environ["MEMPLAN_SOURCE_DIR"]
KV = os.path.join(SRC, "tests", "models", "serve", "kv_tiny.onnx")
MIB, GIB = 1 << 20, 1 << 30
WEIGHTS, KV_PER_TOKEN = 768 * 2, 64
TINY = ["--memory", "64MiB", "--reserve", "0", "--context", "64"]


def run(*args):
    return subprocess.run([BIN, "serve", KV, *args], cwd=SRC, capture_output=True, text=True, timeout=600)


def serve_json(*args, rc=0):
    p = run(*args, "--json")
    assert p.returncode == rc, (p.returncode, p.stderr)
    return json.loads(p.stdout)


def schema(name):
    with open(os.path.join(SRC, "docs", "schemas", name)) as f:
        return json.load(f)


class SglangByHand(unittest.TestCase):
    def test_every_term_of_the_pool(self):
        j = serve_json("--engine", "sglang", *TINY, "--mem-fraction-static", "0.8")
        jsonschema.validate(j, schema("serve.engine.schema.json"))
        self.assertEqual(j["schema"], "memplan.serve.engine/1")
        self.assertEqual(j["memory"]["weights_bytes"], WEIGHTS)
        self.assertEqual(j["kv_cache"]["bytes_per_token"], KV_PER_TOKEN)
        g = j["sglang"]
        self.assertEqual(g["mem_fraction_static"], 0.8)
        self.assertEqual(g["mem_fraction_static_source"], "--mem-fraction-static")
        self.assertEqual(g["total_gpu_memory_gib"], 0.0625)
        self.assertAlmostEqual(g["rest_memory_gib"] * GIB, 53685555.2, delta=1e-3)
        self.assertEqual(g["profiled_tokens"], 838836)
        self.assertEqual(j["kv_cache_tokens"], 838836)
        self.assertGreater(838837 * KV_PER_TOKEN, 53685555)  # one more token does not fit
        self.assertEqual(g["req_to_token_pool_size"], 4096)
        self.assertEqual(g["max_running_requests"], 4096)
        self.assertEqual(j["max_concurrent_sequences"], 838836 // 64)
        text = run("--engine", "sglang", *TINY, "--mem-fraction-static", "0.8").stdout
        self.assertIn("max_total_num_tokens=838836, chunked_prefill_size=2048, max_prefill_tokens=16384, "
                      "max_running_requests=4096, context_len=64", text)

    def test_page_size_and_max_total_tokens(self):
        j = serve_json("--engine", "sglang", *TINY, "--mem-fraction-static", "0.8", "--page-size", "16")
        self.assertEqual(j["kv_cache_tokens"], 838832)
        j = serve_json("--engine", "sglang", *TINY, "--mem-fraction-static", "0.8", "--max-total-tokens", "1000")
        self.assertEqual(j["kv_cache_tokens"], 1000)
        self.assertEqual(j["sglang"]["profiled_tokens"], 838836)
        self.assertEqual(j["sglang"]["max_running_requests"], 500)  # min(1000 // 2, 4096)

    def test_default_fraction_on_h100(self):
        j = serve_json("--engine", "sglang", "--gpu", "H100-80GB", "--reserve", "0", "--context", "64")
        g = j["sglang"]
        self.assertEqual(g["gpu_mem_mib"], 81105)
        self.assertEqual(g["chunked_prefill_size"], 8192)
        self.assertEqual(g["cuda_graph_max_bs"], 256)
        self.assertEqual(g["reserved_mib"], 13440)
        self.assertEqual(g["mem_fraction_static"], 0.834)
        # int(((T - 1,536) / 2^30 - T / 2^30 x 0.166) x 2^30) // 64, T = 85,045,477,376 (Python's floats, as SGLang's).
        t = 85045477376
        rest = (t - WEIGHTS) / GIB - t / GIB * (1 - 0.834)
        self.assertEqual(j["kv_cache_tokens"], int(rest * GIB) // 64)
        self.assertEqual(j["kv_cache_tokens"], 1108248853)

    def test_not_enough_memory(self):
        # A fraction whose share of the free memory is less than the weights: SGLang raises, exit 1.
        p = run("--engine", "sglang", "--memory", "4KiB", "--reserve", "0", "--context", "64",
                "--mem-fraction-static", "0.1", "--json")
        self.assertEqual(p.returncode, 1, p.stderr)
        j = json.loads(p.stdout)
        self.assertFalse(j["starts"])
        self.assertIn("Not enough memory", j["refusal"])


class TrtllmByHand(unittest.TestCase):
    def test_every_term_of_the_cache(self):
        j = serve_json("--engine", "trtllm", *TINY, "--max-num-tokens", "64")
        jsonschema.validate(j, schema("serve.engine.schema.json"))
        v = serve_json("--engine", "vllm", *TINY, "--max-batched-tokens", "64")  # the same forward, vLLM's terms
        a = v["profile_run"]["forward_peak_allocated_bytes"] - v["memory"]["weights_bytes"]
        self.assertEqual(j["memory"]["activation_peak_bytes"], a)
        self.assertGreaterEqual(a, 32 * MIB)            # PyTorch's cuBLAS workspace on sm90
        self.assertLess(a, 32 * MIB + 64 * 1024)        # and a few KiB of the tiny forward
        t = j["trtllm"]
        self.assertEqual(t["free_gpu_memory_fraction"], 0.9)
        self.assertEqual(t["tokens_per_block"], 32)
        self.assertEqual(t["peak_memory_bytes"], WEIGHTS + a)
        available = (64 * MIB - (WEIGHTS + a)) * 0.9
        self.assertEqual(t["available_kv_cache_bytes"], available)
        self.assertEqual(t["estimated_max_tokens"], int(available // 64))
        self.assertEqual(t["blocks"], math.ceil(int(available // 64) / 32))
        self.assertEqual(j["kv_cache_tokens"], t["blocks"] * 32)
        # the last block is the part one: one block fewer holds fewer tokens than the estimate
        self.assertLess((t["blocks"] - 1) * 32, t["estimated_max_tokens"])
        self.assertEqual(j["max_concurrency"], t["blocks"] / 2)    # a 64-token request: 2 blocks of 32
        text = run("--engine", "trtllm", *TINY, "--max-num-tokens", "64").stdout
        self.assertIn("Estimated max tokens in KV cache : %d" % t["estimated_max_tokens"], text)

    def test_cache_laid_out_otherwise(self):
        # kv_tiny_merged caches [batch, tokens, hidden] (no KV heads found): on one rank the estimate's divisor is
        # the cache's elements x 2 B, 64 / 2 x 2 = 64 B, the same answer as kv_tiny's.
        merged = os.path.join(SRC, "tests", "models", "serve", "kv_tiny_merged.onnx")
        p = subprocess.run([BIN, "serve", merged, "--engine", "trtllm", *TINY, "--max-num-tokens", "64", "--json"],
                           cwd=SRC, capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr)
        j, k = json.loads(p.stdout), serve_json("--engine", "trtllm", *TINY, "--max-num-tokens", "64")
        self.assertEqual(j["trtllm"]["kv_heads_per_rank"], 0)
        self.assertEqual(j["trtllm"]["estimate_kv_bytes_per_token"], KV_PER_TOKEN)
        self.assertEqual(j["kv_cache_tokens"], k["kv_cache_tokens"])

    def test_fraction_and_block(self):
        j = serve_json("--engine", "trtllm", *TINY, "--max-num-tokens", "64", "--free-gpu-memory-fraction", "0.5",
                       "--tokens-per-block", "64")
        a = j["memory"]["activation_peak_bytes"]
        available = (64 * MIB - (WEIGHTS + a)) * 0.5
        self.assertEqual(j["trtllm"]["blocks"], math.ceil(int(available // 64) / 64))


class OrtGenaiByHand(unittest.TestCase):
    """ONNX Runtime GenAI (report/serve_engines.h): kv_tiny in its stored float32, past/present one buffer per layer's
    keys and values of [batch, 2 heads, max_length 100, 4] floats: 2 x 2 layers x 2 x 100 x 4 x 4 B = 12,800 B a
    sequence. The prompt step (a prompt of max_length tokens, the buffers held apart) is memplan's own estimate on
    ONNX Runtime, read here from `memplan estimate` run apart; the batch is the largest whose buffers and step fit."""

    def estimate_prompt(self, batch):
        p = subprocess.run([BIN, "estimate", KV, "--runtime", "onnxruntime", "--dim", "batch=%d" % batch, "--dim",
                            "past_sequence_length=0", "--dim", "sequence_length=100", "--json"], cwd=SRC,
                           capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)["kv_cache"]["prefill"]["required_bytes"]

    def test_largest_batch_at_max_length(self):
        j = serve_json("--engine", "ortgenai", "--memory", "64MiB", "--context", "100")
        jsonschema.validate(j, schema("serve.engine.schema.json"))
        o = j["ortgenai"]
        self.assertEqual(j["kv_cache"]["bytes_per_token"], 128)
        self.assertEqual((o["kv_heads"], o["head_dim"], o["max_length"]), (2, 4, 100))
        b = o["max_batch_size"]
        self.assertEqual(o["kv_buffer_bytes"], b * 12800)
        self.assertEqual(o["step_required_bytes"], self.estimate_prompt(b))
        self.assertEqual(o["total_bytes"], b * 12800 + self.estimate_prompt(b))
        self.assertLessEqual(o["total_bytes"], 64 * MIB)
        self.assertGreater((b + 1) * 12800 + self.estimate_prompt(b + 1), 64 * MIB)  # one more sequence does not fit
        self.assertEqual(o["total_bytes_next"], (b + 1) * 12800 + self.estimate_prompt(b + 1))
        # ONNX Runtime's arena grows by doubling: 201 sequences' prompt step fits its 32 MiB extension, 202 need 64.
        self.assertEqual(b, 201)
        self.assertEqual(j["kv_cache_tokens"], 201 * 100)

    def test_refusals(self):
        for args, says in ((["--tp", "2"], "--tp with --engine ortgenai"),
                           (["--kv-cache-dtype", "fp8"],
                            "--kv-cache-dtype applies to --engine vllm, eager, sglang or trtllm (this is --engine ortgenai)"),
                           (["--runtime", "ideal"], "--runtime ideal with --engine ortgenai"),
                           (["--mem-fraction-static", "0.5"], "--mem-fraction-static applies to --engine sglang")):
            p = run("--engine", "ortgenai", "--memory", "64MiB", "--context", "100", *args)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertIn(says, p.stderr)
        p = run("--engine", "ortgenai", "--memory", "64MiB")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("needs --context N (search.max_length)", p.stderr)


class TrtllmMixtureOfExperts(unittest.TestCase):
    """A mixture of experts under --engine trtllm: TensorRT-LLM's profiling run runs its own fused MoE
    (_torch/modules/fused_moe), whose buffers are not the vLLM analysis's Triton kernel's: refused, not answered with
    another engine's peak; --engine all keeps the other rows. A tiny mixtral config.json (hidden 64, 4 experts, top 2)."""

    def test_refused_and_all_keeps_the_others(self):
        config = {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "hidden_size": 64,
                  "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
                  "vocab_size": 64, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                  "tie_word_embeddings": False, "torch_dtype": "bfloat16", "hidden_act": "silu",
                  "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": None}
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "config.json")
            with open(path, "w") as f:
                json.dump(config, f)
            args = [BIN, "serve", path, "--graph", "decode", *TINY]
            t = subprocess.run([*args, "--engine", "trtllm"], capture_output=True, text=True, timeout=600)
            self.assertEqual(t.returncode, 2, t.stderr)
            self.assertIn("is a mixture of experts: TensorRT-LLM's profiling run runs its own fused MoE", t.stderr)
            self.assertEqual(t.stderr.count("\n"), 1, t.stderr)
            a = subprocess.run([*args, "--engine", "all", "--json"], capture_output=True, text=True, timeout=600)
            self.assertIn(a.returncode, (0, 1), a.stderr)
            rows = {r["engine"]: r for r in json.loads(a.stdout)["engines"]}
            self.assertIn("mixture of experts", rows["trtllm"]["not_modelled"])
            self.assertEqual((rows["sglang"]["not_modelled"], rows["vllm"]["not_modelled"]), (None, None))
            self.assertGreater(rows["vllm"]["kv_cache_tokens"], 0)


TINY_LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
              "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 1,
              "vocab_size": 64, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
              "tie_word_embeddings": False, "torch_dtype": "bfloat16", "hidden_act": "silu"}


class TrtllmReplicatedKvHeads(unittest.TestCase):
    """--tp above the KV heads under --engine trtllm, on a tiny llama config.json (hidden 64, 4 heads of 16, one KV
    head, one layer, bf16). TensorRT-LLM 1.0's PyTorch backend loads it: duplicate_kv_weight (_torch/models/
    modeling_utils.py) repeats the one head tp / 1 times, each rank holding (1 + 2 - 1) // 2 = 1 whole head
    (Attention.__init__, KVCacheManager.__init__ num_kv_heads_per_layer). Its estimate divides by
    _get_cache_size_per_token: 2 B x 1 layer x (16 x 1 // 2 = 8) x 2 = 32 B, while the pool holds 2 x 1 x 1 x 16 x 2 =
    64 B a token. --free-gpu-memory-fraction not set (None): calculate_max_num_blocks takes the estimate as it is,
    blocks = ceil(estimate / 32) and the pool is blocks x 32 x 64 B, which must fit in the memory free after profiling
    (total - weights - non-torch), else allocating it fails. Set: the pool is also capped by fraction x that free
    memory / 64 B."""

    def serve(self, d, *extra, rc=None):
        path = os.path.join(d, "config.json")
        with open(path, "w") as f:
            json.dump(TINY_LLAMA, f)
        p = subprocess.run([BIN, "serve", path, "--graph", "decode", "--reserve", "0", "--context", "64",
                            "--engine", "trtllm", "--max-num-tokens", "64", "--tp", "2", *extra, "--json"],
                           capture_output=True, text=True, timeout=600)
        if rc is not None:
            self.assertEqual(p.returncode, rc, p.stderr)
        return json.loads(p.stdout)

    def terms(self, j):
        t = j["trtllm"]
        m = j["memory"]
        self.assertEqual(j["kv_cache"]["bytes_per_token"], 64)
        self.assertEqual(t["estimate_kv_bytes_per_token"], 32)
        self.assertEqual(t["kv_heads_per_rank"], 1)
        peak = m["weights_bytes"] + m["activation_peak_bytes"] + m["non_torch_bytes"]
        self.assertEqual(t["peak_memory_bytes"], peak)
        available = (m["total_bytes"] - peak) * 0.9
        self.assertEqual(t["estimated_max_tokens"], int(available // 32))
        free_after = m["total_bytes"] - m["weights_bytes"] - m["non_torch_bytes"]
        self.assertEqual(t["free_after_profiling_bytes"], free_after)
        return t, available, free_after

    def test_estimate_taken_as_it_is(self):
        with tempfile.TemporaryDirectory() as d:
            # 64 MiB: the profiling run's peak (over 32 MiB: cuBLAS's workspace) leaves available < 0.9 x 32 MiB,
            # and the pool, estimate x 64 B ~ 2 x available < 58 MiB, fits in the ~64 MiB free after profiling.
            j = self.serve(d, "--memory", "64MiB", rc=0)
            jsonschema.validate(j, schema("serve.engine.schema.json"))
            t, available, free_after = self.terms(j)
            self.assertFalse(t["free_gpu_memory_fraction_set"])
            self.assertIsNone(t["cap_tokens"])
            self.assertEqual(t["blocks"], math.ceil(t["estimated_max_tokens"] / 32))
            self.assertEqual(j["kv_cache_tokens"], t["blocks"] * 32)
            self.assertEqual(t["pool_bytes"], t["blocks"] * 32 * 64)
            self.assertGreater(t["pool_bytes"], available)   # twice what the estimate meant to hold
            self.assertLessEqual(t["pool_bytes"], free_after)
            self.assertTrue(j["starts"])
            # 1 GiB: the activations are a small share, the pool of ~2 x 0.9 of the rest does not fit.
            j = self.serve(d, "--memory", "1GiB", rc=1)
            t, available, free_after = self.terms(j)
            self.assertEqual(t["pool_bytes"], math.ceil(t["estimated_max_tokens"] / 32) * 32 * 64)
            self.assertGreater(t["pool_bytes"], free_after)
            self.assertFalse(j["starts"])
            self.assertIn("allocating the pool fails", j["refusal"])

    def test_fraction_set_caps_the_pool(self):
        with tempfile.TemporaryDirectory() as d:
            j = self.serve(d, "--memory", "1GiB", "--free-gpu-memory-fraction", "0.9", rc=0)
            t, available, free_after = self.terms(j)
            self.assertTrue(t["free_gpu_memory_fraction_set"])
            cap = 0.9 * free_after / 64
            self.assertEqual(t["cap_tokens"], cap)
            self.assertLess(cap, t["estimated_max_tokens"])
            self.assertEqual(t["blocks"], math.ceil(cap / 32))
            self.assertLessEqual(t["pool_bytes"], free_after)
            self.assertTrue(j["starts"])

    def test_tensor_rt_llm_asserts(self):
        # 12 heads of 16 (4 a rank at --tp 4). 3 KV heads over 4 ranks: duplicate_kv_weight asserts
        # tensor_parallel_size % num_kv_heads == 0; 6 over 4: num_kv_heads % tensor_parallel_size == 0. Each refusal
        # names the assertion, one line, exit 2.
        for kv, says in ((3, "--tp 4 is not a multiple of the 3 KV heads"), (6, "--tp 4 does not divide the 6 KV heads")):
            config = dict(TINY_LLAMA, num_attention_heads=12, num_key_value_heads=kv, hidden_size=192)
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "config.json")
                with open(path, "w") as f:
                    json.dump(config, f)
                p = subprocess.run([BIN, "serve", path, "--graph", "decode", *TINY, "--engine", "trtllm", "--tp", "4"],
                                   capture_output=True, text=True, timeout=600)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn(says, p.stderr)
                self.assertIn("duplicate_kv_weight", p.stderr)
                self.assertEqual(p.stderr.count("\n"), 1, p.stderr)


class AllEngines(unittest.TestCase):
    def test_one_row_an_engine(self):
        j = serve_json("--engine", "all", *TINY)
        jsonschema.validate(j, schema("serve.engines.schema.json"))
        self.assertEqual([r["engine"] for r in j["engines"]], ["vllm", "sglang", "trtllm", "ortgenai"])
        v = serve_json("--engine", "vllm", *TINY)
        t = serve_json("--engine", "trtllm", *TINY)
        rows = {r["engine"]: r for r in j["engines"]}
        self.assertEqual(rows["vllm"]["kv_cache_tokens"], v["gpu_kv_cache_tokens"])
        self.assertEqual(rows["trtllm"]["kv_cache_tokens"], t["kv_cache_tokens"])
        o = serve_json("--engine", "ortgenai", "--memory", "64MiB", "--context", "64")  # the graph's float32
        self.assertEqual(rows["ortgenai"]["kv_cache_tokens"], o["kv_cache_tokens"])
        self.assertEqual(rows["ortgenai"]["max_concurrency"], o["ortgenai"]["max_batch_size"])
        # --tp 2: ONNX Runtime GenAI's row says it serves on one GPU; the others answer per rank.
        rows = {r["engine"]: r for r in serve_json("--engine", "all", *TINY, "--tp", "2")["engines"]}
        self.assertIn("ONNX Runtime GenAI serves on one GPU", rows["ortgenai"]["not_modelled"])
        self.assertTrue(rows["trtllm"]["starts"])
        # SGLang's default fraction on 64 MiB is negative (its reserve is 3,728 MiB): it would not start.
        self.assertFalse(rows["sglang"]["starts"])
        md = run("--engine", "all", *TINY, "--format", "markdown").stdout
        self.assertIn("| engine | KV cache | tokens | block |", md)
        self.assertIn("| trtllm |", md)


class Refusals(unittest.TestCase):
    def refused(self, *args, says):
        p = run(*args)
        self.assertEqual(p.returncode, 2, (p.stdout, p.stderr))
        self.assertIn(says, p.stderr)

    def test_another_engines_options(self):
        self.refused(*TINY, "--mem-fraction-static", "0.8", says="--mem-fraction-static applies to --engine sglang")
        self.refused("--engine", "sglang", *TINY, "--free-gpu-memory-fraction", "0.5",
                     says="--free-gpu-memory-fraction applies to --engine trtllm")
        self.refused("--engine", "trtllm", *TINY, "--page-size", "16", says="--page-size applies to --engine sglang")
        self.refused("--engine", "sglang", *TINY, "--block-size", "32", says="--block-size applies to --engine vllm")
        self.refused("--engine", "trtllm", *TINY, "--max-batched-tokens", "64",
                     says="--max-batched-tokens applies to --engine vllm")
        self.refused("--engine", "trtllm", *TINY, "--gpu-memory-utilization", "0.5",
                     says="--gpu-memory-utilization applies to --engine vllm")
        self.refused("--engine", "eager", *TINY, "--tokens-per-block", "64",
                     says="--tokens-per-block applies to --engine trtllm")
        # --engine all takes any of its rows' engines' options (vllm, sglang, trtllm, ortgenai), not eager's alone.
        self.refused("--engine", "all", *TINY, "--headroom", "10", says="--headroom applies to --engine eager (this is "
                     "--engine all)")
        for flag, value in (("--mem-fraction-static", "0.8"), ("--tokens-per-block", "64"), ("--enforce-eager", None)):
            p = run("--engine", "all", *TINY, flag, *([value] if value else []))
            self.assertNotIn("applies to --engine", p.stderr, flag)

    def test_bad_values(self):
        self.refused("--engine", "trtllm", *TINY, "--free-gpu-memory-fraction", "1",
                     says="TensorRT-LLM needs more than 0 and less than 1")
        self.refused("--engine", "sglang", "--context", "64", says="needs --gpu NAME or --memory SIZE")


if __name__ == "__main__":
    unittest.main()
