"""`memplan serve --engine vllm --engine-version 0.9.1 to 0.10.x` (and 0.6.5 to 0.7.x: class V0_7ByHand) on
kv_tiny, every term of the budget by hand, and what stays refused.

vLLM 0.9.1 to 0.10.x (cost_models/vllm_engine.h V0_9): Worker.determine_available_memory is PR #19312's baseline
rule, available = int(total x utilization) - (weights + torch_peak_increase + non_torch_increase), as in 0.11; but
Worker.init_device took its init_snapshot before init_worker_distributed_environment (PR #25359, after 0.10.2,
reversed that), so at tensor parallel >= 2 the custom all-reduce's IPC buffers (and NCCL's communicators, which
--reserve carries) are in non_torch_increase. The custom all-reduce (custom_all_reduce.py CustomAllreduce.__init__):
create_shared_buffer(meta_size() + max_size) and create_shared_buffer(max_size), both cudaMalloc, max_size 8192 x
1024 = 8,388,608, meta_size() = sizeof(vllm::Signal) = 36 x 8 x 4 + 2 x 36 x 8 x 4 = 3,456:
    3,456 + 8,388,608 + 8,388,608 = 16,780,672 B a rank, at tp 2, 4, 6 or 8.

kv_tiny (tests/models/serve/make_kv_tiny.py: 2 layers, 2 heads = 2 KV heads, head_dim 4, hidden 8, vocab 16,
float32, served in bfloat16 by --dtype auto on sm90, d = 2) at --tp 2, --memory 64MiB --reserve 0 --context 64
--max-batched-tokens 64 --max-num-seqs 64:
  requested   = int(67,108,864 x 0.9) = 60,397,977
  weights     = one rank's: the embedding's and the head's 8 of 16 rows x 8 (64 + 64), each layer's q, k, v
                (8 x 4, column-parallel) and o (4 x 8, row-parallel): 2 x 4 x 32 = 256; 384 elements x 2 = 768 B,
                and the vocabulary padded to 64 rows (pad_vocab_size) then split, 32 rows a rank: 24 rows x 8 x 2 B
                in the embedding and the head = 768 B; 1,536 B
  KV          = 2 (K, V) x 2 layers x 1 KV head a rank x 4 x 2 B = 32 B a token, 512 B a block of 16
  profile run = the sampler's warm-up on min(64, 64) = 64 rows of 16 logits (the head 64 wide, gathered) while the
                weights, the cuBLAS workspace (32 MiB on sm90) and the hidden states [64, 8] (1,024 B, held through
                the warm-up) are allocated: 2 x 64 x 64 + 26 x 64 x 16 + 2 x 2 x 64 x 8 = 36,864 B
  activation  = 33,554,432 + 1,024 + 36,864 = 33,592,320 (the peak 33,593,856 less the weights)
  non-torch   = --reserve 0 + 16,780,672
  available   = 60,397,977 - 1,536 - 33,592,320 - 16,780,672 = 10,023,449 B: 10,023,449 // 512 = 19,577 blocks
                (25 B left), 313,232 tokens; a 64-token request takes 4 blocks: 19,577 / 4 = 4,894.25
0.11 (its neighbour after PR #25359) charges no custom all-reduce: 26,804,121 B, 52,351 blocks.
"""
import json
import os
import subprocess
import unittest

BIN = os.environ["MEMPLAN_BIN"]
SRC = os.environ["MEMPLAN_SOURCE_DIR"]
KV = os.path.join(SRC, "tests", "models", "serve", "kv_tiny.onnx")
ARGS = ["--memory", "64MiB", "--reserve", "0", "--context", "64", "--max-batched-tokens", "64", "--max-num-seqs", "64"]
CUSTOM_ALL_REDUCE = (36 * 8 * 4 + 2 * 36 * 8 * 4) + 8192 * 1024 + 8192 * 1024  # 16,780,672


def run(*args):
    return subprocess.run([BIN, "serve", KV, "--engine", "vllm", *args], cwd=SRC, capture_output=True, text=True,
                          timeout=600)


def vllm(*args):
    p = run(*args, "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


class V0_7ByHand(unittest.TestCase):
    """--engine-version 0.6.5 to 0.6.x and 0.7.x: V0 over a baseline (cost_models/vllm_engine.h V0_6_5, V0_7).

    determine_num_available_blocks (a 0.6.5-era copy of worker.py): with memory_profiling(baseline = total - the
    free memory init_device measured, weights = model_memory_usage): profile_run(); available = total x 0.9 -
    (weights + torch_peak_increase + non_torch_increase); num_gpu_blocks = int(available // cache_block_size).
    kv_tiny, --dtype bf16, the class ARGS: weights 3,072 B (as tests/cli/test_serve.py VllmByHand); the profile run
    is V0's (test_serve.py test_engine_version_0_6_v0_by_hand): 64 prompts of one token, the [64, 8] hidden states
    held (1,024 B), V0's sampler on 64 rows of 16 logits, the head 64 wide: 2 x 64 x 64 + 30 x 64 x 16 = 38,912 B,
    beside the cuBLAS workspace (33,554,432 B, sm90);
      torch_peak_increase = the peak less what was allocated when it began (the weights)
                          = 33,554,432 + 1,024 + 38,912 = 33,594,368
      non_torch_increase  = --reserve 0 (no NCCL and no custom all-reduce on one GPU)
      available = int(67,108,864 x 0.9) - 3,072 - 33,594,368 - 0 = 60,397,977 - 33,597,440 = 26,800,537 B:
                  26,800,537 // 1,024 = 26,172 blocks (409 B left), 418,752 tokens, 26,172 / 4 = 6,543 requests
    On one GPU that is 0.6.4's absolute rule term for term (its peak is the same weights plus increase, its
    non-torch all of --reserve); what differs is what --reserve stands for (the increase since init_device, the
    CUDA context before it) and tensor parallelism (test_tp_2_by_hand).
    """
    V0 = [*ARGS, "--dtype", "bf16"]

    def test_every_term_on_one_gpu(self):
        j = vllm(*self.V0, "--engine-version", "0.6.5")
        m, p = j["memory"], j["profile_run"]
        self.assertIn("0.6.5 to 0.6.x V0", j["engine_rules"])
        self.assertEqual(m["requested_bytes"], 60397977)
        self.assertEqual(m["weights_bytes"], 3072)
        self.assertEqual((p["requests"], p["hidden_states_bytes"]), (64, 1024))
        self.assertEqual(p["sampler_peak_bytes"], 2 * 64 * 64 + 30 * 64 * 16)
        self.assertEqual(m["activation_peak_bytes"], 33554432 + 1024 + 38912)
        self.assertEqual((m["non_torch_bytes"], m["custom_all_reduce_bytes"]), (0, 0))
        self.assertEqual(m["available_kv_cache_bytes"], 60397977 - 3072 - 33594368)
        self.assertEqual(j["num_gpu_blocks"], 26800537 // 1024)
        self.assertEqual(j["num_gpu_blocks"], 26172)
        self.assertEqual(j["gpu_kv_cache_tokens"], 418752)
        self.assertEqual(j["max_concurrency"], 6543.0)
        # 0.7.x (PR #12126's snapshot) is the same answer on one GPU, under its own rule's name.
        j07 = vllm(*self.V0, "--engine-version", "0.7.3")
        self.assertEqual(j07["memory"], m)
        self.assertIn("0.7 V0", j07["engine_rules"])
        self.assertIn("PR #12126", j07["engine_rules"])
        text = run(*self.V0, "--engine-version", "0.7.3").stdout
        self.assertIn("served by vLLM 0.7.3 (V0 rules), --memory 64MiB", text)
        self.assertIn("(--reserve: the non-torch memory since init_device measured the baseline, which 0.7.3 "
                      "charges; the CUDA context is before it)", text)
        self.assertIn("# GPU blocks: 26172\nGPU KV cache size: 418,752 tokens", text)

    def test_tp_2_by_hand(self):
        """At --tp 2 init_device measured its baseline before init_worker_distributed_environment, so the custom
        all-reduce (CustomAllreduce.__init__, at world size 2) is in the non-torch increase.

        One rank of kv_tiny at tp 2 (as V0_10ByHand): weights 1,536 B (768 of q, k, v, o, the embedding's and the
        head's 8 of 16 rows, and 768 of vocabulary padding, 24 of the 32 padded rows a rank), 32 KV bytes a token,
        512 B a block. V0's profile: the [64, 8] hidden states whole after the row-parallel all-reduce (1,024 B)
        and V0's sampler on the gathered 64-wide head, 38,912 B as on one GPU, beside the cuBLAS workspace:
          torch_peak_increase = 33,554,432 + 1,024 + 38,912 = 33,594,368 (the sampler sets the peak)
        0.7.x (MemorySnapshot: the increase of used - reserved): the two cudaMalloc'd IPC buffers,
          3,456 + 8,388,608 + 8,388,608 = 16,780,672 B (rank_data is in PyTorch's reserved memory)
          available = 60,397,977 - 1,536 - 33,594,368 - 16,780,672 = 10,021,401 B: 19,573 blocks (25 B left),
                      313,168 tokens, 19,573 / 4 = 4,893.25 requests of 64
        0.6.5 to 0.6.x (used - baseline - weights - the profile's change of allocated bytes): rank_data, torch.empty
        of 8,388,608 B allocated after the baseline and not a weight, too:
          16,780,672 + 8,388,608 = 25,169,280 B
          available = 10,021,401 - 8,388,608 = 1,632,793 B: 3,189 blocks (25 B left), 51,024 tokens, 797.25
        """
        j07 = vllm(*self.V0, "--tp", "2", "--engine-version", "0.7.3")
        m, p = j07["memory"], j07["profile_run"]
        self.assertEqual(m["weights_bytes"], 768 + 768)
        self.assertEqual(j07["kv_cache"]["bytes_per_token"], 32)
        self.assertEqual((p["hidden_states_bytes"], p["sampler_peak_bytes"]), (1024, 38912))
        self.assertEqual(p["peak_set_by"], "sampler")
        self.assertEqual(m["activation_peak_bytes"], 33554432 + 1024 + 38912)
        self.assertEqual(m["custom_all_reduce_bytes"], CUSTOM_ALL_REDUCE)
        self.assertEqual(m["non_torch_bytes"], CUSTOM_ALL_REDUCE)
        self.assertEqual(m["available_kv_cache_bytes"], 60397977 - 1536 - 33594368 - 16780672)
        self.assertEqual(m["available_kv_cache_bytes"], 10021401)
        self.assertEqual(j07["num_gpu_blocks"], 19573)
        self.assertEqual(j07["num_gpu_blocks"] * 512 + 25, 10021401)  # one more block does not fit
        self.assertEqual(j07["gpu_kv_cache_tokens"], 313168)
        self.assertEqual(j07["max_concurrency"], 4893.25)
        j065 = vllm(*self.V0, "--tp", "2", "--engine-version", "0.6.5")
        m065 = j065["memory"]
        self.assertEqual(m065["custom_all_reduce_bytes"], CUSTOM_ALL_REDUCE + 8388608)
        self.assertEqual(m065["custom_all_reduce_bytes"], 25169280)
        for key in ("weights_bytes", "activation_peak_bytes"):
            self.assertEqual(m065[key], m[key], key)
        self.assertEqual(m065["available_kv_cache_bytes"], 1632793)
        self.assertEqual(j065["num_gpu_blocks"], 3189)
        self.assertEqual(j065["num_gpu_blocks"] * 512 + 25, 1632793)
        self.assertEqual(j065["gpu_kv_cache_tokens"], 51024)
        self.assertEqual(j065["max_concurrency"], 797.25)
        self.assertEqual(vllm(*self.V0, "--tp", "2", "--engine-version", "0.6.6.post1")["num_gpu_blocks"], 3189)
        # --reserve (NCCL's communicators) adds to it: 1 MiB, 2,048 blocks of 512 B fewer under 0.7.
        less = vllm(*[a if a != "0" else "1MiB" for a in self.V0], "--tp", "2", "--engine-version", "0.7.3")
        self.assertEqual(less["num_gpu_blocks"], (10021401 - (1 << 20)) // 512)
        text = run(*self.V0, "--tp", "2", "--engine-version", "0.6.5").stdout
        self.assertIn("(--reserve with NCCL's communicators, and the custom all-reduce's IPC buffers and its 8 MiB "
                      "rank_data tensor, 25,169,280 B: 0.6.5 sets them up after init_device measured its baseline)",
                      text)
        text = run(*self.V0, "--tp", "2", "--engine-version", "0.7.3").stdout
        self.assertIn("(--reserve with NCCL's communicators, and the custom all-reduce's IPC buffers, 16,780,672 B: "
                      "0.7.3 sets them up after init_device measured its baseline)", text)
        self.assertIn("GPU KV cache size: 313,168 tokens", text)

    def test_neighbours(self):
        # 0.6.4 (absolute) gives the same blocks on one GPU, and says its --reserve is every non-torch byte.
        old = vllm(*self.V0, "--engine-version", "0.6.4")
        new = vllm(*self.V0, "--engine-version", "0.6.5")
        self.assertEqual(old["memory"], new["memory"])
        self.assertNotEqual(old["engine_rules"], new["engine_rules"])
        self.assertIn("absolute", old["engine_rules"])
        self.assertIn("the profile's whole peak and all non-torch memory",
                      run(*self.V0, "--engine-version", "0.6.4").stdout)
        # At tp 2, 0.6.4's --reserve holds every non-torch byte (the all-reduce's among them): nothing added.
        old2 = vllm(*self.V0, "--tp", "2", "--engine-version", "0.6.4")
        self.assertEqual(old2["memory"]["custom_all_reduce_bytes"], 0)
        self.assertEqual(old2["memory"]["available_kv_cache_bytes"], 10021401 + CUSTOM_ALL_REDUCE)
        # V0's refusals hold (LoRA: V0's profile run activates dummy adapters).
        p = run(*self.V0, "--enable-lora", "--engine-version", "0.7.3")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("activates max_loras dummy adapters", p.stderr)


class V0_10ByHand(unittest.TestCase):
    def test_every_term_at_tp_2(self):
        j = vllm(*ARGS, "--tp", "2", "--engine-version", "0.10.2")
        m, p = j["memory"], j["profile_run"]
        self.assertIn("0.9.1 to 0.10", j["engine_rules"])
        self.assertEqual(m["requested_bytes"], 60397977)
        self.assertEqual(m["weights_bytes"], (64 + 64 + 2 * 4 * 32) * 2 + 2 * 24 * 8 * 2)
        self.assertEqual(m["vocab_padding_bytes"], 2 * 24 * 8 * 2)
        self.assertEqual(j["kv_cache"]["bytes_per_token"], 32)
        self.assertEqual(p["hidden_states_bytes"], 64 * 8 * 2)
        self.assertEqual(p["sampler_peak_bytes"], 2 * 64 * 64 + 26 * 64 * 16 + 2 * 2 * 64 * 8)
        self.assertEqual(m["activation_peak_bytes"], (32 << 20) + 1024 + 36864)
        self.assertEqual(CUSTOM_ALL_REDUCE, 16780672)
        self.assertEqual(m["custom_all_reduce_bytes"], CUSTOM_ALL_REDUCE)
        self.assertEqual(m["non_torch_bytes"], CUSTOM_ALL_REDUCE)
        self.assertEqual(m["available_kv_cache_bytes"], 60397977 - 1536 - 33592320 - 16780672)
        self.assertEqual(m["available_kv_cache_bytes"], 10023449)
        self.assertEqual(j["num_gpu_blocks"], 19577)
        self.assertEqual(j["gpu_kv_cache_tokens"], 313232)
        self.assertEqual(j["max_concurrency"], 4894.25)
        # --reserve (NCCL's communicators, the rest outside PyTorch) adds to it: 1 MiB, 2,048 blocks of 512 B fewer.
        less = vllm(*[a if a != "0" else "1MiB" for a in ARGS], "--tp", "2", "--engine-version", "0.10.2")
        self.assertEqual(less["memory"]["non_torch_bytes"], (1 << 20) + CUSTOM_ALL_REDUCE)
        self.assertEqual(less["num_gpu_blocks"], (10023449 - (1 << 20)) // 512)
        text = run(*ARGS, "--tp", "2", "--engine-version", "0.10.2").stdout
        self.assertIn("served by vLLM 0.10.2 (V1 rules), --memory 64MiB", text)
        self.assertIn("(--reserve with NCCL's communicators, and the custom all-reduce's IPC buffers, 16,780,672 B: "
                      "0.10.2 sets both up after its snapshot)", text)
        self.assertIn("GPU KV cache size: 313,232 tokens", text)

    def test_neighbours_differ_where_the_source_says(self):
        # 0.11 (PR #25359: the distributed set-up before the snapshot) charges no custom all-reduce at tp 2:
        # 60,397,977 - 1,536 - 33,592,320 = 26,804,121 B, 52,351 blocks of 512 (409 B left).
        new = vllm(*ARGS, "--tp", "2", "--engine-version", "0.11")
        self.assertEqual(new["memory"]["custom_all_reduce_bytes"], 0)
        self.assertEqual(new["memory"]["available_kv_cache_bytes"], 26804121)
        self.assertEqual(new["num_gpu_blocks"], 52351)
        old = vllm(*ARGS, "--tp", "2", "--engine-version", "0.10.2")
        self.assertEqual(new["memory"]["available_kv_cache_bytes"] - old["memory"]["available_kv_cache_bytes"],
                         CUSTOM_ALL_REDUCE)
        for key in ("weights_bytes", "activation_peak_bytes"):
            self.assertEqual(new["memory"][key], old["memory"][key], key)
        # 0.9.2 is the same rule as 0.10.x. 0.9.1 too (its tag carries PR #19312: init_snapshot before the
        # distributed set-up), with 0.8's profile run: _dummy_run returns hidden_states[logit_indices], so the
        # forward's [64, 8] bf16 states (1,024 B) are not held through the sampler: 10,024,473 B, 19,579 blocks.
        self.assertEqual(vllm(*ARGS, "--tp", "2", "--engine-version", "0.9.2")["num_gpu_blocks"], 19577)
        e091 = vllm(*ARGS, "--tp", "2", "--engine-version", "0.9.1")
        self.assertEqual(e091["memory"]["custom_all_reduce_bytes"], CUSTOM_ALL_REDUCE)
        self.assertEqual(e091["memory"]["activation_peak_bytes"], old["memory"]["activation_peak_bytes"] - 1024)
        self.assertEqual(e091["memory"]["available_kv_cache_bytes"], 10024473)
        self.assertEqual(e091["num_gpu_blocks"], 19579)
        # 0.8 (before PR #19312: the absolute rule, the hidden states freed before the sampler) charges no custom
        # all-reduce of its own (--reserve is every non-torch byte there): 1,024 B less activation than 0.10.
        e08 = vllm(*ARGS, "--tp", "2", "--engine-version", "0.8")
        self.assertEqual(e08["memory"]["custom_all_reduce_bytes"], 0)
        self.assertEqual(e08["memory"]["activation_peak_bytes"], old["memory"]["activation_peak_bytes"] - 1024)
        # At tp 1 there is no all-reduce: 0.10 is 0.11's answer (tests/cli/test_serve.py VllmByHand: 26,174 blocks).
        one = vllm(*ARGS, "--engine-version", "0.10")
        self.assertEqual((one["memory"]["custom_all_reduce_bytes"], one["num_gpu_blocks"]), (0, 26174))

    def test_catalog_table_charges_every_gpu(self):
        # Without --gpu or --memory: one row a catalog GPU, each with the same 16,780,672 B beside --reserve.
        import jsonschema
        with open(os.path.join(SRC, "docs", "schemas", "serve.vllm.schema.json")) as f:
            schema = json.load(f)
        table = ARGS[2:]  # no --memory
        rows = {}
        for version in ("0.10.2", "0.11"):
            j = vllm(*table, "--tp", "2", "--engine-version", version)
            jsonschema.validate(j, schema)
            rows[version] = {r["gpu"]: r for r in j["gpus"] if "not_answered" not in r}
            self.assertEqual(j.get("custom_all_reduce_bytes"), CUSTOM_ALL_REDUCE if version == "0.10.2" else None)
            self.assertEqual(j["non_torch_bytes"], 0)
        self.assertEqual(rows["0.10.2"].keys(), rows["0.11"].keys())
        for gpu, row in rows["0.10.2"].items():
            self.assertEqual(rows["0.11"][gpu]["available_kv_cache_bytes"] - row["available_kv_cache_bytes"],
                             CUSTOM_ALL_REDUCE, gpu)
        text = run(*table, "--tp", "2", "--engine-version", "0.10.2").stdout
        self.assertIn("(non-torch memory 0 B each: --reserve, and the custom all-reduce's IPC buffers, 16,780,672 B, "
                      "which 0.10.2 sets up after its snapshot; GiB = 2^30 bytes)", text)

    def test_flashinfer_sampler_at_0_9_to_0_11_0(self):
        # With FlashInfer importable the V1 sampler of 0.9.0 to 0.11.0 runs top_k_top_p_sampling_from_logits
        # (topk_topp_sampler.py: VLLM_USE_FLASHINFER_SAMPLER unset counts as on): the float32 logits, masked_logits
        # and probs, 12 B an element, where the sort holds 26: 2 x 64 x 64 + 12 x 64 x 16 + 2 x 2 x 64 x 8 = 22,528 B,
        # 14 x 64 x 16 = 14,336 B less peak, 14 more blocks of 1,024 (64 B a token at tp 1).
        for version in ("0.10.2", "0.11.0"):
            no = vllm(*ARGS, "--engine-version", version, "--flashinfer", "no")
            yes = vllm(*ARGS, "--engine-version", version, "--flashinfer", "yes")
            self.assertEqual((no["profile_run"]["sampler"], yes["profile_run"]["sampler"]), ("sort", "flashinfer"))
            self.assertEqual(yes["profile_run"]["sampler_peak_bytes"], 2 * 64 * 64 + 12 * 64 * 16 + 2 * 2 * 64 * 8)
            self.assertEqual(yes["memory"]["available_kv_cache_bytes"] - no["memory"]["available_kv_cache_bytes"],
                             14 * 64 * 16)
            self.assertEqual(yes["num_gpu_blocks"] - no["num_gpu_blocks"], 14)
            self.assertEqual(vllm(*ARGS, "--engine-version", version)["memory"], no["memory"])  # auto: the sort
        self.assertIn("the sampler's warm-up (FlashInfer's top_k_top_p_sampling_from_logits) sets the peak",
                      run(*ARGS, "--engine-version", "0.11.0", "--flashinfer", "yes").stdout)
        # 0.11.1 made it opt-in (PR #26859): FlashInfer installed changes nothing.
        self.assertEqual(vllm(*ARGS, "--engine-version", "0.11.1", "--flashinfer", "yes")["profile_run"]["sampler"],
                         "sort")
        p = run(*ARGS, "--engine-version", "0.8", "--flashinfer", "yes")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--flashinfer yes with --engine-version 0.8: 0.8's V1 sampler ran FlashInfer's kernels only "
                      "below FlashInfer 0.2.3", p.stderr)
        p = subprocess.run([BIN, "serve", KV, "--engine", "sglang", "--memory", "64MiB", "--flashinfer", "yes"],
                           cwd=SRC, capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--flashinfer applies to --engine vllm", p.stderr)

    def test_what_is_not_read_is_refused(self):
        for args, phrase in ((["--engine-version", "0.9"], "give the patch (0.9.0 ran 0.8's absolute rule; PR "
                              "#19312's baseline rule came with 0.9.1)"),
                             (["--memory", "64MiB", "--context", "64", "--engine-version", "0.10.1"],
                              "needs --max-batched-tokens and --max-num-seqs"),
                             ([*ARGS, "--tp", "2", "--data-parallel-size", "2", "--engine-version", "0.10.1"],
                              "data parallelism is not modelled")):
            p = run(*args)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertIn(phrase, p.stderr)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)



class ModelRunnerV2ByHand(unittest.TestCase):
    """--engine-version 0.25 and later: Model Runner V2 for a model without experts (cost_models/vllm_engine.h
    VllmModelRunner; v0.25.0's release notes: "Model Runner V2 is now the default for all dense models").

    V2's profile_cudagraph_memory returns 0: no CUDA-graph estimate, so no --enforce-eager is needed. Its
    _dummy_sampler_run computes the logits of the sampled rows and runs the Gumbel sampler with the dummy requests'
    default states (no top-k/top-p sort). kv_tiny as tests/cli/test_serve.py VllmByHand (bf16, d = 2; weights
    3,072 B; 64 dummy requests; hidden 8; 16 logits in a head 64 wide), at its peak:
      sampled rows [64, 8] 2 x 64 x 8 = 1,024; the logits [64, 64] 2 x 64 x 64 = 8,192; their float32 copy of the
      vocabulary [64, 16] 4,096; gumbel_sample's per-block argmax (int64) and maximum (float32), cdiv(16, 1024) = 1
      block: 64 x 12 = 768; the block argmax and the tokens 64 x 16 = 1,024: 15,104 B (V1's sort path: 36,864)
      peak        = 3,072 + 33,554,432 + 1,024 (hidden states [64, 8]) + 15,104 = 33,573,632
      requested   = floor(67,108,864 x 0.92) = 61,740,154 (0.92: the default from 0.20, PR #38284)
      available   = 61,740,154 - 33,573,632 = 28,166,522 B: 27,506 blocks of 1,024 (378 B left), 440,096 tokens,
                    27,506 / 4 = 6,876.5 requests of 64 tokens.
    """

    def test_every_term_on_one_gpu(self):
        j = vllm(*ARGS, "--engine-version", "0.27.1")
        m, p = j["memory"], j["profile_run"]
        self.assertEqual(j["settings"]["model_runner"], "v2")
        self.assertIn("Model Runner V2", j["engine_rules"])
        self.assertIn("subtracts no estimate", j["settings"]["cuda_graphs"])
        self.assertEqual(p["sampler_peak_bytes"], 1024 + 8192 + 4096 + 768 + 1024)
        self.assertEqual(p["peak_set_by"], "sampler")
        self.assertEqual(m["activation_peak_bytes"], (32 << 20) + 1024 + 15104)
        self.assertEqual(m["requested_bytes"], 61740154)
        self.assertEqual(m["available_kv_cache_bytes"], 28166522)
        self.assertEqual(j["num_gpu_blocks"], 27506)
        self.assertEqual(j["gpu_kv_cache_tokens"], 440096)
        self.assertEqual(j["max_concurrency"], 6876.5)
        # --model-runner v1 (VLLM_USE_V2_MODEL_RUNNER=0) with --enforce-eager: V1's sampler, the 0.20 rule's figure
        # (tests/cli/test_serve.py VllmByHand: 27,495 blocks at 0.92 with 0.17's Triton sampler).
        v1 = vllm(*ARGS, "--engine-version", "0.27.1", "--model-runner", "v1", "--enforce-eager")
        self.assertEqual(v1["settings"]["model_runner"], "v1")
        self.assertEqual(v1["profile_run"]["sampler"], "triton")
        self.assertEqual(v1["num_gpu_blocks"], 27495)

    def test_the_listed_mixtures_of_experts_run_v2(self):
        # DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES from 0.24 (PR #42667): Qwen2MoeForCausalLM and DeepseekV2ForCausalLM,
        # MoE or not; another mixture of experts stays on V1 (cost_models/vllm_engine.h vllm_v2_default_before_0_29).
        def runner(config, version):
            p = subprocess.run([BIN, "serve", os.path.join(SRC, "tests/models/hf_configs", config), "--graph", "decode",
                                "--gpu", "H100-80GB", "--context", "4096", "--engine-version", version,
                                "--enforce-eager", "--json"], cwd=SRC, capture_output=True, text=True, timeout=600)
            self.assertEqual(p.returncode, 0, p.stderr)
            return json.loads(p.stdout)["settings"]["model_runner"]
        self.assertEqual(runner("Qwen1.5-MoE-A2.7B.json", "0.23.0"), "v1")
        self.assertEqual(runner("Qwen1.5-MoE-A2.7B.json", "0.24.0"), "v2")
        self.assertEqual(runner("DeepSeek-V2-Lite.json", "0.27.1"), "v2")
        self.assertEqual(runner("Qwen3-30B-A3B.json", "0.27.1"), "v1")
        # Before 0.25 the default is V1: 0.24 needs --enforce-eager, as 0.21 did.
        self.assertEqual(vllm(*ARGS, "--engine-version", "0.24.0", "--enforce-eager")["settings"]["model_runner"], "v1")
        # 0.22 to 0.24: V2 by default for a dense Qwen3 (0.22 on) and Llama or Mistral (0.23 on), V1 otherwise
        # (v0.22.0's and v0.23.0's release notes, #39337 and #43458).
        configs = os.path.join(SRC, "tests", "models", "hf_configs")
        gpu = ["--graph", "decode", "--gpu", "A100-40GB", "--context", "8192"]
        for config, version, runner in (("Qwen3-8B.json", "0.22.0", "v2"), ("Llama-3.1-8B.json", "0.23.0", "v2"),
                                        ("Llama-3.1-8B.json", "0.22.1", None)):
            p = subprocess.run([BIN, "serve", os.path.join(configs, config), *gpu, "--engine-version", version,
                                "--json"], cwd=SRC, capture_output=True, text=True, timeout=600)
            if runner:
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertEqual(json.loads(p.stdout)["settings"]["model_runner"], runner)
            else:
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn("is not one that 0.22 to 0.24 run on V2 by default", p.stderr)
        # 0.29 with --enforce-eager: the same V2 figures (no graphs, no estimate).
        late = vllm(*ARGS, "--engine-version", "0.29.0", "--enforce-eager")
        self.assertEqual(late["settings"]["model_runner"], "v2")
        self.assertEqual(late["num_gpu_blocks"], 27506)
        self.assertIn("0.29", late["engine_rules"])

    def test_what_is_not_read_is_refused(self):
        qwen3_moe = os.path.join(SRC, "tests", "models", "hf_configs", "Qwen3-30B-A3B.json")
        cases = [
            ([KV, *ARGS, "--engine-version", "0.24.0"],
             "--engine-version 0.24.0 with Model Runner V1 (" + KV + " is not one that 0.22 to 0.24 run on V2 by "
             "default"),
            ([KV, *ARGS, "--engine-version", "0.21.0"], "--engine-version 0.21.0: from 0.20 vLLM's V1 runner"),
            ([KV, *ARGS, "--engine-version", "0.25", "--model-runner", "v1"], "(--model-runner v1): from 0.20"),
            ([KV, *ARGS, "--engine-version", "0.21", "--model-runner", "v2", "--enforce-eager"],
             "--model-runner v2 with --engine-version 0.21: Model Runner V2's profile run is read from 0.22 only"),
            ([KV, *ARGS, "--engine-version", "0.25", "--enable-lora"], "--enable-lora with Model Runner V2"),
            ([qwen3_moe, "--graph", "decode", "--gpu", "H100-80GB", "--context", "4096", "--engine-version", "0.25"],
             "with Model Runner V1 (" + qwen3_moe + " has experts, and 0.25 to 0.28 run only Qwen2-MoE and "
             "DeepSeek-V2 of those on V2): from 0.20"),
            ([KV, *ARGS, "--model-runner", "v3"], "--model-runner"),
            # 0.29: V2 for every model, subtracting its CUDA graphs' estimate (PR #53306).
            ([KV, *ARGS, "--engine-version", "0.29.0"],
             "--engine-version 0.29.0 with Model Runner V2: from 0.29 that runner subtracts its CUDA graphs' memory"),
            ([qwen3_moe, "--graph", "decode", "--gpu", "H100-80GB", "--context", "4096", "--engine-version", "0.29.0"],
             "with Model Runner V2: from 0.29"),
        ]
        for args, says in cases:
            p = subprocess.run([BIN, "serve", *args, "--engine", "vllm"], cwd=SRC, capture_output=True, text=True,
                               timeout=600)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertIn(says, p.stderr)
            self.assertNotIn("Traceback", p.stderr)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)



class DefaultReleaseNamed(unittest.TestCase):
    """Without --engine-version the answer follows memplan's default release (0.11, report/serve_probe.h) and says
    so, in its first line, the table's title and the JSON (engine_version_default); given, it names that release
    alone. Releases size differently (README, "Serving"), so a user must see which one answered."""

    NOTE = "memplan's default release; --engine-version names yours"

    def test_default_named_in_the_answer(self):
        p = run(*ARGS)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("served by vLLM 0.11 (V1 rules; " + self.NOTE + "), --memory 64MiB", p.stdout.splitlines()[0])
        s = vllm(*ARGS)["settings"]
        self.assertEqual((s["engine_version"], s["engine_version_default"]), ("0.11", True))

    def test_given_release_named_without_the_note(self):
        p = run(*ARGS, "--engine-version", "0.11")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("served by vLLM 0.11 (V1 rules), --memory 64MiB", p.stdout)
        self.assertNotIn(self.NOTE, p.stdout)
        s = vllm(*ARGS, "--engine-version", "0.19")["settings"]
        self.assertEqual((s["engine_version"], s["engine_version_default"]), ("0.19", False))

    def test_catalog_table_names_the_release(self):
        args = ["--reserve", "0", "--context", "64"]
        p = run(*args)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(p.stdout.startswith("vLLM 0.11's KV cache (" + self.NOTE + ") at max_model_len 64"), p.stdout)
        md = run(*args, "--format", "markdown")
        self.assertIn("vLLM 0.11's rule (" + self.NOTE + ").", md.stdout)
        j = json.loads(run(*args, "--engine-version", "0.19", "--json").stdout)
        self.assertEqual((j["engine_version"], j["engine_version_default"]), ("0.19", False))
        self.assertNotIn(self.NOTE, run(*args, "--engine-version", "0.19").stdout)


class StepDefaultsByUsageContext(unittest.TestCase):
    """--usage-context: vLLM's default step by how it is started (vllm/engine/arg_utils.py, read at v0.11.0, v0.11.2
    and v0.18.0: the tables in cost_models/vllm_engine.h vllm_step_defaults). --memory 64MiB is under 70 GiB: `vllm
    serve` 2048 tokens and 256 requests, LLM(...) 8192 and 256, ENGINE_CONTEXT SchedulerConfig's 2048 and 128. From
    0.11.1 (PR #28665) a default token budget is at most max_num_seqs x max_model_len; at 0.11.0 only
    ENGINE_CONTEXT's, through SchedulerConfig.__post_init__. vLLM refuses max_num_batched_tokens < max_num_seqs."""

    BASE = ["--memory", "64MiB", "--reserve", "0"]

    def step(self, *args):
        j = vllm(*self.BASE, *args)
        self.assertEqual(j["profile_run"]["tokens"], j["settings"]["max_num_batched_tokens"])
        return j["settings"]["max_num_batched_tokens"], j["settings"]["max_num_seqs"], j["settings"]["usage_context"]

    def test_tables(self):
        self.assertEqual(self.step("--context", "64"), (2048, 256, "serve"))
        self.assertEqual(self.step("--context", "64", "--usage-context", "llm"), (8192, 256, "llm"))
        self.assertEqual(self.step("--context", "64", "--usage-context", "engine"), (2048, 128, "engine"))

    def test_clamp_to_the_model_from_0_11_1(self):
        # LLM(...) at 16 tokens a request: 256 x 16 = 4,096 < 8,192 from 0.11.1; 0.11.0 keeps 8,192.
        self.assertEqual(self.step("--context", "16", "--usage-context", "llm")[0], 8192)
        self.assertEqual(self.step("--context", "16", "--usage-context", "llm", "--engine-version", "0.11.2")[0], 4096)
        # --max-num-seqs 4 at 64 tokens: 4 x 64 = 256 from 0.11.1.
        self.assertEqual(self.step("--context", "64", "--max-num-seqs", "4")[:2], (2048, 4))
        self.assertEqual(self.step("--context", "64", "--max-num-seqs", "4", "--engine-version", "0.18")[:2], (256, 4))
        # ENGINE_CONTEXT clamps at 0.11.0 too: 128 x 8 = 1,024.
        self.assertEqual(self.step("--context", "8", "--usage-context", "engine")[:2], (1024, 128))
        # A product past int64 clamps nothing (vLLM's Python integers would not overflow either): the table's 2048.
        p = run(*self.BASE, "--context", "9000000000000000000", "--max-num-seqs", "4", "--engine-version", "0.18")
        self.assertNotIn("max_num_batched_tokens (-", p.stderr)
        self.assertNotIn("is under max_num_seqs", p.stderr)

    def test_throughput_mode_doubles_what_is_not_given(self):
        # --performance-mode throughput (0.17 on): 2 x 2048 tokens and 2 x 256 requests before the clamp
        # (512 x 64 = 32,768 does not bind); a given --max-num-seqs 4 stays, the tokens then 4 x 64 = 256.
        v = ["--engine-version", "0.18", "--performance-mode", "throughput"]
        self.assertEqual(self.step("--context", "64", *v)[:2], (4096, 512))
        self.assertEqual(self.step("--context", "64", "--max-num-seqs", "4", *v)[:2], (256, 4))
        self.assertEqual(self.step("--context", "64", "--engine-version", "0.18", "--performance-mode",
                                   "interactivity")[:2], (2048, 256))
        p = run(*self.BASE, "--context", "64", "--performance-mode", "throughput")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(p.stderr.strip(), "memplan: error: --performance-mode throughput with --engine-version 0.11: "
                         "vLLM has the option from 0.17")

    def test_text_names_the_context(self):
        p = run(*self.BASE, "--context", "64", "--usage-context", "llm")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("max_num_batched_tokens 8,192 (vLLM's default for LLM(...)), max_num_seqs 256 (vLLM's default "
                      "for LLM(...))", p.stdout)

    def test_refusals(self):
        p = run(*self.BASE, "--context", "64", "--max-num-seqs", "4096")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(p.stderr.strip(), "memplan: error: max_num_batched_tokens (2048, vLLM's default) is under "
                         "max_num_seqs (4096, --max-num-seqs): vLLM refuses to start (SchedulerConfig._verify_args); "
                         "give --max-batched-tokens of at least 4096 or fewer --max-num-seqs")
        p = run(*self.BASE, "--context", "64", "--max-num-seqs", "300", "--max-batched-tokens", "256")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("max_num_batched_tokens (256, --max-batched-tokens) is under max_num_seqs (300", p.stderr)
        p = run(*self.BASE, "--context", "64", "--usage-context", "llm", "--engine-version", "0.7.3")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1)
        self.assertIn("--usage-context llm with --engine-version 0.7.3: V0's default step is read for `vllm serve` "
                      "only", p.stderr)
        p = run(*self.BASE, "--context", "64", "--usage-context", "cli")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--usage-context", p.stderr)
        p = subprocess.run([BIN, "serve", KV, "--engine", "sglang", "--memory", "1GiB", "--usage-context", "llm"],
                           cwd=SRC, capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--usage-context", p.stderr)


if __name__ == "__main__":
    unittest.main()
