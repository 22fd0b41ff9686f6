"""`memplan serve` on a mixture of experts from its config.json (a tiny qwen3_moe), numbers by hand.

The config: 2 layers, both sparse; hidden 16, 4 query heads, 2 KV heads, head_dim 4; 4 experts of width 8, top-2,
norm_topk_prob; vocab 64 (a multiple of vLLM's padding of 64), untied head, 256 positions, stored float16.

serve --engine vllm (cost_models/vllm_fused_moe.h, report/serve_vllm_moe.cc) replaces each sparse block's
per-expert gather, MLP and scatter by vLLM's fused MoE kernel. At a profile step of T = 64 tokens, k = 2, E = 4,
H = 16, I = 8 (tp 1: I_p = 8, N = 2 I_p = 16), d = 2 (fp16):
  fused_topk            64 x 2 x (4 + 4 + 4)                      = 1,536
  moe_align_block_size  B = 64 (get_default_config: M = 64 > E = 4); sorted_ids 64 x 2 + 4 x 63 = 380,
                        expert_ids cdiv(380, 64) = 6, num_tokens_post_pad 1: (380 + 6 + 1) x 4 = 1,548
  cache13               M x k x max(N, H) x d = 64 x 2 x 16 x 2      = 4,096
  cache2                M x k x N / 2 x d     = 64 x 2 x 8 x 2       = 2,048
  output                T x H x d             = 64 x 16 x 2          = 2,048
  kernel                                                             = 11,276
At --tp 2: I_p = 4, N = 8: cache13 64 x 2 x max(8, 16) x 2 = 4,096, cache2 64 x 2 x 4 x 2 = 1,024: 10,252.
Expert weights (w13 [E, 2 I_p, H], w2 [E, H, I_p]): 3 x 4 x 16 x 8 x 2 = 3,072 B a layer, 6,144 for both; 3,072 a
rank at tp 2.
Weights at tp 1, elements: per layer q 16x16, k and v 16x8, o 16x16 (768), q_norm and k_norm 4 each, two norms of
16 (40), the router 4x16 (64), the experts 1,536: 2,408; x 2 layers + embedding 64x16 + head 16x64 + final norm 16 =
6,880 elements = 13,760 B; vLLM's rotary cache [256 positions, 4] in fp16, 2,048 B; and the graph's rotary inverse
frequencies, a [1, 2] constant, 4 B in fp16 (as in the dense decoders' graphs): 15,812.
At tp 2, a rank: q and o halves (128 each), one KV head of k and v (64 each), the norms whole (40), the router whole
(vLLM's ReplicatedLinear: 64), the experts' halves (768): 1,256 a layer, x 2 + embedding and head halves (512 each)
+ norm 16 = 3,552 elements = 7,104 B, + the rotary cache 2,048 + the inverse frequencies 4 = 9,156 (the router split
as a column-parallel layer would give 2 x 32 x 2 = 128 B less).
"""
import json
import os
import unittest

import jsonschema

from tiny_serve import SRC, VLLM, TinyConfigCase, run, write_config


def tiny_moe_config(directory, **overrides):
    config = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 16,
              "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 4, "vocab_size": 64, "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
              "rope_theta": 1000000.0, "tie_word_embeddings": False, "torch_dtype": "float16", "hidden_act": "silu",
              "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 8, "norm_topk_prob": True,
              "decoder_sparse_step": 1, "mlp_only_layers": [], "output_router_logits": False,
              "router_aux_loss_coef": 0.001, "attention_bias": False}
    return write_config(directory, config, **overrides)



class FusedMoeByHand(TinyConfigCase):
    make_config = staticmethod(tiny_moe_config)

    def test_kernel_buffers_and_expert_weights(self):
        j = self.vllm()
        moe = j["replaced"]["fused_moe"]
        self.assertEqual(moe["kernel"], "vllm fused_experts")
        self.assertEqual((moe["sparse_layers"], moe["experts"], moe["top_k"]), (2, 4, 2))
        self.assertEqual((moe["expert_intermediate_size"], moe["expert_intermediate_size_per_rank"]), (8, 8))
        self.assertEqual((moe["chunk_tokens"], moe["block_size_m"]), (64, 64))
        self.assertEqual(moe["topk_bytes"], 1536)
        self.assertEqual(moe["align_bytes"], 1548)
        self.assertEqual(moe["cache13_bytes"], 4096)
        self.assertEqual(moe["cache2_bytes"], 2048)
        self.assertEqual(moe["output_bytes"], 2048)
        self.assertEqual(moe["kernel_bytes"], 11276)
        self.assertEqual(moe["expert_weight_bytes"], 6144)
        self.assertEqual(j["memory"]["weights_bytes"], 15812)
        # The kernel's buffers are placed on top of what the router's step holds, which includes the weights.
        self.assertGreater(moe["peak_allocated_bytes"], 15812 + 11276)
        self.assertGreaterEqual(j["profile_run"]["forward_peak_allocated_bytes"], moe["peak_allocated_bytes"])
        with open(os.path.join(SRC, "docs", "schemas", "serve.vllm.schema.json")) as f:
            jsonschema.validate(j, json.load(f))

    def test_the_kernel_sets_the_forward_peak_when_it_is_the_largest(self):
        # Experts 1,024 wide: cache13 64 x 2 x 2,048 x 2 = 524,288 and cache2 64 x 2 x 1,024 x 2 = 262,144 outweigh
        # every other tensor of the 64-token step (the widest, the router's logits and the hidden states, are
        # 64 x 16 x 2 = 2,048 B), so the forward's peak is the router's step plus the kernel's 791,564 B
        # (1,536 + 1,548 + 524,288 + 262,144 + 2,048), and vLLM's rotary cache (2,048 B, allocated with the
        # weights, outside the graph) on top.
        wide = tiny_moe_config(self.dir.name, moe_intermediate_size=1024)
        p = run("serve", wide, *VLLM)
        self.assertEqual(p.returncode, 0, p.stderr)
        j = json.loads(p.stdout)
        moe = j["replaced"]["fused_moe"]
        self.assertEqual(moe["kernel_bytes"], 791564)
        self.assertEqual(j["memory"]["rotary_cache_bytes"], 2048)
        self.assertEqual(j["profile_run"]["forward_peak_allocated_bytes"], moe["peak_allocated_bytes"] + 2048)
        # Below the kernel, the router's step holds the graph's weights and PyTorch's cuBLAS workspace (32 MiB).
        self.assertGreater(moe["peak_allocated_bytes"] - moe["kernel_bytes"],
                           j["memory"]["weights_bytes"] - 2048 + (32 << 20))

    def test_tensor_parallel_splits_the_experts_as_fused_moe(self):
        j = self.vllm("--tp", "2")
        moe = j["replaced"]["fused_moe"]
        self.assertEqual(moe["expert_intermediate_size_per_rank"], 4)
        self.assertEqual(moe["cache2_bytes"], 1024)
        self.assertEqual(moe["kernel_bytes"], 10252)
        self.assertEqual(moe["expert_weight_bytes"], 3072)
        self.assertEqual(j["memory"]["weights_bytes"], 9156)
        # tp 3 divides neither the experts' width 8 nor the heads: one message, exit 2.
        p = run("serve", self.config, *VLLM, "--tp", "3")
        self.assertEqual(p.returncode, 2)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)

    def test_the_replacement_is_named_in_the_text(self):
        p = run("serve", self.config, *VLLM[:-1])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("the experts of 2 sparse layers by vLLM's fused MoE kernel (fused_experts: 4 experts, top-2",
                      p.stdout)

    def test_routing_is_the_eager_engines(self):
        # vLLM's kernel sizes its buffers by tokens x k whatever the routing: --moe-routing is eager's, refused
        # with vllm naming both.
        p = run("serve", self.config, *VLLM, "--moe-routing", "worst")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--moe-routing with --engine vllm", p.stderr)
        # Eager runs the exported graph with the routing's token counts (hf_moe_vs_torch checks each expert's rows
        # and eager's answers against torch's export for both rules): at a 512-token prefill, worst (experts 0 and
        # 1 each gather all 512 tokens) and balanced (each expert 512 x 2 / 4 = 256) are other programs, and
        # balanced is the default.
        eager = ["--engine", "eager", "--runtime", "ideal", "--graph", "decode", "--memory", "1GiB", "--context",
                 "64", "--max-batched-tokens", "512", "--json"]
        answers = {}
        for routing in ("balanced", "worst"):
            p = run("serve", self.config, *eager, "--moe-routing", routing)
            self.assertEqual(p.returncode, 0, p.stderr)
            answers[routing] = json.loads(p.stdout)
        default = run("serve", self.config, *eager)
        self.assertEqual(json.loads(default.stdout), answers["balanced"])
        self.assertNotEqual(answers["worst"]["prefill"]["required_bytes"],
                            answers["balanced"]["prefill"]["required_bytes"])

    def test_lora_and_quantization_are_refused_with_experts(self):
        # gptq's experts (vLLM's gptq MoE methods) are not sized; fp8's are (test_serve_fp8_moe.py).
        for extra, flag in ((["--enable-lora"], "--enable-lora"), (["--quantization", "gptq"], "--quantization")):
            p = run("serve", self.config, *VLLM, *extra)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(flag, p.stderr)
            self.assertIn("fused MoE kernel", p.stderr)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)

    def test_a_width_tp_does_not_divide_is_refused_naming_the_stacked_weight(self):
        # Experts 6 wide at --tp 4: vLLM's FusedMoE gives each rank 6 // 4 of every expert's gate and up; the engines'
        # graph holds them as its w13_weight [E, H, 2I] (2I = 12 splits, I = 6 does not): the plan names that weight.
        config = tiny_moe_config(self.dir.name, moe_intermediate_size=6)
        p = run("serve", config, *VLLM, "--tp", "4")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--tp 4 does not divide the 6 output features of each expert's gate and up in the stacked "
                      "column-parallel weight 'layers.0.mlp.experts.w13_weight'", p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)


class ExpertParallelByHand(TinyConfigCase):
    """--enable-expert-parallel (cost_models/vllm_expert_parallel.h) on the tiny qwen3_moe, by hand.

    At --tp 2 vLLM's FusedMoE gets tp_size 1 and ep_size 2: each rank holds E / 2 = 2 whole experts, I_p = I = 8
    (determine_expert_map; rank 0 holds ceil(E / 2) when 2 does not divide E), and an int32 expert_map [E] a layer.
      expert weights a rank   2 experts x 3 x 16 x 8 x 2 B = 1,536 a layer, 3,072 for both: tensor parallelism's
                              halves of 4 experts are 3,072 too (4 x 3 x 16 x 4 x 2 x 2)
      expert maps             2 layers x 4 x 4 B = 32
      weights                 tensor parallelism's 9,156 (FusedMoeByHand) - 3,072 + 3,072 + 32 = 9,188
    Attention, the norms, the router (replicated) and the vocabulary stay as under --tp 2. The kernel runs at the
    full width with the global E in its alignment: N = 2 I = 16, M = 64 > E_local = 2 so B = 64;
      fused_topk 1,536; alignment (over E = 4) 1,548; cache13 64 x 2 x max(16, 16) x 2 = 4,096;
      cache2 64 x 2 x 8 x 2 = 2,048; output 2,048: 11,276 (--tp 1's), where --tp 2 without the flag has 10,252.
    """
    make_config = staticmethod(tiny_moe_config)

    def test_whole_experts_a_rank_and_the_kernel_at_full_width(self):
        j = self.vllm("--tp", "2", "--enable-expert-parallel")
        moe = j["replaced"]["fused_moe"]
        self.assertTrue(j["settings"]["enable_expert_parallel"])
        self.assertEqual((moe["expert_parallel_size"], moe["local_experts"]), (2, 2))
        self.assertEqual(moe["expert_intermediate_size_per_rank"], 8)
        self.assertEqual(moe["expert_weight_bytes"], 3072)
        self.assertEqual(moe["expert_map_bytes"], 32)
        self.assertEqual(j["memory"]["weights_bytes"], 9188)
        self.assertEqual((moe["block_size_m"], moe["align_bytes"]), (64, 1548))
        self.assertEqual((moe["cache13_bytes"], moe["cache2_bytes"]), (4096, 2048))
        self.assertEqual(moe["kernel_bytes"], 11276)
        # The KV cache is attention's, split by --tp as before: one KV head a rank.
        tp = self.vllm("--tp", "2")
        self.assertFalse(tp["settings"]["enable_expert_parallel"])
        self.assertEqual((tp["replaced"]["fused_moe"]["expert_parallel_size"], tp["replaced"]["fused_moe"]["local_experts"]), (1, 4))
        self.assertEqual(j["kv_cache"]["bytes_per_token"], tp["kv_cache"]["bytes_per_token"])
        with open(os.path.join(SRC, "docs", "schemas", "serve.vllm.schema.json")) as f:
            jsonschema.validate(j, json.load(f))

    def test_the_wider_kernel_costs_kv_blocks(self):
        # Experts 1,024 wide (the kernel sets the forward's peak, FusedMoeByHand): at --tp 2 tensor parallelism runs
        # I_p = 512: cache13 64 x 2 x 1,024 x 2 = 262,144, cache2 64 x 2 x 512 x 2 = 131,072, kernel 398,348; expert
        # parallelism I = 1,024: 524,288 + 262,144, kernel 791,564 (393,216 more). The expert weights are equal
        # (4 x 3 x 16 x 512 x 2 x 2 = 2 x 3 x 16 x 1,024 x 2 x 2 = 393,216), the maps add 32: the profile's peak and
        # the weights together take 393,216 + 32 = 393,248 B more of the same budget, so the KV cache has that much
        # less: blocks of 16 tokens x 2 layers x (K, V) x 1 head x 4 x 2 B = 512 B.
        wide = tiny_moe_config(self.dir.name, moe_intermediate_size=1024)
        runs = {}
        for extra in ((), ("--enable-expert-parallel",)):
            p = run("serve", wide, *VLLM, "--tp", "2", *extra)
            self.assertEqual(p.returncode, 0, p.stderr)
            runs[extra] = json.loads(p.stdout)
        tp, ep = runs[()], runs[("--enable-expert-parallel",)]
        self.assertEqual(tp["replaced"]["fused_moe"]["kernel_bytes"], 398348)
        self.assertEqual(ep["replaced"]["fused_moe"]["kernel_bytes"], 791564)
        self.assertEqual(ep["memory"]["weights_bytes"] - tp["memory"]["weights_bytes"], 32)
        self.assertEqual(ep["profile_run"]["forward_peak_allocated_bytes"] - tp["profile_run"]["forward_peak_allocated_bytes"],
                         393248)
        available = tp["memory"]["available_kv_cache_bytes"] - 393248
        self.assertEqual(ep["memory"]["available_kv_cache_bytes"], available)
        self.assertEqual(ep["kv_cache"]["block_bytes"], 512)
        blocks = available // 512
        self.assertEqual(ep["num_gpu_blocks"], blocks)
        # One more block does not fit.
        self.assertGreater((blocks + 1) * 512, available)
        self.assertLess(ep["num_gpu_blocks"], tp["num_gpu_blocks"])

    def test_an_expert_count_the_gpus_do_not_divide(self):
        # E = 5 at --tp 2: base 2, remainder 1, so rank 0 holds 3 whole experts (rank 1: 2). Elements a layer on
        # rank 0, the experts aside: q and o halves 128 each, k and v one head 64 each, norms 40, the router 5 x 16 =
        # 80 (replicated): 504. Tensor parallelism: + 5 x 3 x 16 x 4 = 960; x 2 layers + embedding and head halves
        # 1,024 + norm 16 = 3,968 elements = 7,936 B + rotary cache 2,048 + inverse frequencies 4 = 9,988.
        # Expert parallelism: + 3 x 3 x 16 x 8 = 1,152: (504 + 1,152) x 2 + 1,040 = 4,352 elements = 8,704 B + 2,052
        # + maps 2 x 5 x 4 = 40: 10,796, 808 more than tensor parallelism's.
        five = tiny_moe_config(self.dir.name, num_experts=5)
        answers = {}
        for extra in ((), ("--enable-expert-parallel",)):
            p = run("serve", five, *VLLM, "--tp", "2", *extra)
            self.assertEqual(p.returncode, 0, p.stderr)
            answers[extra] = json.loads(p.stdout)
        self.assertEqual(answers[()]["memory"]["weights_bytes"], 9988)
        ep = answers[("--enable-expert-parallel",)]
        self.assertEqual(ep["replaced"]["fused_moe"]["local_experts"], 3)
        self.assertEqual(ep["replaced"]["fused_moe"]["expert_weight_bytes"], 2 * 3 * 3 * 16 * 8 * 2)
        self.assertEqual(ep["memory"]["weights_bytes"], 10796)
        # 0.8's determine_expert_map gave the last rank every remaining expert: refused there, named.
        p = run("serve", five, *VLLM, "--tp", "2", "--enable-expert-parallel", "--engine-version", "0.8")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--engine-version 0.8", p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        # 0.9.2 to 0.10.0 kept that map (PR #21497 changed it in 0.10.1): refused; 0.10.1 deals them as sized here,
        # the same 10,796 B of weights (its custom all-reduce is in the non-torch term, not the weights).
        for version in ("0.9.2", "0.10.0", "0.10"):
            p = run("serve", five, *VLLM, "--tp", "2", "--enable-expert-parallel", "--engine-version", version)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(f"--engine-version {version}", p.stderr)
            self.assertIn("determine_expert_map gave the last rank every remaining expert", p.stderr)
        p = run("serve", five, *VLLM, "--tp", "2", "--enable-expert-parallel", "--engine-version", "0.10.1")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout)["memory"]["weights_bytes"], 10796)

    def test_one_gpu_runs_without_it_as_vllm_does(self):
        # FusedMoEParallelConfig.make: use_ep needs tp x dp > 1; vLLM takes the flag and holds every expert.
        self.assertEqual(self.vllm("--enable-expert-parallel"), self.vllm())

    def test_qwen3_30b_weights_a_rank_at_tp_2(self):
        # The published Qwen3-30B-A3B (48 layers, H 2048, 32 query heads and 4 KV heads of 128, E = 128 of I = 768,
        # vocab 151,936, untied, bf16) at --tp 2 with expert parallelism, rank 0's elements a layer:
        #   q and o halves 2 x 2048 x 2048 = 8,388,608; k and v halves 2 x 2048 x 256 = 1,048,576; q_norm, k_norm
        #   2 x 128 and two norms 2 x 2048 = 4,352; the router 128 x 2048 = 262,144 (replicated);
        #   64 whole experts 64 x 3 x 2048 x 768 = 301,989,888: 311,693,568 a layer, x 48 = 14,961,291,264;
        #   embedding and head halves 2 x 151,936 x 1024 = 311,164,928 (151,936 is a multiple of 64: no padding),
        #   final norm 2048: 15,272,458,240 elements = 30,544,916,480 B;
        # + vLLM's rotary cache 40,960 x 128 x 2 = 10,485,760, the graph's inverse frequencies [1, 64] x 2 = 128 and
        # the expert maps 48 x 128 x 4 = 24,576: 30,555,426,944 B. Tensor parallelism's halves of all 128 experts
        # are the same expert bytes (128 x 3 x 2048 x 384): 24,576 B less, 30,555,402,368.
        qwen3 = os.path.join(SRC, "tests", "models", "hf_configs", "Qwen3-30B-A3B.json")
        common = ["--graph", "decode", "--engine", "vllm", "--gpu", "H100-80GB", "--context", "32768", "--tp", "2",
                  "--json"]
        weights = {}
        for extra in ((), ("--enable-expert-parallel",)):
            p = run("serve", qwen3, *common, *extra)
            self.assertEqual(p.returncode, 0, p.stderr)
            j = json.loads(p.stdout)
            weights[extra] = j["memory"]["weights_bytes"]
        self.assertEqual(weights[("--enable-expert-parallel",)], 30555426944)
        self.assertEqual(weights[()], 30555402368)
        self.assertEqual(j["replaced"]["fused_moe"]["local_experts"], 64)

    def test_refusals(self):
        # Another engine: the flag is vLLM's.
        p = run("serve", self.config, "--engine", "sglang", "--memory", "1GiB", "--context", "64",
                "--enable-expert-parallel")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--enable-expert-parallel", p.stderr)
        # Quantized experts other than fp8's: expert parallelism is sized for UnquantizedFusedMoEMethod's and
        # Fp8MoEMethod's only.
        p = run("serve", self.config, *VLLM, "--tp", "2", "--enable-expert-parallel", "--quantization", "gptq")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--enable-expert-parallel with", p.stderr)
        self.assertIn("quantized experts", p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        # A dense model has no experts to split.
        from test_serve import tiny_llama_config
        dense = tiny_llama_config(self.dir.name)
        p = run("serve", dense, *VLLM, "--tp", "2", "--enable-expert-parallel")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("no mixture-of-experts layer", p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        # gpt-oss's MXFP4 experts: vLLM's Triton MXFP4 kernel is not sized under expert parallelism.
        gpt_oss = os.path.join(SRC, "tests", "models", "hf_configs", "gpt-oss-20b.json")
        p = run("serve", gpt_oss, "--graph", "decode", "--engine", "vllm", "--gpu", "H100-80GB", "--context", "8192", "--tp",
                "2", "--enable-expert-parallel")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("MXFP4", p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)


if __name__ == "__main__":
    unittest.main()
