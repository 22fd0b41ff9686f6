"""`memplan serve --engine vllm --engine-version 0.14` and later on a mixture of experts: the unquantized and fp8
experts in vLLM's modular kernel (TritonExperts), whose workspaces are one WorkspaceManager buffer held from the
first MoE layer to the end of the profile run (cost_models/vllm_fused_moe.h; a helper's reading,
docs/research/vllm-modular-moe-versions.md), against 0.11's per-call buffers. Numbers by hand.

Tiny qwen3_moe of test_serve_fp8_moe.py (hidden 256, 4 experts of 128, top-2), bf16, 64 tokens a profile step
(M·k = 128 pairs):
  0.11 fused_experts a call: fused_topk 128 x 12 = 1,536; moe_align_block_size at 64 (64 tokens > 4 experts):
    128 + 4 x 63 = 380 ids, 6 blocks and 1: 1,548; cache13 128 x max(256, 256) x 2 = 65,536; cache2 128 x 128 x 2 =
    32,768; output 64 x 256 x 2 = 32,768: 134,156.
  0.14 TritonExperts: the workspace, workspace13 128 x max(128, 256) x 2 = 65,536 and workspace2 128 x max(256, 256)
    x 2 = 65,536 (each a multiple of 256 B): 131,072, held; a call 1,536 + 1,548 + 32,768 = 35,852. At the router
    the MoE's peak is 35,852 + 131,072 - 134,156 = 32,768 B above 0.11's; the sampler's warm-up, which sets both
    answers' activation peak, runs with the workspace held: 131,072 B more.
Tiny mixtral (hidden 256, 4 experts of 256, top-2), per-tensor static fp8: 0.11's call 1,536 + 1,548 + 128 x 512 x 2
  + 128 x 256 x 2 + 32,768 = 232,460; 0.14's workspace 128 x 256 x 2 + 128 x 512 x 2 = 196,608 and call 35,852: the
  same bytes at the router (I >= H: nothing grows), the workspace held through the sampler (+196,608).
"""
import json
import tempfile
import unittest

from test_serve_fp8_moe import BLOCK, DYNAMIC, STATIC, mixtral_config, qwen3_moe_config
from tiny_serve import VLLM, run

GPT_OSS_ARGS = ["--graph", "decode", "--engine", "vllm", "--gpu", "A100-80GB"]


def step(tokens):
    """VLLM with --max-batched-tokens TOKENS."""
    at = VLLM.index("--max-batched-tokens") + 1
    return [*VLLM[:at], str(tokens), *VLLM[at + 1:]]


def serve(config, version, *extra, quantization=None):
    with tempfile.TemporaryDirectory() as d:
        path = config(d) if quantization is None else config(d, quantization_config=quantization)
        p = run("serve", path, *VLLM, "--engine-version", version, *extra)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


class ModularKernelByHand(unittest.TestCase):
    def test_gpt_oss_mxfp4_marlin_from_0_17(self):
        """gpt-oss-20b's MXFP4 experts on an A100 (Marlin; 108 SMs), the A100's default step of 2,048 tokens, k = 4,
        E = 32, H_pad = 3,072, I_pad = 2,944 (test_serve_mxfp4.py's A100 case has 0.11's call term by term). From
        0.17 (PR #34588) MarlinExperts in the modular kernel: cache13 and cache2 leave the call for the
        WorkspaceManager's buffer, workspace1 8,192 x max(2,944, 3,072) x 2 = 50,331,648 and workspace2 8,192 x
        max(5,888, 3,072) x 2 = 96,468,992: 146,800,640 held; the call keeps fused_topk 98,304, the alignment 41,476,
        the output and the padded input 12,582,912 each and c_tmp 28,311,552, and zeroes a lock workspace of
        108 x 4 int32, 1,728: 53,618,884. The layer is 0.16's (the same prepare_moe_fp4_layer_for_marlin)."""
        from test_serve_mxfp4 import GPT_OSS
        answers = {}
        for version in ("0.16", "0.17", "0.18"):
            p = run("serve", GPT_OSS, *GPT_OSS_ARGS, "--engine-version", version, "--json")
            self.assertEqual(p.returncode, 0, p.stderr)
            answers[version] = json.loads(p.stdout)["replaced"]["fused_moe"]
        old = answers["0.16"]
        self.assertEqual((old["kernel"], old["workspace_bytes"], old["lock_bytes"]), ("vllm fused_marlin_moe (mxfp4)", 0, 0))
        for version in ("0.17", "0.18"):
            n = answers[version]
            self.assertEqual(n["kernel"], "vllm modular MarlinExperts (mxfp4)")
            self.assertEqual((n["cache13_bytes"], n["cache2_bytes"], n["workspace_bytes"]), (0, 0, 146_800_640))
            self.assertEqual((n["output_bytes"], n["padded_input_bytes"], n["lock_bytes"]),
                             (12_582_912, 12_582_912, 1_728))
            self.assertEqual((n["topk_bytes"], n["align_bytes"], n["reduce_bytes"]), (98_304, 41_476, 28_311_552))
            self.assertEqual(n["kernel_bytes"], 53_618_884)
            self.assertEqual(n["expert_weight_bytes"], old["expert_weight_bytes"])

    def test_qwen3_moe_workspace_held(self):
        old, new = serve(qwen3_moe_config, "0.11"), serve(qwen3_moe_config, "0.14")
        o, n = old["replaced"]["fused_moe"], new["replaced"]["fused_moe"]
        self.assertEqual((o["kernel"], o["kernel_bytes"], o["workspace_bytes"]), ("vllm fused_experts", 134_156, 0))
        self.assertEqual((n["kernel"], n["kernel_bytes"], n["workspace_bytes"]),
                         ("vllm modular TritonExperts", 35_852, 131_072))
        self.assertEqual((n["cache13_bytes"], n["cache2_bytes"], n["output_bytes"]), (0, 0, 32_768))
        self.assertEqual(n["peak_allocated_bytes"] - o["peak_allocated_bytes"], 32_768)
        self.assertEqual((old["profile_run"]["peak_set_by"], new["profile_run"]["peak_set_by"]), ("sampler", "sampler"))
        self.assertEqual(new["memory"]["activation_peak_bytes"] - old["memory"]["activation_peak_bytes"], 131_072)
        # 0.13 is still 0.11's path (PR #31052 came after 0.13.0).
        self.assertEqual(serve(qwen3_moe_config, "0.13")["replaced"]["fused_moe"]["kernel_bytes"], 134_156)

    def test_0_12_and_0_13_chunk_at_16384(self):
        # VLLM_FUSED_MOE_CHUNK_SIZE: 32768 at v0.11.2, 16 x 1024 at v0.12.0 and v0.13.0 (vllm/envs.py at the tags).
        # A 20,000-token step (the tiny qwen3_moe, bf16, top-2): 0.11's caches hold every token, cache13 20,000 x 2 x
        # 256 x 2 = 20,480,000 B; 0.12's one chunk, 16,384 x 2 x 256 x 2 = 16,777,216 B and cache2 16,384 x 2 x 128 x
        # 2 = 8,388,608 B.
        def moe(version):
            with tempfile.TemporaryDirectory() as d:
                args = step(20000)
                args[args.index("--memory") + 1] = "8GiB"  # room for a 20,000-token step's activations
                p = run("serve", qwen3_moe_config(d), *args, "--engine-version", version)
            self.assertEqual(p.returncode, 0, p.stderr)
            return json.loads(p.stdout)["replaced"]["fused_moe"]
        old, new = moe("0.11"), moe("0.12")
        self.assertEqual((old["chunk_tokens"], old["cache13_bytes"]), (20_000, 20_480_000))
        self.assertEqual((new["chunk_tokens"], new["cache13_bytes"], new["cache2_bytes"]),
                         (16_384, 16_777_216, 8_388_608))
        self.assertEqual(moe("0.13")["chunk_tokens"], 16_384)

    def test_expert_parallel_over_the_tensor_parallel_gpus(self):
        """--tp 2 --enable-expert-parallel, one data-parallel rank: no all-to-all (use_all2all_kernels needs dp > 1);
        the layer's tp_size is 1, so TritonExperts holds each of its 2 experts whole. The tiny qwen3_moe with experts
        512 wide: the workspace at I = 512, 128 x max(512, 256) x 2 + 128 x max(1,024, 256) x 2 = 393,216, where
        tensor parallelism's I_p = 256 takes 128 x 256 x 2 + 128 x 512 x 2 = 196,608. A call: fused_topk 1,536, the
        output 32,768, and the alignment over the global 4 experts with expert_map[expert_ids] gathered beside the
        ids: at 0.14 block 64 (64 tokens > 2 local experts), 380 ids and 6 blocks twice, (380 + 12 + 1) x 4 = 1,572
        (35,876; 1,548 and 35,852 without the gather); at 0.17 block 32 (PR #34846: 64 tokens <= 96), 128 + 4 x 31 =
        252 ids, 8 blocks: (252 + 16 + 1) x 4 = 1,076 (35,380; 1,044 and 35,348 without). The expert map: 4 int32."""
        def moe(version, *extra):
            with tempfile.TemporaryDirectory() as d:
                p = run("serve", qwen3_moe_config(d, moe_intermediate_size=512), *VLLM, "--engine-version", version,
                        "--tp", "2", *extra)
            self.assertEqual(p.returncode, 0, p.stderr)
            return json.loads(p.stdout)["replaced"]["fused_moe"]
        for version, align, kernel, tp_align, tp_kernel, block in (("0.14", 1_572, 35_876, 1_548, 35_852, 64),
                                                                    ("0.17", 1_076, 35_380, 1_044, 35_348, 32)):
            ep, tp = moe(version, "--enable-expert-parallel"), moe(version)
            self.assertEqual((ep["kernel"], ep["expert_parallel_size"], ep["local_experts"]),
                             ("vllm modular TritonExperts", 2, 2))
            self.assertEqual((ep["expert_intermediate_size_per_rank"], ep["expert_map_bytes"]), (512, 16))
            self.assertEqual((ep["workspace_bytes"], tp["workspace_bytes"]), (393_216, 196_608))
            self.assertEqual((ep["block_size_m"], ep["align_bytes"], ep["kernel_bytes"]), (block, align, kernel))
            self.assertEqual((tp["block_size_m"], tp["align_bytes"], tp["kernel_bytes"]), (block, tp_align, tp_kernel))
            self.assertEqual(ep["expert_weight_bytes"], tp["expert_weight_bytes"])  # 2 x 3 x 256 x 512 x 2 either way

    def test_data_parallel_expert_parallel(self):
        """--data-parallel-size 2 --enable-expert-parallel from 0.14: UnquantizedFusedMoEMethod keeps its own modular
        kernel, so the layer's naive dispatch (all-gather) and combine run as to 0.13
        (docs/research/vllm-dp-ep-allgather.md) and TritonExperts sees both ranks' 64 tokens, M = 128 (M·k = 256),
        its 2 experts whole (I = 512): workspace 256 x max(512, 256) x 2 + 256 x max(1,024, 256) x 2 = 786,432; a
        call: fused_topk 256 x 12 = 3,072, the alignment at block 64 (0.14: 128 tokens > 2 local experts; 0.18: 128
        <= 512) over the global 4 experts, 256 + 4 x 63 = 508 ids and 8 blocks with the expert_map gather, (508 + 16 +
        1) x 4 = 2,100, the output [128, 256] 65,536: 70,708; the combine as before, 65,536."""
        for version in ("0.14", "0.18"):
            with tempfile.TemporaryDirectory() as d:
                p = run("serve", qwen3_moe_config(d, moe_intermediate_size=512), *VLLM, "--engine-version", version,
                        "--data-parallel-size", "2", "--enable-expert-parallel")
            self.assertEqual(p.returncode, 0, p.stderr)
            moe = json.loads(p.stdout)["replaced"]["fused_moe"]
            self.assertEqual((moe["kernel"], moe["kernel_tokens"], moe["chunk_tokens"], moe["local_experts"]),
                             ("vllm modular TritonExperts", 128, 128, 2))
            self.assertEqual((moe["workspace_bytes"], moe["topk_bytes"], moe["align_bytes"]), (786_432, 3_072, 2_100))
            self.assertEqual((moe["output_bytes"], moe["kernel_bytes"], moe["dp_combine_bytes"]),
                             (65_536, 70_708, 65_536))

    def test_fp8_experts_too(self):
        old = serve(mixtral_config, "0.11", quantization=STATIC)
        new = serve(mixtral_config, "0.14", quantization=STATIC)
        o, n = old["replaced"]["fused_moe"], new["replaced"]["fused_moe"]
        self.assertEqual((o["kernel_bytes"], n["kernel_bytes"], n["workspace_bytes"]), (232_460, 35_852, 196_608))
        self.assertEqual(n["peak_allocated_bytes"], o["peak_allocated_bytes"])
        self.assertEqual(new["replaced"]["fp8_per_tensor"]["moe_quantized_activation_bytes"], 49_152)
        self.assertEqual(new["memory"]["activation_peak_bytes"] - old["memory"]["activation_peak_bytes"], 196_608)

    def test_text_output(self):
        with tempfile.TemporaryDirectory() as d:
            p = run("serve", qwen3_moe_config(d), *[a for a in VLLM if a != "--json"], "--engine-version", "0.14")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("by vLLM's modular MoE kernel (TritonExperts: 4 experts, top-2, 128 wide, 128 a rank", p.stdout)
        self.assertIn("its WorkspaceManager buffer 128 KiB, one for every layer, held from the first", p.stdout)


class ModularKernelRefusals(unittest.TestCase):
    def refused(self, says, config, *extra, args=VLLM):
        with tempfile.TemporaryDirectory() as d:
            p = run("serve", config(d) if callable(config) else config, *args, *extra)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(says, p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)

    def test_fp8_experts_flashinfer_cutlass_on_hopper(self):
        # select_fp8_moe_backend (v0.16.0 branch, v0.17.1rc0, v0.18.0): on 9.0 FlashInfer's CUTLASS MoE comes before
        # Triton for static per-tensor scales from 0.16 and for block scales at 0.16 (from 0.17 Triton first without
        # expert parallelism); dynamic per-tensor scales run Triton. --flashinfer no: Triton, sized.
        h100 = [a for a in VLLM if a not in ("--memory", "1GiB")] + ["--gpu", "H100-80GB"]
        says = "on compute capability 9.0: vLLM's select_fp8_moe_backend takes FlashInfer's CUTLASS MoE"
        for quantization, version in ((STATIC, "0.16"), (STATIC, "0.18"), (BLOCK, "0.16")):
            self.refused(says, lambda d: mixtral_config(d, quantization_config=quantization), "--engine-version",
                         version, args=h100)
        for quantization, version, extra in ((STATIC, "0.15", []), (STATIC, "0.16", ["--flashinfer", "no"]),
                                             (DYNAMIC, "0.18", []), (BLOCK, "0.17", [])):
            with tempfile.TemporaryDirectory() as d:
                p = run("serve", mixtral_config(d, quantization_config=quantization), *h100, "--engine-version",
                        version, *extra)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(json.loads(p.stdout)["replaced"]["fused_moe"]["kernel"], "vllm modular TritonExperts")

    def test_fp8_expert_parallel_from_0_14(self):
        self.refused("whose expert-parallel kernel choice for fp8 (Fp8MoEMethod's) memplan has not read",
                     lambda d: mixtral_config(d, quantization_config=STATIC), "--engine-version", "0.14", "--tp", "2",
                     "--enable-expert-parallel")

    def test_chunked_steps_up_to_0_17(self):
        self.refused("vLLM's modular MoE kernel chunks above VLLM_FUSED_MOE_CHUNK_SIZE (16384) up to 0.17",
                     qwen3_moe_config, "--engine-version", "0.17", args=step(20000))
        # Two data-parallel ranks' 10,000-token steps reach the kernel as one call of 20,000.
        self.refused("at 20000 tokens a MoE call (2 data-parallel ranks' steps gathered)", qwen3_moe_config,
                     "--engine-version", "0.17", "--data-parallel-size", "2", "--enable-expert-parallel",
                     args=step(10000))



if __name__ == "__main__":
    unittest.main()
