"""`memplan serve --engine vllm --data-parallel-size D` (cost_models/vllm_expert_parallel.h), numbers by hand.

The tiny qwen3_moe of test_serve_moe.py (2 sparse layers, H 16, 2 KV heads of 4, E 4 of width I 8, top-2, vocab 64,
fp16) at the tiny serve budget (1 GiB, 64-token step). With --enable-expert-parallel at --data-parallel-size 2 the
expert-parallel group is dp x tp GPUs (FusedMoEParallelConfig.make), and the naive dispatch hands the fused MoE
kernel the tokens of both DP ranks: the profile run's 64 on each, 128 in all (every rank profiles in lockstep).

dp 2 x tp 1 with EP, I 8: ep_size 2, rank 0 holds E / 2 = 2 whole experts; the kernel on T = 128 tokens, M = 128 >
E_local 2 so B = 64, the alignment over the global E 4:
  fused_topk   128 x 2 x (4 + 4 + 4)                                    = 3,072
  alignment    sorted 128 x 2 + 4 x 63 = 508; expert_ids cdiv(508, 64) = 8; (508 + 8 + 1) x 4 = 2,068
  cache13      128 x 2 x max(16, 16) x 2                                = 8,192
  cache2       128 x 2 x 8 x 2                                          = 4,096
  output       128 x 16 x 2                                             = 4,096
  kernel                                                                = 21,524
  dispatch     hidden states and router logits [128, 16 + 4] x 2 B      = 5,120
  combine      naive's all-reduce of the output, 128 x 16 x 2           = 4,096 (output + it, 8,192 < the kernel's)
Weights: tp 1's 15,812 (test_serve_moe.py) less the graph's experts 2 x 4 x 3 x 16 x 8 x 2 = 6,144, plus rank 0's
2 x 2 x 3 x 16 x 8 x 2 = 3,072 and the maps 2 layers x 4 x 4 B = 32: 12,772.
dp 2 x tp 2 with EP: ep_size 4, one whole expert a rank; the kernel as above (T 128, I 8, B 64, global E 4):
21,524; weights: tp 2's 9,156 less the graph's halves of the experts 2 x 4 x 3 x 16 x 4 x 2 = 3,072, plus
2 x 1 x 3 x 16 x 8 x 2 = 1,536 and the maps 32: 7,652.
"""
import json
import os
import unittest

import jsonschema

from test_serve_fp8_block import Fp8Case, mla_config
from test_serve_moe import tiny_moe_config
from tiny_serve import SRC, VLLM, TinyConfigCase, run

DP2 = ("--data-parallel-size", "2", "--enable-expert-parallel")


class DataParallelByHand(TinyConfigCase):
    make_config = staticmethod(tiny_moe_config)

    def test_dp2_tp1_experts_kernel_and_dispatch(self):
        j = self.vllm(*DP2)
        moe = j["replaced"]["fused_moe"]
        self.assertEqual(j["settings"]["data_parallel_size"], 2)
        self.assertTrue(j["settings"]["enable_expert_parallel"])
        self.assertEqual((moe["expert_parallel_size"], moe["local_experts"]), (2, 2))
        self.assertEqual(moe["expert_intermediate_size_per_rank"], 8)
        self.assertEqual(moe["kernel_tokens"], 128)
        self.assertEqual((moe["chunk_tokens"], moe["block_size_m"]), (128, 64))
        self.assertEqual((moe["topk_bytes"], moe["align_bytes"]), (3072, 2068))
        self.assertEqual((moe["cache13_bytes"], moe["cache2_bytes"], moe["output_bytes"]), (8192, 4096, 4096))
        self.assertEqual(moe["kernel_bytes"], 21524)
        self.assertEqual((moe["dp_dispatch_bytes"], moe["dp_combine_bytes"]), (5120, 4096))
        self.assertEqual(moe["expert_weight_bytes"], 3072)
        self.assertEqual(moe["expert_map_bytes"], 32)
        self.assertEqual(j["memory"]["weights_bytes"], 12772)
        # The router's step is tp 1's (the same graph): the peak there is 5,120 + 21,524 = 26,644 above it, where
        # dp 1 has the kernel's 11,276.
        one = self.vllm()["replaced"]["fused_moe"]
        self.assertEqual(moe["peak_allocated_bytes"] - 26644, one["peak_allocated_bytes"] - 11276)
        # Each DP rank is an engine with its own cache: the total is twice rank 0's.
        self.assertEqual(j["gpu_kv_cache_tokens_all_dp_ranks"], 2 * j["gpu_kv_cache_tokens"])
        with open(os.path.join(SRC, "docs", "schemas", "serve.vllm.schema.json")) as f:
            jsonschema.validate(j, json.load(f))

    def test_dp2_tp2_one_expert_a_rank(self):
        j = self.vllm("--tp", "2", *DP2)
        moe = j["replaced"]["fused_moe"]
        self.assertEqual((moe["expert_parallel_size"], moe["local_experts"]), (4, 1))
        self.assertEqual(moe["kernel_tokens"], 128)
        self.assertEqual(moe["kernel_bytes"], 21524)
        self.assertEqual(moe["dp_dispatch_bytes"], 5120)
        self.assertEqual(moe["expert_weight_bytes"], 1536)
        self.assertEqual(j["memory"]["weights_bytes"], 7652)
        # Attention stays split by --tp inside each DP rank: one KV head a rank, 2 layers x (K, V) x 4 x 2 = 32 B.
        self.assertEqual(j["kv_cache"]["kv_heads_per_rank"], 1)
        self.assertEqual(j["kv_cache"]["bytes_per_token"], 32)

    def test_the_gathered_tokens_cost_kv_blocks(self):
        # Experts 1,024 wide, where the kernel sets the forward's peak (test_serve_moe.py). dp 1 x tp 1: the kernel
        # 791,564 (1,536 + 1,548 + 524,288 + 262,144 + 2,048), the graph's experts 2 x 4 x 3 x 16 x 1,024 x 2 =
        # 786,432. dp 2 x tp 1 with EP: the kernel on 128 tokens, I 1,024 whole: 3,072 + 2,068 + cache13
        # 128 x 2 x 2,048 x 2 = 1,048,576 + cache2 128 x 2 x 1,024 x 2 = 524,288 + output 4,096 = 1,582,100, the
        # dispatch 5,120 (combine 4,096: output + it 8,192, below); rank 0's 2 experts 393,216 and maps 32.
        #   forward peak  (1,582,100 + 5,120 - 791,564) + (393,216 + 32 - 786,432) = 795,656 - 393,184 = 402,472 more
        # and the weights are part of that peak: the KV cache has 402,472 B less. Blocks of 16 tokens x 2 layers x
        # (K, V) x 2 heads x 4 x 2 B = 1,024 B.
        wide = tiny_moe_config(self.dir.name, moe_intermediate_size=1024)
        runs = {}
        for extra in ((), DP2):
            p = run("serve", wide, *VLLM, *extra)
            self.assertEqual(p.returncode, 0, p.stderr)
            runs[extra] = json.loads(p.stdout)
        one, dp = runs[()], runs[DP2]
        self.assertEqual(dp["replaced"]["fused_moe"]["kernel_bytes"], 1582100)
        self.assertEqual(dp["memory"]["weights_bytes"] - one["memory"]["weights_bytes"], -393184)
        self.assertEqual(dp["profile_run"]["forward_peak_allocated_bytes"] -
                         one["profile_run"]["forward_peak_allocated_bytes"], 402472)
        available = one["memory"]["available_kv_cache_bytes"] - 402472
        self.assertEqual(dp["memory"]["available_kv_cache_bytes"], available)
        self.assertEqual(dp["kv_cache"]["block_bytes"], 1024)
        blocks = available // 1024
        self.assertEqual(dp["num_gpu_blocks"], blocks)
        self.assertGreater((blocks + 1) * 1024, available)  # one more block does not fit
        self.assertEqual(dp["gpu_kv_cache_tokens"], blocks * 16)
        self.assertEqual(dp["gpu_kv_cache_tokens_all_dp_ranks"], 2 * blocks * 16)

    def test_dp2_tp2_wide_against_tp2_expert_parallel(self):
        # tp 2 with EP (dp 1): kernel 791,564, rank 0's 2 experts 2 x 2 x 3 x 16 x 1,024 x 2 = 393,216. dp 2 x tp 2:
        # one expert a rank, 196,608; the kernel 1,582,100 and dispatch 5,120 as above; the maps 32 both.
        #   forward peak (1,582,100 + 5,120 - 791,564) - 196,608 = 599,048 more; blocks of 16 x 2 x 2 x 1 x 4 x 2 = 512 B.
        wide = tiny_moe_config(self.dir.name, moe_intermediate_size=1024)
        runs = {}
        for extra in (("--enable-expert-parallel",), DP2):
            p = run("serve", wide, *VLLM, "--tp", "2", *extra)
            self.assertEqual(p.returncode, 0, p.stderr)
            runs[extra] = json.loads(p.stdout)
        tp, dp = runs[("--enable-expert-parallel",)], runs[DP2]
        self.assertEqual(dp["profile_run"]["forward_peak_allocated_bytes"] -
                         tp["profile_run"]["forward_peak_allocated_bytes"], 599048)
        available = tp["memory"]["available_kv_cache_bytes"] - 599048
        self.assertEqual(dp["memory"]["available_kv_cache_bytes"], available)
        blocks = available // 512
        self.assertEqual(dp["num_gpu_blocks"], blocks)
        self.assertGreater((blocks + 1) * 512, available)

    def test_the_text_names_the_ranks(self):
        p = run("serve", self.config, *[a for a in VLLM if a != "--json"], *DP2)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("2 data-parallel ranks x --tp 1", p.stdout)
        self.assertIn("each of the 2 ranks sizes its own cache", p.stdout)

    def test_a_dense_model_is_a_replica(self):
        # No experts: each DP rank is the one-rank answer (nothing is gathered), its tokens twice in all.
        from test_serve import tiny_llama_config
        dense = tiny_llama_config(self.dir.name)
        answers = {}
        for extra in ((), ("--data-parallel-size", "2")):
            p = run("serve", dense, *VLLM, *extra)
            self.assertEqual(p.returncode, 0, p.stderr)
            answers[extra] = json.loads(p.stdout)
        one, two = answers[()], answers[("--data-parallel-size", "2")]
        self.assertEqual(two["memory"], one["memory"])
        self.assertEqual(two["gpu_kv_cache_tokens"], one["gpu_kv_cache_tokens"])
        self.assertEqual(two["gpu_kv_cache_tokens_all_dp_ranks"], 2 * one["gpu_kv_cache_tokens"])

    def test_refusals(self):
        cases = (
            # The experts without expert parallelism: vLLM splits each one's width over dp x tp (not sized).
            (("--data-parallel-size", "2"), "without --enable-expert-parallel"),
            # 0.8's own multicast.
            (("--data-parallel-size", "2", "--enable-expert-parallel", "--engine-version", "0.8"), "0.8"),
            (("--data-parallel-size", "0"), "--data-parallel-size"),
        )
        # Another engine: the flag is vLLM's.
        p = run("serve", self.config, "--graph", "decode", "--engine", "sglang", "--memory", "1GiB", "--context", "64",
                "--data-parallel-size", "2")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--data-parallel-size", p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        # --engine all runs the vLLM analysis for each engine: refused there too, naming the engine.
        p = run("serve", self.config, "--graph", "decode", "--engine", "all", "--memory", "1GiB", "--context", "64",
                "--data-parallel-size", "2", "--enable-expert-parallel")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--data-parallel-size", p.stderr)
        for extra, text in cases:
            p = run("serve", self.config, *VLLM, *extra)
            self.assertEqual(p.returncode, 2, (extra, p.stderr))
            self.assertIn(text, p.stderr)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)


class Fp8DataParallelByHand(Fp8Case):
    """The tiny deepseek_v3 of test_serve_fp8_block.py (H 256, 4 experts of I 256, top-2, one sparse layer, MLA) with
    its block-wise fp8 quantization_config at dp 2 x tp 1 with EP: rank 0 holds 2 experts whole, the kernel on
    2 x 64 = 128 tokens (B 64, Fp8MoEMethod's block config), the served type bfloat16:
      fp8 experts   2 x 3 x 256 x 256 = 393,216 B; scales w13 [2, 4, 2] + w2 [2, 2, 2] = 24 x 4 B = 96; map [4] x 4 = 16
      kernel        top-k 128 x 2 x 12 = 3,072; alignment (508 + 8 + 1) x 4 = 2,068; cache13 128 x 2 x max(512,
                    256) x 2 = 262,144; cache2 128 x 2 x 256 x 2 = 131,072; output 128 x 256 x 2 = 65,536: 463,892
      quantized     the input 128 x 256 + 128 x 2 x 4 = 33,792; the intermediate (128 x 2) x 256 + 256 x 2 x 4 =
                    67,584: 101,376
      dispatch      128 x (256 + 4) x 2 = 66,560 (combine 65,536: the output and it, 131,072, below the kernel's)
    At dp 1 x tp 1 (every expert, 64 tokens): top-k 1,536, alignment (380 + 6 + 1) x 4 = 1,548, cache13 64 x 2 x 512
    x 2 = 131,072, cache2 65,536, output 32,768: 232,460, with quantized activations 50,688: 283,148. The router's
    step is the same graph's: the MoE peak is 66,560 + 463,892 + 101,376 - 283,148 = 348,680 higher. The weights:
    393,216 + 96 + 16 - (786,432 + 192) = 393,296 lower.
    """
    make_config = staticmethod(mla_config)

    def test_dp2_fp8_experts_and_gathered_tokens(self):
        _, one = self.pair()
        _, dp = self.pair(*DP2)
        f, moe = dp["replaced"]["fp8_block"], dp["replaced"]["fused_moe"]
        self.assertEqual((f["expert_fp8_bytes"], f["expert_scale_bytes"]), (393216, 96))
        self.assertEqual((moe["local_experts"], moe["expert_map_bytes"]), (2, 16))
        self.assertEqual(moe["kernel_tokens"], 128)
        self.assertEqual(moe["kernel_bytes"], 463892)
        self.assertEqual(f["moe_quantized_activation_bytes"], 101376)
        self.assertEqual((moe["dp_dispatch_bytes"], moe["dp_combine_bytes"]), (66560, 65536))
        self.assertEqual(moe["peak_allocated_bytes"] - one["replaced"]["fused_moe"]["peak_allocated_bytes"], 348680)
        self.assertEqual(one["memory"]["weights_bytes"] - dp["memory"]["weights_bytes"], 393296)


if __name__ == "__main__":
    unittest.main()
