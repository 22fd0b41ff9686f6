"""`memplan serve` on tiny decoders with a KV cache (tests/models/serve/make_kv_tiny.py), numbers by hand.

The model: 2 layers, 2 heads = 2 KV heads, head_dim 4, hidden 8, vocab 16, float32; weights 768 floats (3072 B)
and two int64 shape constants of 4 and 3 elements (56 B) on the device.

On --runtime ideal every tensor the step makes is one exact buffer, so a decode step of S sequences with N tokens
in context (N - 1 cached, 1 new) peaks at layer 0's scores MatMul with, live there, the transposed keys kT
[S, 2, 4, N], the scores [S, 2, 1, N], the embedding h0 [S, 1, 8] and the queries qt [S, 2, 1, 4], all float32:
    activations = 32 S N + 8 S N + 32 S + 32 S bytes = 40 S N + 64 S
(the cache's own tensors, past inputs and present outputs, live in the paged blocks and count 0 in the step).
"""
import json
import os
import subprocess
import tempfile
import unittest

import jsonschema

BIN = os.environ["MEMPLAN_BIN"]
SRC = os.environ["MEMPLAN_SOURCE_DIR"]
MODELS = os.path.join(SRC, "tests", "models", "serve")
KV = os.path.join(MODELS, "kv_tiny.onnx")

LAYERS, KV_HEADS, HEAD_DIM, FLOAT = 2, 2, 4, 4
KV_PER_TOKEN = 2 * LAYERS * KV_HEADS * HEAD_DIM * FLOAT      # 128
WEIGHTS = (16 * 8 + LAYERS * 4 * 8 * 8 + 8 * 16) * FLOAT + (4 + 3) * 8  # 3128


def run(*args):
    # The tests below are the eager engine's unless they name one (--engine vllm: class VllmByHand).
    if args and args[0] == "serve" and "--engine" not in args and "--help" not in args:
        args = (*args, "--engine", "eager")
    return subprocess.run([BIN, *args], cwd=SRC, capture_output=True, text=True, timeout=600)


def serve_json(*args, model=KV, rc=0):
    p = run("serve", model, *args, "--json")
    assert p.returncode == rc, (p.returncode, p.stderr)
    return json.loads(p.stdout)


def decode_activations(s, n):
    """Layer 0's scores MatMul of a decode step, bytes live (see the module's docstring)."""
    return 4 * (2 * 4 * n * s) + 4 * (2 * 1 * n * s) + 4 * (1 * 8 * s) + 4 * (2 * 1 * 4 * s)


def blocks(tokens, block):
    return -(-tokens // block)


class ServeByHand(unittest.TestCase):
    def test_kv_bytes_per_token_is_the_hand_formula(self):
        for model in ("kv_tiny.onnx", "kv_tiny_renamed.onnx"):
            j = serve_json("--memory", "1GiB", "--context", "100", model=os.path.join(MODELS, model))
            self.assertEqual(j["kv_cache_bytes_per_token"], KV_PER_TOKEN)
            self.assertEqual(len(j["kv_cache"]["pairs"]), 2 * LAYERS)
        # fp16: the cache is stored as the activations are (--dtype), two bytes an element.
        j = serve_json("--memory", "1GiB", "--context", "100", "--dtype", "fp16")
        self.assertEqual(j["kv_cache_bytes_per_token"], KV_PER_TOKEN // 2)

    def test_fp8_kv_cache_is_one_byte_an_element(self):
        # vLLM's --kv-cache-dtype fp8 (and fp8_e4m3, fp8_e5m2): one byte an element, a quarter of the fp32 cache.
        for dtype in ("fp8", "fp8_e4m3", "fp8_e5m2"):
            j = serve_json("--memory", "1MiB", "--context", "100", "--max-batched-tokens", "16", "--runtime", "ideal",
                           "--kv-cache-dtype", dtype)
            self.assertEqual(j["kv_cache_bytes_per_token"], KV_PER_TOKEN // 4)
            # A sequence: 7 blocks x 16 tokens x 32 B = 3,584 B of cache, and its decode activations
            # decode_activations(1, 100) = 4,064 B: floor((1,048,576 - 3,128) / 7,648) = 136 (56 with fp32's).
            self.assertEqual(j["max_concurrent_sequences"], 136)
        self.assertEqual(run("estimate", KV, "--kv-cache-dtype", "fp8").returncode, 2)  # serve's option only

    def test_found_by_structure_with_other_names(self):
        j = serve_json("--memory", "1GiB", "--context", "100", model=os.path.join(MODELS, "kv_tiny_renamed.onnx"))
        self.assertEqual(j["kv_cache"]["cached_dim"], "cached")
        self.assertEqual(j["kv_cache"]["new_tokens_dim"], "new")
        self.assertEqual(j["kv_cache"]["pairs"][0], {"past": "cache_in_0_k", "present": "cache_out_0_k"})
        j = serve_json("--memory", "1GiB", "--context", "100")
        self.assertEqual(j["kv_cache"]["pairs"][3], {"past": "past_key_values.1.value", "present": "present.1.value"})

    def test_ideal_runtime_every_number_by_hand(self):
        budget, n, t, block = 1 << 20, 100, 16, 16
        j = serve_json("--memory", "1MiB", "--context", str(n), "--max-batched-tokens", str(t), "--runtime", "ideal")
        self.assertEqual(j["weights_bytes"], WEIGHTS)
        # Prefill of 16 tokens, nothing cached: layer 0's Softmax holds scores and probs [1, 2, T, T] and h0 [1, T, 8].
        self.assertGreaterEqual(j["prefill"]["activation_peak_bytes"], 2 * (4 * 2 * t * t) + 4 * 8 * t)
        step = lambda s, tokens: WEIGHTS + decode_activations(s, tokens)
        seq_bytes = blocks(n, block) * block * KV_PER_TOKEN
        total = lambda s: s * seq_bytes + max(j["prefill"]["required_bytes"], step(s, n))
        s = j["max_concurrent_sequences"]
        self.assertEqual(j["sequences"]["decode"]["required_bytes"], step(s, n))
        self.assertEqual(j["sequences"]["decode"]["activation_peak_bytes"], decode_activations(s, n))
        self.assertLessEqual(total(s), budget)
        self.assertGreater(total(s + 1), budget)
        self.assertEqual(s, 56)  # 18,400 B a sequence + 3,128 B: floor((1,048,576 - 3,128) / 18,400)
        # One sequence of k blocks: k x 2,048 + 3,128 + 40 x 16k + 64 <= 1 MiB.
        c = j["max_context_single_sequence"]
        single = lambda tokens: blocks(tokens, block) * block * KV_PER_TOKEN + max(j["prefill"]["required_bytes"], step(1, tokens))
        self.assertEqual(c % block, 0)
        self.assertLessEqual(single(c), budget)
        self.assertGreater(single(c + block), budget)
        self.assertEqual(c, 388 * 16)

    def test_exact_by_its_own_estimate(self):
        # PyTorch's allocator: the step's numbers are the estimate's own; the answer fits, one more does not.
        for args in (["--memory", "1GiB", "--context", "4096"], ["--gpu", "T4", "--context", "333", "--block-size", "32"],
                     ["--memory", "300MiB", "--context", "2048", "--max-batched-tokens", "512", "--headroom", "10"]):
            j = serve_json(*args)
            budget = j["budget_bytes"]
            bps = j["kv_cache"]["blocks_per_sequence"]
            self.assertEqual(bps, blocks(j["context"], j["block_size"]))
            block_bytes = j["kv_cache"]["block_bytes"]
            self.assertEqual(block_bytes, j["block_size"] * KV_PER_TOKEN)
            seq = j["sequences"]
            s = j["max_concurrent_sequences"]
            step = lambda d: max(j["prefill"]["required_bytes"], d["required_bytes"])
            self.assertEqual(seq["total_bytes"], s * bps * block_bytes + step(seq["decode"]))
            self.assertLessEqual(seq["total_bytes"], budget)
            self.assertEqual(seq["decode_next"]["batch"], s + 1)
            self.assertEqual(seq["total_bytes_next"], (s + 1) * bps * block_bytes + step(seq["decode_next"]))
            self.assertGreater(seq["total_bytes_next"], budget)
            self.assertEqual(seq["blocks"], (budget - step(seq["decode"])) // block_bytes)
            self.assertGreaterEqual(seq["blocks"], s * bps)
            one = j["single_sequence"]
            c = j["max_context_single_sequence"]
            self.assertEqual(one["decode"]["cached_tokens"], c - 1)
            self.assertEqual(one["total_bytes"], c // j["block_size"] * block_bytes + step(one["decode"]))
            self.assertLessEqual(one["total_bytes"], budget)
            self.assertEqual(one["decode_next"]["cached_tokens"], c + j["block_size"] - 1)
            self.assertGreater(one["total_bytes_next"], budget)
            for d in (j["prefill"], seq["decode"]):
                self.assertEqual(d["activation_peak_bytes"], d["required_bytes"] - j["weights_bytes"])

    def test_schema_and_catalog_table(self):
        with open(os.path.join(SRC, "docs", "schemas", "serve.schema.json")) as f:
            schema = json.load(f)
        jsonschema.validate(serve_json("--memory", "1GiB", "--context", "512"), schema)
        table = serve_json("--context", "512")
        jsonschema.validate(table, schema)
        with open(os.path.join(SRC, "report", "gpu_catalog.json")) as f:
            names = [g["name"] for g in json.load(f)["gpus"]]
        self.assertEqual([r["gpu"] for r in table["gpus"]], names)
        # Each row is the one-budget answer on that GPU.
        row = next(r for r in table["gpus"] if r["gpu"] == "T4")
        one = serve_json("--gpu", "T4", "--context", "512")
        self.assertEqual(row["max_concurrent_sequences"], one["max_concurrent_sequences"])
        self.assertEqual(row["max_context_single_sequence"], one["max_context_single_sequence"])
        self.assertEqual(row["budget_bytes"], one["budget_bytes"])
        text = run("serve", KV, "--context", "512").stdout
        self.assertIn("T4", text)
        self.assertIn("longest single", text)

    def test_a_mask_over_past_and_new_tokens_is_bound_from_them(self):
        # attention_mask [batch, "past_sequence_length + sequence_length"] is added to the scores: bound any other
        # way than cached + new, the Add would not broadcast.
        mask = os.path.join(MODELS, "kv_tiny_mask.onnx")
        j = serve_json("--memory", "1GiB", "--context", "100", model=mask)
        self.assertEqual(j["kv_cache_bytes_per_token"], KV_PER_TOKEN)
        self.assertEqual(j["kv_cache"]["cached_dim"], "past_sequence_length")
        ideal = serve_json("--memory", "1MiB", "--context", "100", "--max-batched-tokens", "16", "--runtime", "ideal",
                           model=mask)
        self.assertGreater(ideal["max_concurrent_sequences"], 0)

    def test_kv_dim_picks_one_of_several(self):
        j = serve_json("--memory", "1GiB", "--context", "64", "--kv-dim", "past_a", "--dim", "past_b=0",
                       model=os.path.join(MODELS, "kv_tiny_two_dims.onnx"))
        self.assertEqual(j["kv_cache"]["cached_dim"], "past_a")
        self.assertEqual(j["kv_cache_bytes_per_token"], KV_PER_TOKEN // 2)  # one layer's K and V

    def test_help_teaches(self):
        p = run("serve", "--help")
        self.assertEqual(p.returncode, 0)
        self.assertIn("memplan serve llama.onnx --gpu H100-80GB --context 8192", p.stdout)
        self.assertIn("GPU KV cache size", p.stdout)
        self.assertNotIn("--optimizer", p.stdout)


class EstimatePhases(unittest.TestCase):
    def test_estimate_reports_prefill_and_decode_apart(self):
        p = run("estimate", KV, "--batch", "3", "--dim", "past_sequence_length=99", "--dim", "sequence_length=16",
                "--runtime", "ideal", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        e = json.loads(p.stdout)
        with open(os.path.join(SRC, "docs", "schemas", "estimate.schema.json")) as f:
            jsonschema.validate(e, json.load(f))
        kv = e["kv_cache"]
        self.assertEqual(kv["bytes_per_token"], KV_PER_TOKEN)
        self.assertEqual(kv["decode"], {"batch": 3, "cached_tokens": 99, "new_tokens": 1,
                                        "required_bytes": WEIGHTS + decode_activations(3, 100),
                                        "activation_peak_bytes": decode_activations(3, 100),
                                        "kv_cache_bytes": 3 * 100 * KV_PER_TOKEN})
        self.assertEqual(kv["prefill"]["kv_cache_bytes"], 3 * 16 * KV_PER_TOKEN)
        # layer 0's Softmax: scores and probs [3, 2, 16, 16], h0 [3, 16, 8], float32
        self.assertGreaterEqual(kv["prefill"]["activation_peak_bytes"], 2 * 4 * 3 * 2 * 16 * 16 + 4 * 3 * 16 * 8)
        text = run("estimate", KV, "--batch", "3", "--dim", "past_sequence_length=99", "--dim", "sequence_length=16").stdout
        self.assertIn("prefill  3 x 16 new, 0 cached", text)
        self.assertIn("decode   3 x 1 new, 99 cached", text)

    def test_batch_bound_by_dim_is_counted_once(self):
        # --dim batch=B binds the batch as --batch B does. The bytes of one more cached token of one sequence do not
        # depend on B: 2 (K, V) x 2 layers x 2 KV heads x 4 head_dim x 4 bytes = 128 B; the cache of B sequences
        # after the decode of 99 cached + 1 new tokens is B x 100 x 128 B (12,800 B at B = 1, 51,200 B at B = 4).
        # Before, the batch was counted in both: 4 x 128 B a token and 4 x 4 x 100 x 128 B of cache at B = 4.
        kv = {}
        for b in (1, 4):
            p = run("estimate", KV, "--dim", f"batch={b}", "--dim", "past_sequence_length=99", "--dim",
                    "sequence_length=16", "--runtime", "ideal", "--json")
            self.assertEqual(p.returncode, 0, p.stderr)
            kv[b] = json.loads(p.stdout)["kv_cache"]
        self.assertEqual(kv[1]["bytes_per_token"], 128)
        self.assertEqual(kv[4]["bytes_per_token"], 128)
        self.assertEqual(kv[1]["decode"]["kv_cache_bytes"], 1 * 100 * 128)
        self.assertEqual(kv[4]["decode"]["kv_cache_bytes"], 4 * 100 * 128)
        self.assertEqual(kv[4]["prefill"]["kv_cache_bytes"], 4 * kv[1]["prefill"]["kv_cache_bytes"])
        self.assertEqual(kv[4]["prefill"]["kv_cache_bytes"], 4 * 16 * 128)
        # --batch 4 binds the same dimension: the same section.
        p = run("estimate", KV, "--batch", "4", "--dim", "past_sequence_length=99", "--dim", "sequence_length=16",
                "--runtime", "ideal", "--json")
        self.assertEqual(json.loads(p.stdout)["kv_cache"], kv[4])

    def test_summed_dimension_is_derived_from_its_terms(self):
        # kv_tiny_mask's attention_mask is [batch, "past_sequence_length + sequence_length"]: with its terms bound
        # (99 + 16) every command binds it to 115, as the user would by hand. Before, estimate refused the model
        # ("unbound dimension") until the sum was bound too.
        mask = os.path.join(MODELS, "kv_tiny_mask.onnx")
        parts = ["--batch", "2", "--dim", "past_sequence_length=99", "--dim", "sequence_length=16"]
        by_hand = [*parts, "--dim", "past_sequence_length + sequence_length=115"]
        for command in (["estimate", "--runtime", "ideal"], ["plan"], ["inspect"]):
            derived = run(command[0], mask, *command[1:], *parts, "--json")
            self.assertEqual(derived.returncode, 0, (command, derived.stderr))
            hand = run(command[0], mask, *command[1:], *by_hand, "--json")
            self.assertEqual(hand.returncode, 0, (command, hand.stderr))
            self.assertEqual(json.loads(derived.stdout), json.loads(hand.stdout), command)
        e = json.loads(run("estimate", mask, *parts, "--json").stdout)
        self.assertEqual(e["kv_cache"]["bytes_per_token"], KV_PER_TOKEN)
        self.assertEqual(e["kv_cache"]["decode"]["kv_cache_bytes"], 2 * 100 * KV_PER_TOKEN)
        inputs = {i["name"]: i["shape"] for i in json.loads(run("inspect", mask, *parts, "--json").stdout)["inputs"]}
        self.assertEqual(inputs["attention_mask"], [2, 99 + 16])
        # A term left free: the sum cannot be derived, and the message names it and the free term (exit 2).
        p = run("estimate", mask, "--batch", "2", "--dim", "sequence_length=16")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("'past_sequence_length + sequence_length', the sum of its terms): bind past_sequence_length",
                      p.stderr)

    def test_no_kv_section_without_a_cache(self):
        for model, dims in ((os.path.join(MODELS, "no_kv_tiny.onnx"), ["--dim", "sequence_length=4"]),
                            (os.path.join(SRC, "tests", "models", "gpt_tiny.onnx"), ["--dim", "seq=8"])):
            p = run("estimate", model, "--batch", "2", *dims, "--json")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertNotIn("kv_cache", json.loads(p.stdout))


class ZooDecoders(unittest.TestCase):
    """The zoo's tiny Llama exported with its cache twice (tests/models/export_llama_kv.py): plain, and optimum's
    merged decoder whose If takes the cached branch at use_cache_branch=1. tests/models/llama.py's llama_tiny:
    4 layers, 2 KV heads of 128 / 4 = 32, untied head, float32."""

    ZOO = os.path.join(SRC, "tests", "models")
    KV_PER_TOKEN = 2 * 4 * 2 * 32 * 4  # 2048
    PARAMS = 2 * 1000 * 128 + 4 * (2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 352 + 2 * 128) + 128  # 994,432

    def serve(self, name, *extra):
        return serve_json("--memory", "1GiB", "--context", "100", "--tied-embeddings", "no", *extra,
                          model=os.path.join(self.ZOO, name))

    def test_plain_decoder_by_hand(self):
        j = self.serve("llama_tiny_kv.onnx")
        self.assertEqual(j["kv_cache_bytes_per_token"], self.KV_PER_TOKEN)
        self.assertGreaterEqual(j["weights_bytes"], self.PARAMS * 4)
        self.assertLess(j["weights_bytes"] - self.PARAMS * 4, 1024)  # plus the graph's small constants

    def test_merged_decoder_serves_as_the_plain_one(self):
        # The present tensors are made inside the inlined branch and reach the If's outputs through Identity:
        # they are the cache, held apart, not activations of the decode step.
        plain = self.serve("llama_tiny_kv.onnx")
        merged = self.serve("llama_tiny_kv_merged.onnx", "--value", "use_cache_branch=1")
        for key in ("kv_cache_bytes_per_token", "weights_bytes", "max_concurrent_sequences",
                    "max_context_single_sequence"):
            self.assertEqual(merged[key], plain[key], key)


def tiny_llama_config(directory, **overrides):
    """A llama config.json of 2 layers, 4 query heads, 2 KV heads, head_dim 4 (hidden 16), vocab 64, fp16."""
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 16,
              "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "vocab_size": 64, "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
              "tie_word_embeddings": False, "torch_dtype": "float16", "hidden_act": "silu"}
    config.update(overrides)
    path = os.path.join(directory, "config.json")
    with open(path, "w") as f:
        json.dump(config, f)
    return path


class VllmByHand(unittest.TestCase):
    """serve --engine vllm on kv_tiny: every term of vLLM's start-up budget by hand (cost_models/vllm_engine.h).

    kv_tiny is stored in float32; vLLM's --dtype auto serves it in bfloat16 on sm90 (the default arch), d = 2.
    --memory 64MiB --reserve 0 --context 64 --max-batched-tokens 64 --max-num-seqs 64:
      requested   = int(67,108,864 x 0.9) = 60,397,977
      weights     = 768 x 2 = 1,536 (the int64 shape constants are Python ints in PyTorch), and the vocabulary
                    padded from 16 to 64 rows (vLLM's pad_vocab_size) in the embedding [64, 8] and the untied
                    head [8, 64]: 2 x 48 x 8 x 2 = 1,536 more, 3,072
      KV          = 2 (K, V) x 2 layers x 2 KV heads x 4 head_dim x 2 = 64 B a token, 1,024 B a block of 16
      profile run = 64 tokens over min(64, 64) = 64 dummy requests; the sampler's warm-up on 64 rows of 16 logits
                    (the head's 64 wide) while the weights, PyTorch's cuBLAS workspace (32 MiB on sm90) and the
                    hidden states [64, 8] (1,024) are allocated: 2 x 64 x 64 + 26 x 64 x 16 + 2 x 2 x 64 x 8 =
                    36,864, above the forward's peak (the tiny forward holds a few KiB beside the workspace)
      peak        = 3,072 + 33,554,432 + 1,024 + 36,864 = 33,595,392; activation peak = that - 3,072
      available   = 60,397,977 - 33,595,392 = 26,802,585 B: 26,174 blocks (409 B left), 418,784 tokens; a
                    64-token request takes 4 blocks: 26,174 / 4 = 6,543.5
    """
    ARGS = ["--memory", "64MiB", "--reserve", "0", "--context", "64", "--max-batched-tokens", "64",
            "--max-num-seqs", "64"]

    def vllm(self, *args, model=KV, rc=0):
        return serve_json("--engine", "vllm", *args, model=model, rc=rc)

    def test_every_term_of_the_budget(self):
        j = self.vllm(*self.ARGS)
        m, p = j["memory"], j["profile_run"]
        self.assertEqual(m["requested_bytes"], 60397977)
        self.assertEqual(m["weights_bytes"], 768 * 2 + 2 * 48 * 8 * 2)
        self.assertEqual(m["vocab_padding_bytes"], 2 * 48 * 8 * 2)
        self.assertEqual(j["settings"]["dtype"], "bfloat16")
        self.assertEqual(p["requests"], 64)
        self.assertEqual(p["hidden_states_bytes"], 64 * 8 * 2)
        self.assertEqual(p["logits_width"], 64)
        self.assertEqual(p["sampler_peak_bytes"], 2 * 64 * 64 + 26 * 64 * 16 + 2 * 2 * 64 * 8)
        self.assertEqual(p["cublas_workspace_bytes"], 32 << 20)
        self.assertEqual(p["peak_set_by"], "sampler")
        self.assertGreater(3072 + (32 << 20) + 1024 + 36864, p["forward_peak_allocated_bytes"])
        self.assertEqual(m["activation_peak_bytes"], (32 << 20) + 1024 + 36864)
        self.assertEqual(m["non_torch_bytes"], 0)
        self.assertEqual(m["available_kv_cache_bytes"], 26802585)
        self.assertEqual(j["num_gpu_blocks"], 26174)
        self.assertEqual(j["gpu_kv_cache_tokens"], 418784)
        self.assertEqual(j["max_concurrency"], 6543.5)
        self.assertEqual(j["max_concurrent_sequences"], 6543)
        # One block more would need more than is available.
        self.assertGreater((j["num_gpu_blocks"] + 1) * 16 * 64, m["available_kv_cache_bytes"])
        # --reserve is vLLM's non-torch memory: 1 MiB of it, 1,024 blocks fewer.
        less = self.vllm(*[a if a != "0" else "1MiB" for a in self.ARGS])
        self.assertEqual(less["memory"]["available_kv_cache_bytes"], 26802585 - (1 << 20))
        self.assertEqual(less["num_gpu_blocks"], 26174 - 1024)
        text = run("serve", KV, "--engine", "vllm", *self.ARGS).stdout
        self.assertIn("GPU KV cache size: 418,784 tokens", text)
        self.assertIn("Maximum concurrency for 64 tokens per request: 6543.50x", text)

    def test_what_the_kernels_replace_is_named(self):
        j = self.vllm(*self.ARGS)
        self.assertEqual(j["replaced"]["lm_head"], "MatMul_39")  # the head's MatMul (make_kv_tiny.py's last node)
        self.assertEqual(j["replaced"]["attention_kernels"], 2)
        self.assertEqual(j["replaced"]["repeat_kv"], [])  # 2 heads = 2 KV heads: nothing expanded

    def test_tensor_parallel_kv_heads_sharded_or_replicated(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            config = tiny_llama_config(d)
            base = ["--graph", "decode", "--memory", "1GiB", "--reserve", "0", "--context", "64", "--dtype", "fp16"]
            one = self.vllm(*base, model=config)
            # 2 (K, V) x 2 layers x 2 KV heads x 4 head_dim x 2 B (fp16) = 64 B a token.
            self.assertEqual(one["kv_cache"]["bytes_per_token"], 64)
            two = self.vllm(*base, "--tp", "2", model=config)
            self.assertEqual(two["kv_cache"]["kv_heads_per_rank"], 1)
            self.assertEqual(two["kv_cache"]["bytes_per_token"], 32)
            # tp 4 > 2 KV heads: each rank holds one KV head (replicated on 2 ranks), 4 query heads split 1 each.
            four = self.vllm(*base, "--tp", "4", model=config)
            self.assertEqual(four["kv_cache"]["kv_heads_per_rank"], 1)
            self.assertEqual(four["kv_cache"]["bytes_per_token"], 32)
            # Weights per rank, fp16, by hand: whole, per layer q 16x16, k and v 16x8, o 16x16, gate and up 16x32,
            # down 32x16, two norms of 16: 2,336 elements; x 2 layers + embedding 64x16 + head 16x64 + norm 16 =
            # 6,736 elements = 13,472 B. At tp 4 each rank holds a quarter of q, o, gate, up, down, the embedding
            # and the head, one whole KV head of k and v (16x4 each, replicated) and the norms whole:
            # (64 + 64 + 64 + 64 + 128 + 128 + 128 + 32) x 2 + 256 + 256 + 16 = 1,872 elements = 3,744 B.
            self.assertEqual(one["memory"]["weights_bytes"] - four["memory"]["weights_bytes"], 13472 - 3744)
            self.assertEqual(one["replaced"]["repeat_kv"].__len__(), 4)  # keys and values of 2 layers expanded
            # fp8 KV: one byte an element, half the fp16 cache.
            fp8 = self.vllm(*base, "--kv-cache-dtype", "fp8", model=config)
            self.assertEqual(fp8["kv_cache"]["bytes_per_token"], 32)
            # No --context: vLLM's max_model_len is the config's max_position_embeddings.
            limit = self.vllm("--graph", "decode", "--memory", "1GiB", "--reserve", "0", model=config)
            self.assertEqual(limit["settings"]["max_model_len"], 256)
            p = run("serve", config, "--engine", "vllm", "--graph", "decode", "--memory", "1GiB", "--context", "512")
            self.assertEqual(p.returncode, 2)
            self.assertIn("over the model's maximum position, 256", p.stderr)
            p = run("serve", config, "--engine", "vllm", "--graph", "decode", "--memory", "1GiB", "--tp", "3")
            self.assertEqual(p.returncode, 2)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)

    def test_vllm_option_names_are_aliases(self):
        # A `vllm serve` command line's names: --max-model-len, --max-num-batched-tokens and --tensor-parallel-size
        # are --context, --max-batched-tokens and --tp, the same answer byte for byte.
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            config = tiny_llama_config(d)
            base = ["serve", config, "--engine", "vllm", "--graph", "decode", "--memory", "1GiB", "--reserve", "0",
                    "--json"]
            ours = run(*base, "--context", "64", "--max-batched-tokens", "128", "--tp", "2")
            vllms = run(*base, "--max-model-len", "64", "--max-num-batched-tokens", "128", "--tensor-parallel-size", "2")
            self.assertEqual(ours.returncode, 0, ours.stderr)
            self.assertEqual(vllms.returncode, 0, vllms.stderr)
            self.assertEqual(ours.stdout, vllms.stdout)
            j = json.loads(vllms.stdout)
            self.assertEqual(j["settings"]["max_model_len"], 64)
            self.assertEqual(j["kv_cache"]["kv_heads_per_rank"], 1)

    def test_a_cache_without_kv_heads_refuses_tensor_parallelism(self):
        # kv_tiny_merged caches keys and values before the head split ([batch, tokens, hidden]): its bytes per token
        # are there by hand, 2 (K, V) x 2 layers x hidden 8 x 2 B (bf16, vLLM's dtype auto on the default sm90) =
        # 64, but no KV-head count to shard by (vLLM replicates or splits KV heads), so --tp is one message, exit 2.
        merged = os.path.join(MODELS, "kv_tiny_merged.onnx")
        j = self.vllm(*self.ARGS, model=merged)
        self.assertEqual(j["kv_cache"]["bytes_per_token"], 64)
        p = run("serve", merged, "--engine", "vllm", *self.ARGS, "--tp", "2")
        self.assertEqual(p.returncode, 2)
        self.assertEqual(p.stderr, "memplan: error: --tp 2: the KV heads of " + merged + " are not found (past inputs "
                                   "shaped [batch, kv_heads, tokens, head_dim])\n")

    def test_lora_stacks_by_hand(self):
        # --enable-lora --max-loras 2 --max-lora-rank 8, fp16 (d = 2): every adapted linear layer holds
        # 2 slots x 8 x (in + out) x 2 B (vLLM's lora_a [2, 1, 8, in] and lora_b [2, 1, out, 8]). Per block of the
        # tiny config, (in + out): q 16+16, k 16+8, v 16+8, o 16+16, gate 16+32, up 16+32, down 32+16 = 256; x 2
        # blocks = 512; 2 x 8 x 512 x 2 = 16,384 B. At tp 2 the column-parallel layers keep in whole and half
        # their out (q 16+8, k 16+4, v 16+4, gate 16+16, up 16+16), the row-parallel ones half their in (o 8+16,
        # down 16+16): 184 a block, 368 in all, 11,776 B. The LM head is not adapted.
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            config = tiny_llama_config(d)
            base = ["--graph", "decode", "--memory", "1GiB", "--reserve", "0", "--context", "64", "--dtype", "fp16"]
            plain = self.vllm(*base, model=config)
            lora = ["--enable-lora", "--max-loras", "2", "--max-lora-rank", "8"]
            one = self.vllm(*base, *lora, model=config)
            self.assertEqual(one["memory"]["lora_stacks_bytes"], 16384)
            self.assertEqual(one["memory"]["weights_bytes"], plain["memory"]["weights_bytes"] + 16384)
            self.assertEqual(one["memory"]["available_kv_cache_bytes"], plain["memory"]["available_kv_cache_bytes"] - 16384)
            self.assertEqual(self.vllm(*base, *lora, "--tp", "2", model=config)["memory"]["lora_stacks_bytes"], 11776)
            p = run("serve", config, "--graph", "decode", "--memory", "1GiB", "--context", "64", "--max-loras", "2")
            self.assertEqual(p.returncode, 2)
            self.assertIn("--max-loras and --max-lora-rank need --enable-lora", p.stderr)

    def test_rotary_cache_counted_where_the_position_limit_is_known(self):
        # vLLM's cos_sin_cache [max_position_embeddings, head_dim] in the model's type: 256 x 4 x 2 B = 2,048 B for
        # the tiny config in fp16, in the weights; an ONNX file states no position limit and counts none.
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            config = tiny_llama_config(d)
            base = ["--graph", "decode", "--memory", "1GiB", "--reserve", "0", "--context", "64", "--dtype", "fp16"]
            vllm = self.vllm(*base, model=config)
            eager = serve_json(*base, model=config)  # the graph's own weights, the same dtype
            self.assertEqual(vllm["memory"]["rotary_cache_bytes"], 256 * 4 * 2)
            self.assertEqual(vllm["memory"]["weights_bytes"], eager["weights_bytes"] + 256 * 4 * 2)
        self.assertEqual(self.vllm(*self.ARGS)["memory"]["rotary_cache_bytes"], 0)

    def test_vocabulary_padded_to_a_multiple_of_64(self):
        # vLLM pads the vocabulary to a multiple of 64 before splitting it over tp (vocab_parallel_embedding.py,
        # pad_vocab_size). The tiny config with vocab 50, fp16 (d = 2): 64 rows, 14 padding rows of 16 in the
        # embedding and 14 in the untied head, 2 x 14 x 16 x 2 = 896 B; tied, the head is the embedding: 448 B.
        # tp 2: each rank holds 64 / 2 = 32 rows where the graph's plan holds ceil(50 / 2) = 25: 2 x 7 x 16 x 2 = 448 B.
        # The sampler's warm-up (--max-num-seqs 4, --max-batched-tokens 16: 4 rows, hidden 16): the head's logits
        # 4 x 64 x 2 = 512 B, its copies 26 x 4 x 50 = 5,200 B, the hidden rows 2 x 2 x 4 x 16 = 256 B.
        import tempfile
        base = ["--graph", "decode", "--memory", "1GiB", "--reserve", "0", "--context", "64", "--dtype", "fp16",
                "--max-num-seqs", "4", "--max-batched-tokens", "16"]
        with tempfile.TemporaryDirectory() as d:
            fifty = self.vllm(*base, model=tiny_llama_config(d, vocab_size=50))
            self.assertEqual(fifty["memory"]["vocab_padding_bytes"], 896)
            self.assertEqual(fifty["profile_run"]["logits_width"], 64)
            self.assertEqual(fifty["profile_run"]["sampler_peak_bytes"], 512 + 5200 + 256)
            self.assertEqual(self.vllm(*base, "--tp", "2", model=tiny_llama_config(d, vocab_size=50))
                             ["memory"]["vocab_padding_bytes"], 448)
            tied = self.vllm(*base, model=tiny_llama_config(d, vocab_size=50, tie_word_embeddings=True))
            self.assertEqual(tied["memory"]["vocab_padding_bytes"], 448)
            # The padding rows are weights: the tied head's 50 x 16 x 2 = 1,600 B fewer and 448 B fewer padded.
            self.assertEqual(fifty["memory"]["weights_bytes"] - tied["memory"]["weights_bytes"], 1600 + 448)
            sixty_four = self.vllm(*base, model=tiny_llama_config(d))  # a multiple of 64: nothing padded
            self.assertEqual(sixty_four["memory"]["vocab_padding_bytes"], 0)
            # Padded, vocab 50 holds the rows vocab 64 holds: the same weights.
            self.assertEqual(sixty_four["memory"]["weights_bytes"], fifty["memory"]["weights_bytes"])
            # tp 3 divides 6 heads and 3 KV heads but not the 64 padded rows: vLLM's divide fails, one message.
            three = tiny_llama_config(d, vocab_size=50, hidden_size=24, num_attention_heads=6, num_key_value_heads=3,
                                      intermediate_size=48)
            p = run("serve", three, "--engine", "vllm", *base, "--tp", "3")
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("--tp 3 does not divide the padded vocabulary", p.stderr)
            self.assertIn("64 rows (50 padded to a multiple of 64", p.stderr)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)

    def test_quantized_linear_layers_by_hand(self):
        # The tiny config in fp16 (d = 2): its linear layers hold 2 x (q 16x16 + k, v 16x8 + o 16x16 + gate, up 16x32
        # + down 32x16) = 4,608 elements, 9,216 B, which vLLM's quantization methods replace (embedding, head and
        # norms stay fp16). vLLM's modules per block: qkv (in 16, out 32), o (16, 16), gate_up (16, 64), down (32, 16).
        #  fp8 (dynamic): 4,608 B of float8 and one float32 scale per module, 8 x 4 = 32 B: 4,640 B.
        #  gptq, 4 bits, groups of 8 (qweight [in/8, out] int32, scales [in/8, out] fp16, qzeros [in/8, out/8]
        #  int32): qkv 256 + 128 + 32 = 416, o 128 + 64 + 16 = 208, gate_up 512 + 256 + 64 = 832, down 256 + 128 + 32
        #  = 416: 1,872 a block, 3,744 B. awq (qweight [in, out/8], the same scales and zeros): the same 3,744 B.
        #  gptq with desc_act: g_idx [in] int32 per module, 64 + 64 + 64 + 128 = 320 a block: 4,384 B.
        #  gptq at tp 2: qkv in 16 out 16: 208; o row-parallel in 8 out 16, scales over its 8 inputs: 64 + 32 + 8 =
        #  104; gate_up in 16 out 32: 416; down in 16 out 16: 208: 936 a block, 1,872 B. With desc_act the
        #  row-parallel layers keep the whole input's scales (vLLM's exllama is unused): o 64 + 64 + 16 + 32 = 176,
        #  down 128 + 128 + 32 + 64 = 352, qkv 208 + 64, gate_up 416 + 64: 1,280 a block, 2,560 B.
        import tempfile
        base = ["--graph", "decode", "--memory", "1GiB", "--reserve", "0", "--context", "64", "--dtype", "fp16",
                "--max-num-seqs", "4", "--max-batched-tokens", "16"]
        group = ["--quant-group-size", "8"]
        with tempfile.TemporaryDirectory() as d:
            config = tiny_llama_config(d)
            plain = self.vllm(*base, model=config)["memory"]
            self.assertIsNone(plain["quantized_linear_bytes"])
            for args, linear in ((["--quantization", "fp8"], 4640), (["--quantization", "gptq", *group], 3744),
                                 (["--quantization", "awq", *group], 3744)):
                j = self.vllm(*base, *args, model=config)
                self.assertEqual(j["settings"]["quantization"], args[1])
                self.assertEqual(j["memory"]["quantized_linear_bytes"], linear)
                self.assertEqual(j["memory"]["weights_bytes"], plain["weights_bytes"] - 9216 + linear, args)
                self.assertEqual(j["memory"]["available_kv_cache_bytes"],
                                 plain["available_kv_cache_bytes"] + 9216 - linear, args)
            two = self.vllm(*base, "--tp", "2", "--quantization", "gptq", *group, model=config)
            self.assertEqual(two["memory"]["quantized_linear_bytes"], 1872)
            act_order = tiny_llama_config(d, quantization_config={"quant_method": "gptq", "bits": 4, "group_size": 8,
                                                                  "desc_act": True, "damp_percent": 0.01})
            self.assertEqual(self.vllm(*base, model=act_order)["memory"]["quantized_linear_bytes"], 4384)
            self.assertEqual(self.vllm(*base, "--tp", "2", model=act_order)["memory"]["quantized_linear_bytes"], 2560)
            static = tiny_llama_config(d, quantization_config={"quant_method": "fp8", "activation_scheme": "static"})
            self.assertEqual(self.vllm(*base, model=static)["memory"]["quantized_linear_bytes"], 4640 + 32)
            # awq dequantizes each layer's weight when a step has 256 tokens or more: the largest, gate_up's
            # 16 x 64 x 2 = 2,048 B, on the profile's forward peak, which gptq (the same 3,744 B held) does not have.
            config = tiny_llama_config(d)  # the same file, without the quantization_config again
            big = [a if a != "16" else "256" for a in base]
            awq = self.vllm(*big, "--quantization", "awq", *group, model=config)["profile_run"]
            gptq = self.vllm(*big, "--quantization", "gptq", *group, model=config)["profile_run"]
            self.assertEqual(awq["forward_peak_allocated_bytes"] - gptq["forward_peak_allocated_bytes"], 2048)

    def test_quantization_refusals(self):
        import tempfile
        base = ["--graph", "decode", "--memory", "1GiB", "--context", "64"]  # the config's float16
        with tempfile.TemporaryDirectory() as d:
            gptq = tiny_llama_config(d, quantization_config={"quant_method": "gptq", "bits": 4, "group_size": 8,
                                                             "desc_act": False})
            for args, phrase in ((["--quantization", "awq"], "quantization_config is gptq"),
                                 (["--quant-group-size", "5"], "--quant-bits and --quant-group-size need"),
                                 (["--quantization", "gptq", "--dtype", "bf16"], "serves in float16"),
                                 (["--engine", "eager"], "modelled by serve --engine vllm and sglang only")):
                p = run("serve", gptq, *(args if args[0] == "--engine" else ["--engine", "vllm", *args]), *base)
                self.assertEqual(p.returncode, 2, (args, p.stderr))
                self.assertIn(phrase, p.stderr)
                self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
            # Without the flag vLLM serves a config's gptq as gptq_marlin, which runs bfloat16 too.
            self.assertEqual(self.vllm(*base, "--reserve", "0", "--dtype", "bf16", model=gptq)["settings"]["dtype"], "bfloat16")
            p = run("estimate", gptq, "--graph", "decode")
            self.assertEqual(p.returncode, 2)
            self.assertIn("config key \"quantization_config\" (gptq) is modelled by serve --engine vllm and sglang only", p.stderr)
            # gpt-oss's MXFP4: vLLM's and SGLang's layouts are sized (TensorRT-LLM's are not).
            p = run("estimate", os.path.join(SRC, "tests", "models", "hf_configs", "gpt-oss-20b.json"), "--graph", "decode")
            self.assertEqual(p.returncode, 2)
            self.assertIn("config key \"quantization_config\" (mxfp4) is modelled by serve --engine vllm and sglang only",
                          p.stderr)
            plain = tiny_llama_config(d)
            for args, phrase in ((["--quantization", "gptq", "--quant-group-size", "5"], "not a multiple of group_size 5"),
                                 (["--quantization", "gptq", "--dtype", "bf16"], "serves in float16"),
                                 (["--quantization", "awq", "--quant-bits", "8"], "vLLM's AWQ stores 4"),
                                 (["--quantization", "fp8", "--arch", "sm86"], "FP8 Marlin"),
                                 (["--engine", "eager", "--quantization", "fp8"], "--quantization applies to --engine vllm")):
                p = run("serve", plain, *(args if args[0] == "--engine" else ["--engine", "vllm", *args]), *base)
                self.assertEqual(p.returncode, 2, (args, p.stderr))
                self.assertIn(phrase, p.stderr)
            # The catalog table answers the GPUs fp8 runs on; vLLM refuses fp8 below 8.0 (T4: "no start"), and runs
            # FP8 Marlin, not sized, from 8.0 to 8.9 (A100: "not modelled"); each such row says why.
            table = self.vllm("--graph", "decode", "--reserve", "0", "--quantization", "fp8", model=plain)
            with open(os.path.join(SRC, "docs", "schemas", "serve.vllm.schema.json")) as f:
                jsonschema.validate(table, json.load(f))
            rows = {r["gpu"]: r for r in table["gpus"]}
            self.assertIn("vLLM needs 8.0", rows["T4"]["not_answered"])
            self.assertIn("FP8 Marlin", rows["A100-80GB"]["not_answered"])
            self.assertNotIn("not_answered", rows["H100-80GB"])
            self.assertTrue(rows["H100-80GB"]["starts"])
            text = run("serve", plain, "--engine", "vllm", "--graph", "decode", "--reserve", "0", "--quantization",
                       "fp8").stdout
            self.assertRegex(text, r"T4 .* no start")
            self.assertRegex(text, r"A100-80GB .* not modelled")
            bad = tiny_llama_config(d, quantization_config={"quant_method": "bitnet"})
            p = run("serve", bad, "--engine", "vllm", *base)
            self.assertEqual(p.returncode, 2)
            self.assertIn("quant_method \"bitnet\" is not modelled", p.stderr)

    def test_engine_version_0_8_by_hand(self):
        # vLLM 0.8's V1 worker (gpu_worker.py determine_available_memory at 0012cf6): int(total x 0.9 - absolute
        # peak - every non-torch byte). Its runner frees the forward's [64, 8] hidden states (1,024 B) before the
        # sampler: peak = 3,072 + 33,554,432 + 36,864 = 33,594,368 (1,024 B under the current rule's), available =
        # 60,397,977 - 33,594,368 = 26,803,609 B: 26,175 blocks (409 B left), 418,800 tokens, 6,543.75 requests of 64.
        j = self.vllm(*self.ARGS, "--engine-version", "0.8")
        m = j["memory"]
        self.assertEqual(j["settings"]["engine_version"], "0.8")
        self.assertIn("absolute peak", j["engine_rules"])
        self.assertEqual(m["weights_bytes"] + m["activation_peak_bytes"], 33594368)
        self.assertEqual(m["available_kv_cache_bytes"], 26803609)
        self.assertEqual(j["num_gpu_blocks"], 26175)
        self.assertEqual(j["gpu_kv_cache_tokens"], 418800)
        self.assertEqual(j["max_concurrency"], 6543.75)
        # --reserve is every byte outside PyTorch under 0.8: 1 MiB of it, 1,024 blocks fewer.
        less = self.vllm(*[a if a != "0" else "1MiB" for a in self.ARGS], "--engine-version", "0.8")
        self.assertEqual(less["num_gpu_blocks"], 26175 - 1024)
        # 0.9.0 and 0.9.0.1 ran 0.8's worker and runner (cost_models/vllm_engine.h V0_8: main still added
        # (total - free) - allocated to the absolute peak in May 2025, and 0.9.0.1's profile_run took one value from
        # _dummy_run): every term the same, and the rule's name says so.
        for version in ("0.9.0", "0.9.0.1"):
            j09 = self.vllm(*self.ARGS, "--engine-version", version)
            self.assertEqual(j09["memory"], m, version)
            self.assertEqual(j09["profile_run"], j["profile_run"], version)
            self.assertEqual(j09["num_gpu_blocks"], 26175, version)
            self.assertEqual(j09["engine_rules"], j["engine_rules"], version)
            self.assertIn("vLLM 0.8 to 0.9.0 V1", j09["engine_rules"])
        # 0.11 to 0.19 are the current rule: the class docstring's 26,174 blocks to 0.16. From 0.17 the sampler's
        # warm-up is the Triton kernel's: 12 bytes a logit and a 64-row buffer (--memory: next_power_of_2(64) rows)
        # of the 16-token vocabulary in place of the sort's 26, 64 x 16 x (26 - 12 - 4) = 10,240 B less at the peak
        # the sampler sets: 10 blocks of 1,024 B more.
        for version in ("0.11", "0.15.1", "0.16.1"):
            self.assertEqual(self.vllm(*self.ARGS, "--engine-version", version)["num_gpu_blocks"], 26174)
        for version in ("0.17.1", "0.19.1"):
            self.assertEqual(self.vllm(*self.ARGS, "--engine-version", version)["num_gpu_blocks"], 26174 + 10)
        text = run("serve", KV, "--engine", "vllm", *self.ARGS, "--engine-version", "0.8").stdout
        self.assertIn("served by vLLM 0.8 (V1 rules: the profile's whole peak and all non-torch memory)", text)
        self.assertIn("GPU KV cache size: 418,800 tokens", text)
        for args, phrase in ((["--engine-version", "0.6"], "give the patch"),
                             (["--engine-version", "0.5.4"], "V0 engine before 0.6"),
                             (["--engine-version", "0.9"], "PR #19312"),
                             (["--engine-version", "0.21"], "add --enforce-eager"),
                             (["--engine-version", "0.20.0"], "from 0.20 vLLM's V1 runner subtracts"),
                             (["--engine-version", "v1"], "expected a vLLM version such as 0.11")):
            p = run("serve", KV, "--engine", "vllm", *self.ARGS, *args)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertIn(phrase, p.stderr)
            if args[1] not in ("0.21", "0.20.0"):
                self.assertIn("memplan models 0.6.0 to 0.6.4 (the V0 engine's absolute rule), 0.6.5 to 0.6.x and "
                              "0.7.x (V0 over PR #10511's baseline and PR #12126's snapshot), 0.8 and 0.9.0 (the V1 "
                              "worker's absolute rule), 0.9.1 to 0.10.x (the baseline rule, NCCL after the snapshot), "
                              "0.11 to 0.19", p.stderr)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        p = run("serve", KV, "--engine", "vllm", "--memory", "64MiB", "--context", "64", "--engine-version", "0.8")
        self.assertEqual(p.returncode, 2)
        self.assertIn("needs --max-batched-tokens and --max-num-seqs", p.stderr)
        p = run("serve", KV, "--memory", "64MiB", "--context", "64", "--engine-version", "0.8")  # eager
        self.assertEqual(p.returncode, 2)
        self.assertIn("--engine-version applies to --engine vllm", p.stderr)

    def test_engine_version_0_6_v0_by_hand(self):
        # vLLM's V0 engine, 0.6.0 to 0.6.4 (cost_models/vllm_engine.h V0_6): Worker.determine_num_available_blocks
        # (worker.py at 6ae5229) charges the absolute peak and every non-torch byte, as 0.8 does. Its profile run
        # (model_runner.py at 587909c) is 64 prompts of one token each (64 // 64), attention by the kernel, then
        # the logits at each prompt's last token while execute_model holds the [64, 8] hidden states (1,024 B in
        # bfloat16, --dtype bf16: V0's auto type for a float32 checkpoint is not read at 0.6), then V0's sampler
        # (sampler.py at 467f7b5) on 64 rows of 16 logits (the head 64 wide), all alive at _apply_top_k_top_p's
        # scatter: the head's logits 2 x 64 x 64 = 8,192; per logit the float32 copy 4, sort values 4 and indices
        # 8, the top-k mask 1, softmax 4, cumsum 4, the top-p mask 1, the scatter's output 4: 30 x 1,024 = 30,720;
        # 38,912 in all. peak = 3,072 (weights) + 33,554,432 (cuBLAS workspace, sm90) + 1,024 + 38,912 =
        # 33,597,440; available = int(67,108,864 x 0.9) - peak = 60,397,977 - 33,597,440 = 26,800,537 B:
        # 26,800,537 // 1,024 = 26,172 blocks (409 B left), 418,752 tokens, 26,172 / 4 = 6,543 requests of 64.
        v0 = [*self.ARGS, "--dtype", "bf16", "--engine-version", "0.6.3"]
        j = self.vllm(*v0)
        m, p = j["memory"], j["profile_run"]
        self.assertIn("V0", j["engine_rules"])
        self.assertEqual(p["requests"], 64)
        self.assertEqual(p["hidden_states_bytes"], 1024)
        self.assertEqual(p["sampler_peak_bytes"], 38912)
        self.assertEqual(p["peak_set_by"], "sampler")
        self.assertEqual(m["weights_bytes"] + m["activation_peak_bytes"], 33597440)
        self.assertEqual(m["available_kv_cache_bytes"], 26800537)
        self.assertEqual(j["num_gpu_blocks"], 26172)
        self.assertEqual(j["gpu_kv_cache_tokens"], 418752)
        self.assertEqual(j["max_concurrency"], 6543.0)
        # --reserve is every non-torch byte, as under 0.8: 1 MiB of it, 1,024 blocks fewer.
        less = self.vllm(*[a if a != "0" else "1MiB" for a in v0])
        self.assertEqual(less["num_gpu_blocks"], 26172 - 1024)
        # V0's defaults (SchedulerConfig at c0c2335, EngineArgs): max(64, 2048) = 2,048 tokens over 256 prompts
        # of 8; the sampler on 256 rows: 2 x 256 x 64 + 30 x 256 x 16 = 32,768 + 122,880 = 155,648; the hidden
        # states [2,048, 8] in bfloat16: 32,768.
        d = self.vllm("--memory", "64MiB", "--reserve", "0", "--context", "64", "--dtype", "bf16",
                      "--engine-version", "0.6.4.post1")
        self.assertEqual((d["settings"]["max_num_batched_tokens"], d["settings"]["max_num_seqs"]), (2048, 256))
        self.assertTrue(d["settings"]["max_num_batched_tokens_default"] and d["settings"]["max_num_seqs_default"])
        self.assertEqual((d["profile_run"]["requests"], d["profile_run"]["sampler_peak_bytes"]), (256, 155648))
        self.assertEqual(d["profile_run"]["hidden_states_bytes"], 32768)
        text = run("serve", KV, "--engine", "vllm", *v0).stdout
        self.assertIn("served by vLLM 0.6.3 (V0 rules: the profile's whole peak and all non-torch memory)", text)
        self.assertIn("# GPU blocks: 26172\nGPU KV cache size: 418,752 tokens", text)
        with tempfile.TemporaryDirectory() as tmp:
            llama = tiny_llama_config(tmp)
            for args, phrase in (([*self.ARGS, "--engine-version", "0.6.3"], "give --dtype"),
                                 ([*v0, "--enable-lora"], "activates max_loras dummy adapters"),
                                 (["--memory", "64MiB", "--context", "40000", "--dtype", "bf16", "--engine-version",
                                   "0.6.3"], "chunked prefill on by default"),
                                 ([*self.ARGS[:6], "--max-batched-tokens", "32", "--max-num-seqs", "8", *v0[-4:]],
                                  "is under max_model_len 64"),
                                 ([*v0, "--tp", "2", "--data-parallel-size", "2"], "data parallelism is not modelled")):
                p = run("serve", KV, "--engine", "vllm", *args)
                self.assertEqual(p.returncode, 2, (args, p.stderr))
                self.assertIn(phrase, p.stderr)
                self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
            p = run("serve", llama, "--engine", "vllm", "--graph", "decode", "--memory", "1GiB", "--context", "64",
                    "--engine-version", "0.6.3", "--quantization", "fp8")
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("quantization (fp8) is not modelled for V0", p.stderr)

    def test_enforce_eager_leaves_the_cache_as_it_is(self):
        # Before 0.20 vLLM captures its CUDA graphs after the cache is sized (compile_or_warm_up_model): the graphs
        # live in what the utilization leaves, 64 MiB - 60,397,977 B = 6,710,887 B (6.40 MiB), and --enforce-eager
        # (no graphs) gives the same 26,174 blocks. 0.19 the same but for 0.17's sampler (test_engine_version_0_8_by_
        # hand: 10 blocks more, 26,812,825 B available). 0.20 and 0.21 with --enforce-eager subtract no estimate, but
        # PR #38284 made 0.92 the default utilization: floor(67,108,864 x 0.92) = 61,740,154 B requested, 1,342,177 B
        # more, 28,155,002 B available: 27,495 blocks of 1,024 B.
        graphs = self.vllm(*self.ARGS)
        eager = self.vllm(*self.ARGS, "--enforce-eager")
        for j in (graphs, eager):
            self.assertEqual(j["num_gpu_blocks"], 26174)
        self.assertEqual(self.vllm(*self.ARGS, "--engine-version", "0.19.1")["num_gpu_blocks"], 26174 + 10)
        for version in ("0.20.0", "0.21"):
            late = self.vllm(*self.ARGS, "--enforce-eager", "--engine-version", version)
            self.assertEqual(late["memory"]["requested_bytes"], 61740154, version)
            self.assertEqual(late["settings"]["gpu_memory_utilization"], 0.92, version)
            self.assertEqual(late["num_gpu_blocks"], 27495, version)
        # Given, it is vLLM's: 0.9 at 0.21 is 0.19's budget again.
        given = self.vllm(*self.ARGS, "--enforce-eager", "--engine-version", "0.21", "--gpu-memory-utilization", "0.9")
        self.assertEqual(given["num_gpu_blocks"], 26174 + 10)
        self.assertTrue(eager["settings"]["enforce_eager"])
        self.assertIn("outside this budget: in the 6.40 MiB", graphs["settings"]["cuda_graphs"])
        self.assertIn("none (--enforce-eager)", eager["settings"]["cuda_graphs"])
        self.assertIn("--enforce-eager", late["engine_rules"])
        text = run("serve", KV, "--engine", "vllm", *self.ARGS).stdout
        self.assertIn("CUDA graphs: captured after the cache is sized, outside this budget", text)
        p = run("serve", KV, "--memory", "64MiB", "--context", "64", "--enforce-eager")  # eager
        self.assertEqual(p.returncode, 2)
        self.assertIn("--enforce-eager applies to --engine vllm", p.stderr)

    def test_cuda_graph_estimate_as_logged(self):
        # From 0.20 V1 subtracts the estimate its log prints ("Estimated CUDA graph memory: X GiB total"); given as
        # --cuda-graph-memory 1MiB: 28,155,002 - 1,048,576 = 27,106,426 B available, 26,471 blocks of 1,024 B. V2
        # from 0.29 likewise (tests/cli/test_serve_vllm_versions.py: 28,166,522 B at 0.92): 27,117,946 B, 26,482.
        j = self.vllm(*self.ARGS, "--engine-version", "0.21", "--cuda-graph-memory", "1MiB")
        self.assertEqual(j["memory"]["cuda_graph_estimate_bytes"], 1 << 20)
        self.assertEqual(j["memory"]["available_kv_cache_bytes"], 27106426)
        self.assertEqual(j["num_gpu_blocks"], 26471)
        self.assertIn("taken off it: 1.00 MiB (--cuda-graph-memory", j["settings"]["cuda_graphs"])
        v2 = self.vllm(*self.ARGS, "--engine-version", "0.29.0", "--cuda-graph-memory", "1MiB")
        self.assertEqual((v2["settings"]["model_runner"], v2["num_gpu_blocks"]), ("v2", 26482))
        self.assertEqual(self.vllm(*self.ARGS, "--engine-version", "0.21", "--enforce-eager")["memory"]
                         ["cuda_graph_estimate_bytes"], 0)
        text = run("serve", KV, "--engine", "vllm", *self.ARGS, "--engine-version", "0.21", "--cuda-graph-memory",
                   "1MiB").stdout
        self.assertIn("- CUDA graphs          1.00 MiB  (--cuda-graph-memory", text)
        for args, words in ((["--engine-version", "0.21", "--cuda-graph-memory", "1MiB", "--enforce-eager"],
                             "--cuda-graph-memory with --enforce-eager: no CUDA graph is captured"),
                            (["--engine-version", "0.19.1", "--cuda-graph-memory", "1MiB"],
                             "captures its CUDA graphs after the cache is sized and subtracts no estimate"),
                            (["--engine-version", "0.27.1", "--cuda-graph-memory", "1MiB"], "(Model Runner V2)"),
                            (["--engine-version", "0.21", "--cuda-graph-memory", "lots"], "--cuda-graph-memory")):
            p = run("serve", KV, "--engine", "vllm", *self.ARGS, *args)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertIn(words, p.stderr)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)

    def test_an_onnx_file_without_context(self):
        # vLLM's max_model_len defaults to the model's position limit, which an ONNX file does not state.
        p = run("serve", KV, "--engine", "vllm", "--memory", "1GiB")
        self.assertEqual(p.returncode, 2)
        self.assertEqual(p.stderr, "memplan: error: serve --engine vllm needs --context N (the longest request: "
                                   f"vLLM's --max-model-len): {KV} does not state its maximum position\n")
        # The other engines run the same analysis; the refusal names the engine asked for.
        for engine in ("sglang", "trtllm", "all"):
            p = run("serve", KV, "--engine", engine, "--memory", "1GiB")
            self.assertEqual(p.returncode, 2)
            self.assertEqual(p.stderr, f"memplan: error: serve --engine {engine} needs --context N (the longest "
                                       f"request): {KV} does not state its maximum position\n")

    def test_the_non_torch_term_by_default(self):
        # Without --reserve: 0 under the rules whose snapshot follows the CUDA context (0.11, 0.9.2 to 0.10, 0.7),
        # the catalog's reserve (1024 MiB, report/gpu_catalog.json context_reserve_mib) under the absolute rules that
        # charge every byte outside PyTorch (0.8, 0.6.0 to 0.6.4); --reserve wins in both. The available memory moves
        # by exactly that term.
        base = ["--memory", "2GiB", "--context", "64", "--max-batched-tokens", "64", "--max-num-seqs", "64", "--dtype", "bf16"]
        for version, default in (("0.11", 0), ("0.10.1", 0), ("0.7", 0), ("0.8", 1 << 30), ("0.6.3", 1 << 30)):
            m = self.vllm(*base, "--engine-version", version)["memory"]
            self.assertEqual(m["non_torch_bytes"], default, version)
            given = self.vllm(*base, "--engine-version", version, "--reserve", "100MiB")["memory"]
            self.assertEqual(given["non_torch_bytes"], 100 << 20, version)
            self.assertEqual(m["available_kv_cache_bytes"] - given["available_kv_cache_bytes"],
                             (100 << 20) - default, version)
        p = run("serve", KV, "--engine", "vllm", *base)
        self.assertIn("non-torch memory          0 B  (not modelled: the CUDA context is in vLLM's start-up snapshot",
                      p.stdout)
        # SGLang sizes from the free memory, which the context has taken: the catalog's reserve, --reserve or not given.
        j = serve_json("--engine", "sglang", "--memory", "16GiB", "--context", "64", "--dtype", "bf16")
        self.assertEqual(j["memory"]["non_torch_bytes"], 1 << 30)

    def test_vllm_that_would_not_start(self):
        # A non-torch term of 1 GiB is more than 0.9 x 1 GiB: nothing for the cache.
        p = run("serve", KV, "--engine", "vllm", "--memory", "1GiB", "--context", "64", "--reserve", "1GiB")
        self.assertEqual(p.returncode, 1)
        self.assertIn("vLLM would not start: No available memory for the cache blocks", p.stdout)
        # 26,802,585 B hold 26,174 blocks: a request of 26,174 x 16 + 1 tokens does not fit; vLLM names the longest
        # that would (estimate_max_model_len), 418,784 tokens.
        j = self.vllm("--memory", "64MiB", "--reserve", "0", "--context", "418785", "--max-batched-tokens", "64",
                      "--max-num-seqs", "64", rc=1)
        self.assertFalse(j["starts"])
        self.assertEqual(j["estimated_max_model_len"], 418784)

    def test_bfloat16_below_8_0_does_not_start(self):
        # vLLM's worker raises "Bfloat16 is only supported on GPUs with compute capability of at least 8.0": a T4
        # (7.5) or an --arch below sm80 with --dtype bf16 does not start; auto serves float16 there and answers.
        for where in (["--gpu", "T4"], ["--memory", "1GiB", "--arch", "sm75"]):
            p = run("serve", KV, "--engine", "vllm", "--context", "64", "--dtype", "bf16", *where)
            self.assertEqual(p.returncode, 2, (where, p.stderr))
            self.assertIn("--dtype bf16 on compute capability 7.5: vLLM's worker refuses bfloat16 below 8.0", p.stderr)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        self.assertEqual(self.vllm("--gpu", "T4", "--context", "64", "--reserve", "0")["settings"]["dtype"], "float16")
        self.assertEqual(self.vllm("--gpu", "A10G", "--context", "64", "--reserve", "0", "--dtype", "bf16")
                         ["settings"]["dtype"], "bfloat16")
        # The catalog table: the GPUs below 8.0 do not start, each saying why; the others answer.
        rows = {r["gpu"]: r for r in self.vllm("--context", "64", "--reserve", "0", "--dtype", "bf16")["gpus"]}
        for gpu in ("T4", "V100-16GB"):
            self.assertIn("vLLM's worker refuses bfloat16 below 8.0", rows[gpu]["not_answered"])
            self.assertFalse(rows[gpu]["starts"])
        self.assertTrue(rows["A100-80GB"]["starts"])

    def test_catalog_rows_serve_each_gpus_auto_type(self):
        # vLLM's --dtype auto keeps gemma2 out of float16 (_FLOAT16_NOT_SUPPORTED_MODELS) and has no bfloat16 below
        # 8.0: on a T4 gemma-2-2b serves in float32, its cache twice bfloat16's 2 x 26 x 4 x 256 x 2 = 106,496 B a
        # token. The table's T4 row is the --gpu T4 answer, and says its type.
        gemma = os.path.join(SRC, "tests", "models", "hf_configs", "gemma-2-2b.json")
        table = self.vllm("--context", "4096", model=gemma)
        with open(os.path.join(SRC, "docs", "schemas", "serve.vllm.schema.json")) as f:
            jsonschema.validate(table, json.load(f))
        self.assertEqual((table["dtype"], table["kv_cache_bytes_per_token"]), ("bfloat16", 106_496))
        rows = {r["gpu"]: r for r in table["gpus"]}
        t4 = self.vllm("--context", "4096", "--gpu", "T4", model=gemma)
        self.assertEqual(t4["settings"]["dtype"], "float32")
        self.assertEqual((rows["T4"]["dtype"], rows["T4"]["kv_cache_bytes_per_token"]), ("float32", 2 * 106_496))
        self.assertEqual(rows["T4"]["gpu_kv_cache_tokens"], t4["gpu_kv_cache_tokens"])
        self.assertNotIn("dtype", rows["A100-80GB"])
        text = run("serve", gemma, "--engine", "vllm", "--context", "4096").stdout
        self.assertIn("T4: served in float32 (--dtype auto's type there), KV 212,992 B per token", text)

    def test_options_of_the_other_engine_are_refused(self):
        for args, phrase in ((["--headroom", "10"], "--headroom applies to --engine eager"),
                             (["--runtime", "ideal"], "--runtime ideal with --engine vllm"),
                             (["--engine", "eager", "--gpu-memory-utilization", "0.8"],
                              "--gpu-memory-utilization applies to --engine vllm"),
                             (["--engine", "eager", "--max-num-seqs", "8"], "--max-num-seqs applies to --engine vllm"),
                             (["--engine", "eager", "--tp", "2"], "--tp with --engine eager"),
                             (["--engine", "eager", "--enable-lora"], "--enable-lora applies to --engine vllm"),
                             (["--gpu-memory-utilization", "0"], "--gpu-memory-utilization 0"),
                             (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization 1.5")):
            p = subprocess.run([BIN, "serve", KV, "--memory", "1GiB", "--context", "64", *args], cwd=SRC,
                               capture_output=True, text=True, timeout=600)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertIn(phrase, p.stderr)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)

    def test_schema_and_catalog_table(self):
        with open(os.path.join(SRC, "docs", "schemas", "serve.vllm.schema.json")) as f:
            schema = json.load(f)
        jsonschema.validate(self.vllm(*self.ARGS), schema)
        table = self.vllm("--context", "512", "--reserve", "0")
        jsonschema.validate(table, schema)
        row = next(r for r in table["gpus"] if r["gpu"] == "T4")
        one = self.vllm("--gpu", "T4", "--context", "512", "--reserve", "0")
        self.assertEqual(row["gpu_kv_cache_tokens"], one["gpu_kv_cache_tokens"])
        self.assertEqual(row["available_kv_cache_bytes"], one["memory"]["available_kv_cache_bytes"])


class ServeErrors(unittest.TestCase):
    def expect(self, args, rc, *phrases, model=KV):
        p = run("serve", model, *args)
        self.assertEqual(p.returncode, rc, p.stderr)
        for phrase in phrases:
            self.assertIn(phrase, p.stderr + p.stdout)

    def test_no_kv_cache(self):
        for model in ("no_kv_tiny.onnx",):
            self.expect(["--context", "10", "--memory", "1GiB"], 2, "has no past/present key-value inputs",
                        model=os.path.join(MODELS, model))
        self.expect(["--context", "10", "--dim", "seq=8"], 2, "gpt_tiny.onnx has no past/present key-value inputs",
                    model=os.path.join(SRC, "tests", "models", "gpt_tiny.onnx"))

    def test_ambiguous_kv_dim(self):
        self.expect(["--context", "10"], 2, "caches tokens along several dimensions (past_a, past_b)", "--kv-dim",
                    model=os.path.join(MODELS, "kv_tiny_two_dims.onnx"))

    def test_kv_dim_naming_no_dim(self):
        self.expect(["--context", "10", "--kv-dim", "nope"], 2, "--kv-dim nope", "no symbolic dimension nope",
                    "past_sequence_length")
        self.expect(["--context", "10", "--kv-dim", "batch"], 2, "--kv-dim batch: no past/present key-value pair")

    def test_context_missing(self):
        self.expect(["--memory", "1GiB"], 2, "serve --engine eager needs --context N")

    def test_bad_combinations(self):
        self.expect(["--context", "10", "--batch", "2"], 2, "--batch")
        self.expect(["--context", "10", "--gpu", "T4", "--memory", "1GiB"], 2)
        self.expect(["--context", "0"], 2)

    def test_batch_bound_by_dim_is_refused(self):
        # serve chooses the batch (the number of sequences); --dim batch=2 bound it for every step instead, so each
        # sequence was shaped as 2: 2 x 128 = 256 B a token and 24 sequences on 1 MiB at context 100 (ideal), where
        # one sequence's cache is 2 (K, V) x 2 layers x 2 KV heads x 4 head_dim x 4 B = 128 B a token, and
        # 7 blocks x 16 x 128 B + its decode's 40 x 100 + 64 B = 18,400 B a sequence next to 3,128 B of weights
        # serve floor((1,048,576 - 3,128) / 18,400) = 56. Now the binding is refused, naming the dimension.
        args = ["--memory", "1MiB", "--context", "100", "--runtime", "ideal"]
        self.expect([*args, "--dim", "batch=2"], 2, "serve chooses the batch itself",
                    "batch is the leading dimension of the KV cache's past inputs", "drop --dim batch=2")
        self.expect([*args, "--dim", "b=1"], 2, "b is the leading dimension", "drop --dim b=1",
                    model=os.path.join(MODELS, "kv_tiny_renamed.onnx"))
        j = serve_json(*args)
        self.assertEqual(j["kv_cache_bytes_per_token"], 128)
        self.assertEqual(j["max_concurrent_sequences"], 56)

    def test_budget_below_the_weights(self):
        # 2,048 B: less than the 2,560 B of weights PyTorch holds (lm_head held once with the embedding).
        self.expect(["--context", "10", "--memory", "2048B"], 1, "nothing fits: the weights alone need")
        j = serve_json("--context", "10", "--memory", "2048B", rc=1)
        self.assertEqual(j["max_concurrent_sequences"], 0)
        self.assertEqual(j["max_context_single_sequence"], 0)
        self.expect(["--context", "10", "--memory", "1MiB"], 1, "nothing fits: one sequence")


if __name__ == "__main__":
    unittest.main()
