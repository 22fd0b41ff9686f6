"""`memplan serve --engine vllm` on deepseek_v3 and deepseek_v2 (multi-head latent attention), numbers by hand.

The tiny config: 2 layers (layer 0 dense, layer 1 sparse: first_k_dense_replace 1), hidden 16, 2 heads, q_lora_rank 8,
kv_lora_rank 8, qk_nope_head_dim 4, qk_rope_head_dim 2, v_head_dim 4; 4 experts of width 8 in 2 groups, top-2, one
shared expert; vocab 64 (a multiple of vLLM's padding), untied head, 256 positions, bfloat16, no rope_scaling.

vLLM (cost_models/vllm_mla.h):
  cache: MLAAttentionSpec, one head of kv_lora_rank + qk_rope_head_dim a token and layer:
         2 layers x (8 + 2) x 2 B = 40 B a token (fp8: 20); transformers' cache would hold 2 x (2 x 6 + 2 x 4) x 2 = 80.
  block size: FlashMLA on compute capability 9.0 (--memory's default --arch sm90): 16 is not a multiple of 64 -> 64;
         2,560 B a block. CUTLASS MLA on sm100: 128. Triton MLA on sm80: --block-size stays 16.
  profile: W = max(min(max(8 x 64, 4 x 64 x 64), 65,536), 64 x 64) = 16,384 tokens (--context 64, --max-num-seqs 64,
         block 64); the simulated decompression W x 2 heads x (4 + 4) x 2 B = 524,288 B, on the attention's step;
         the builder's workspace W x (8 + 2) x 2 = 327,680 B after the profile (in no term).
         sm80 (block 16): W = max(min(max(512, 4,096), 65,536), 1,024) = 4,096: 131,072 B.
  weights: the graph's parameters, by hand (elements): embedding 64 x 16 = 1,024, head 16 x 64 = 1,024, final norm 16;
         a layer's attention q_a_proj 16 x 8 = 128, q_a_layernorm 8, q_b_proj 8 x 2 x 6 = 96, kv_a_proj_with_mqa
         16 x 10 = 160, kv_a_layernorm 8, kv_b_proj 8 x 2 x 8 = 128, o_proj 8 x 16 = 128 (656) and two norms (32), x 2;
         layer 0's MLP 3 x 16 x 32 = 1,536; layer 1's router 4 x 16 = 64 and e_score_correction_bias 4, experts
         4 x 3 x 16 x 8 = 1,536, shared expert 3 x 16 x 8 = 384 (1,988): 6,964 elements.
         vLLM adds its rotary cache [256, 2] in bf16 = 1,024 B and holds e_score_correction_bias in float32
         (DeepseekV2MoE): 4 x (4 - 2) = 8 B more than the graph's bf16: 1,032 B over the eager engine's weights.
At --tp 2 (cost_models/tensor_parallel.h; vLLM's DeepseekV2MLAAttention and DeepseekV2MoE): the latent is not split,
  40 B a token on each rank; one head a rank: the simulated tensor 16,384 x 1 x 8 x 2 = 262,144 B. A rank's
  parameters: embedding and head halves 512 each, final norm 16; a layer's q_a_proj 128 and kv_a_proj_with_mqa 160
  whole (ReplicatedLinear), q_b_proj 48, kv_b_proj 64, o_proj 64 halves, the latent norms 8 + 8 and the two norms 32
  whole (512), x 2; layer 0's MLP half 768; layer 1's router 64 and bias 4 whole, experts 768 and shared expert 192
  halves (1,028): 3,860 elements = 7,720 B, 6,208 B less than tp 1's 13,928, every other weights term (vLLM's rotary
  cache, the bias's float32 bytes, the graph's constants) whole on each rank. --tp 3 does not divide the 2 heads.
DeepSeek-V3 (tests/models/hf_configs/DeepSeek-V3.json without its quantization_config), bf16 on an H200 (sm90):
  61 x (512 + 64) x 2 = 70,272 B a token; W = min(max(8 x 163,840, 4 x 1,024 x 64), 65,536) = 65,536 tokens; the
  simulated tensor 65,536 x 128 x (128 + 128) x 2 = 4,294,967,296 B; the workspace 65,536 x 576 x 2 = 75,497,472 B;
  the rotary cache 4,096 x 40 = 163,840 rows x 64 x 2 = 20,971,520 B; the router biases 58 x 256 x 2 = 29,696 B more.
"""
import json
import os
import tempfile
import unittest

import jsonschema

from tiny_serve import SRC, VLLM, TinyConfigCase, deepseek_v3_config, run, write_config


def tiny_mla_config(directory, **overrides):
    return deepseek_v3_config(directory, hidden=16, heads=2, q_lora=8, kv_lora=8, nope=4, rope=2, v=4,
                              intermediate=32, moe_intermediate=8, vocab=64, **overrides)


class MlaByHand(TinyConfigCase):
    make_config = staticmethod(tiny_mla_config)

    def test_the_cache_holds_the_latent_and_the_rope_key(self):
        j = self.vllm()
        self.assertEqual(j["kv_cache"]["bytes_per_token"], 40)
        self.assertEqual(j["settings"]["block_size"], 64)
        self.assertEqual(j["kv_cache"]["block_bytes"], 2560)
        mla = j["replaced"]["mla"]
        self.assertEqual((mla["backend"], mla["requested_block_size"]), ("FLASHMLA", 16))
        self.assertEqual((mla["kv_lora_rank"], mla["qk_rope_head_dim"], mla["layers"]), (8, 2, 2))
        fp8 = self.vllm("--kv-cache-dtype", "fp8")
        self.assertEqual(fp8["kv_cache"]["bytes_per_token"], 20)
        with open(os.path.join(SRC, "docs", "schemas", "serve.vllm.schema.json")) as f:
            jsonschema.validate(j, json.load(f))

    def test_every_budget_term_and_one_more_block_does_not_fit(self):
        j = self.vllm()
        mla, m, prof = j["replaced"]["mla"], j["memory"], j["profile_run"]
        self.assertEqual(mla["workspace_tokens"], 16384)
        self.assertEqual(mla["simulated_decompression_bytes"], 524288)
        self.assertEqual(mla["workspace_after_profile_bytes"], 327680)
        self.assertEqual(mla["decompression_layers_held"], 2)
        self.assertEqual(mla["router_bias_float32_bytes"], 8)
        self.assertEqual(m["rotary_cache_bytes"], 1024)
        # The graph's parameters by hand; the eager engine in bf16 holds them and the graph's constants; vLLM 1,032 B more.
        p = run("inspect", self.config, "--graph", "decode", "--batch", "1", "--dim", "sequence_length=1",
                "--dim", "past_sequence_length=0", "--dim", "total_sequence_length=1")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("6,964 elements", p.stdout)
        e = run("serve", self.config, "--engine", "eager", "--graph", "decode", "--memory", "1GiB", "--context", "64",
                "--max-batched-tokens", "64", "--dtype", "bf16", "--json")
        self.assertEqual(e.returncode, 0, e.stderr)
        eager_weights = json.loads(e.stdout)["weights_bytes"]
        self.assertGreaterEqual(eager_weights, 6964 * 2)
        self.assertEqual(m["weights_bytes"], eager_weights + 1024 + 8)
        # The simulated tensor (512 KiB) outweighs the fused MoE kernel's 11,276 B: the profile's forward peak is the
        # attention step's allocated bytes plus it, plus what vLLM loads beside the graph (rotary cache, float32 bias).
        self.assertEqual(prof["forward_peak_allocated_bytes"], mla["peak_allocated_bytes"] + 1032)
        self.assertGreater(mla["peak_allocated_bytes"] - 524288, eager_weights + (32 << 20))  # weights + cuBLAS
        # available = int(1 GiB x 0.9) - weights - activation peak (--reserve 0); blocks of 2,560 B.
        requested = int((1 << 30) * 0.9)
        self.assertEqual(m["requested_bytes"], requested)
        self.assertEqual(m["available_kv_cache_bytes"], requested - m["weights_bytes"] - m["activation_peak_bytes"])
        blocks = j["num_gpu_blocks"]
        self.assertLessEqual(blocks * 2560, m["available_kv_cache_bytes"])
        self.assertGreater((blocks + 1) * 2560, m["available_kv_cache_bytes"])
        self.assertEqual(j["gpu_kv_cache_tokens"], blocks * 64)

    def test_the_backend_sets_the_block_size(self):
        b = self.vllm("--arch", "sm100")
        self.assertEqual((b["replaced"]["mla"]["backend"], b["settings"]["block_size"]), ("CUTLASS_MLA", 128))
        a = self.vllm("--arch", "sm80")
        self.assertEqual((a["replaced"]["mla"]["backend"], a["settings"]["block_size"]), ("TRITON_MLA", 16))
        self.assertEqual(a["replaced"]["mla"]["workspace_tokens"], 4096)
        self.assertEqual(a["replaced"]["mla"]["simulated_decompression_bytes"], 131072)
        h = self.vllm("--block-size", "128", "--engine-version", "0.12")  # a multiple of 64: FlashMLA keeps it
        self.assertEqual(h["settings"]["block_size"], 128)
        # At 0.11 (cuda.py at the v0.11.0 tag: `block_size != 64`) FlashMLA forces its own.
        self.assertEqual(self.vllm("--block-size", "128", "--engine-version", "0.11")["settings"]["block_size"], 64)

    def test_hopper_from_0_17_1_keeps_the_block(self):
        # PR #35122 (v0.17.1rc0): no block forced; FlashAttention MLA, the 9.x default from PR #27363, prefers 16.
        # W = max(min(max(8 x 64, 4 x 64 x 16), 65,536), 64 x 16) = 4,096: 4,096 x 2 heads x (4 + 4) x 2 B = 131,072 B
        # simulated; blocks of 16 x 40 = 640 B. 0.17.0 still forces 64 (docs/research/vllm-mla-hopper-ampere.md).
        old, new = self.vllm("--engine-version", "0.17.0"), self.vllm("--engine-version", "0.17.1")
        self.assertEqual((old["replaced"]["mla"]["backend"], old["settings"]["block_size"]), ("FLASH_ATTN_MLA", 64))
        self.assertEqual((new["replaced"]["mla"]["backend"], new["settings"]["block_size"]), ("FLASH_ATTN_MLA", 16))
        self.assertEqual(new["kv_cache"]["block_bytes"], 640)
        self.assertEqual(new["replaced"]["mla"]["workspace_tokens"], 4096)
        self.assertEqual(new["replaced"]["mla"]["simulated_decompression_bytes"], 131072)
        self.assertEqual(self.vllm("--engine-version", "0.17.1", "--block-size", "32")["settings"]["block_size"], 32)
        # An fp8 cache: FlashAttention MLA refuses it, FlashMLA's preferred 64; a given 16 runs Triton MLA from 0.17.2
        # (PR #34597) and has no backend at 0.17.1.
        fp8 = self.vllm("--engine-version", "0.17.1", "--kv-cache-dtype", "fp8")
        self.assertEqual((fp8["replaced"]["mla"]["backend"], fp8["settings"]["block_size"]), ("FLASHMLA", 64))
        triton = self.vllm("--engine-version", "0.17.2", "--kv-cache-dtype", "fp8", "--block-size", "16")
        self.assertEqual((triton["replaced"]["mla"]["backend"], triton["settings"]["block_size"]), ("TRITON_MLA", 16))
        ampere = self.vllm("--engine-version", "0.17.2", "--kv-cache-dtype", "fp8", "--arch", "sm80")
        self.assertEqual(ampere["replaced"]["mla"]["backend"], "TRITON_MLA")
        for extra, words in ((["--engine-version", "0.17.1", "--kv-cache-dtype", "fp8", "--block-size", "16"],
                              "--block-size 16 with --kv-cache-dtype fp8: FlashMLA takes multiples of 64"),
                             (["--engine-version", "0.17.1", "--block-size", "8"],
                              "--block-size 8: no MLA backend takes it"),
                             (["--engine-version", "0.17.1", "--kv-cache-dtype", "fp8", "--arch", "sm80"],
                              "from 0.17.2 (PR #34597")):
            p = run("serve", self.config, *VLLM, *extra)
            self.assertEqual(p.returncode, 2, (extra, p.stderr))
            self.assertIn(words, p.stderr)
            self.assertIn("at compute capability", p.stderr)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)

    def test_flashinfer_mla_module_workspace_from_0_11_1(self):
        # From 0.11.1 get_valid_backends imports every listed MLA backend on 9.x, FlashInfer MLA's module with its
        # torch.zeros(128 MiB) at import, inside load_model: 134,217,728 B more weights than v0.11.0's FlashMLA
        # chain; none with --flashinfer no. On 10.x CUTLASS MLA's module allocates its own 128 MiB at every release.
        base, late = self.vllm("--engine-version", "0.11"), self.vllm("--engine-version", "0.11.2")
        self.assertEqual(late["memory"]["weights_bytes"] - base["memory"]["weights_bytes"], 128 << 20)
        self.assertEqual(late["replaced"]["mla"]["module_workspace"], "flashinfer_mla.py g_fi_workspace")
        self.assertIsNone(base["replaced"]["mla"]["module_workspace"])
        off = self.vllm("--engine-version", "0.11.2", "--flashinfer", "no")
        self.assertEqual(off["memory"]["weights_bytes"], base["memory"]["weights_bytes"])
        sm100 = self.vllm("--arch", "sm100")
        self.assertEqual(sm100["replaced"]["mla"]["module_workspace_bytes"], 128 << 20)
        self.assertEqual(sm100["memory"]["weights_bytes"], base["memory"]["weights_bytes"] + (128 << 20))

    def test_blackwell_from_0_15_runs_flashinfer_mla(self):
        # PR #32615 (merged 2026-01-19): on 10.x vLLM's default MLA backend is FlashInfer MLA where qk_nope_head_dim is
        # 128; this tiny config's 4 keeps CUTLASS MLA. With 128 but a latent and rope key of 8 + 2, not 576, the
        # preselected FlashInfer MLA refuses it at 0.15 and 0.16 (no start); from 0.17.1 vLLM walks on to CUTLASS.
        self.assertEqual(self.vllm("--arch", "sm100", "--engine-version", "0.16")["replaced"]["mla"]["backend"],
                         "CUTLASS_MLA")
        with tempfile.TemporaryDirectory() as d:
            path = tiny_mla_config(d, qk_nope_head_dim=128)
            p = run("serve", path, *VLLM, "--arch", "sm100", "--engine-version", "0.15")
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("FlashInfer MLA, which check_and_update_config selects there, takes a latent and rope key of "
                          "576 (this model's: 10)", p.stderr)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
            for version in ("0.14", "0.18"):
                p = run("serve", path, *VLLM, "--arch", "sm100", "--engine-version", version)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertEqual(json.loads(p.stdout)["replaced"]["mla"]["backend"], "CUTLASS_MLA")

    def test_what_is_not_modelled_is_refused(self):
        # SGLang's latent pool is tests/cli/test_serve_mla_sglang.py's; TensorRT-LLM's stays refused.
        trtllm = ["--graph", "decode", "--memory", "1GiB", "--reserve", "0", "--context", "64", "--engine", "trtllm"]
        for args, words in ((trtllm, "TensorRT-LLM's profiling run decompresses the latent"),
                            (VLLM + ["--tp", "3"], "num_heads % tp_size"),
                            (VLLM + ["--kv-cache-dtype", "fp8", "--arch", "sm80"], "Triton MLA"),
                            (VLLM + ["--engine-version", "0.8"], "that version's MLA backends")):
            p = run("serve", self.config, *args)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertIn(words, p.stderr)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)

    def test_tensor_parallel_replicates_the_latent_and_splits_the_heads(self):
        one, two = self.vllm(), self.vllm("--tp", "2")
        self.assertEqual(two["kv_cache"]["bytes_per_token"], 40)
        self.assertEqual(two["replaced"]["mla"]["heads_per_rank"], 1)
        self.assertEqual(two["replaced"]["mla"]["simulated_decompression_bytes"], 262144)
        self.assertEqual(one["memory"]["weights_bytes"] - two["memory"]["weights_bytes"], 13928 - 7720)
        self.assertEqual(two["replaced"]["fused_moe"]["expert_weight_bytes"], 1536)

    def test_the_catalog_table_answers_nvidia_gpus_with_their_backends_block(self):
        p = run("serve", self.config, "--engine", "vllm", "--graph", "decode", "--reserve", "0", "--context", "64",
                "--max-batched-tokens", "64", "--max-num-seqs", "64")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("blocks of each GPU's MLA backend's at this release, from --block-size 16", p.stdout)
        # The JSON's rows name each GPU's backend and block: at 0.11 FlashMLA's 64 on 9.x, at 0.17.1 FlashAttention
        # MLA's 16 (PR #35122); CUTLASS MLA's 128 on the B200 at both; Triton MLA's 16 below 9.0.
        for version, hopper in (("0.11", ("FLASHMLA", 64)), ("0.17.1", ("FLASH_ATTN_MLA", 16))):
            q = run("serve", self.config, "--engine", "vllm", "--graph", "decode", "--reserve", "0", "--context", "64",
                    "--max-batched-tokens", "64", "--max-num-seqs", "64", "--engine-version", version, "--json")
            self.assertEqual(q.returncode, 0, q.stderr)
            rows = {r["gpu"]: r for r in json.loads(q.stdout)["gpus"]}
            self.assertEqual((rows["H100-80GB"]["mla_backend"], rows["H100-80GB"]["block_size"]), hopper, version)
            self.assertEqual((rows["B200"]["mla_backend"], rows["B200"]["block_size"]), ("CUTLASS_MLA", 128), version)
            self.assertEqual((rows["A100-80GB"]["mla_backend"], rows["A100-80GB"]["block_size"]), ("TRITON_MLA", 16))
            self.assertNotIn("mla_backend", rows["MI300X"])
        mi300x = [line for line in p.stdout.splitlines() if line.strip().startswith("MI300X ")]
        self.assertEqual(len(mi300x), 1)
        self.assertIn("not modelled", mi300x[0])
        self.assertIn("MI300X: vLLM's MLA backends on amd GPUs (MI300X): ROCm's AITER", p.stdout)
        q = run("serve", self.config, *[a for a in VLLM if a not in ("--memory", "1GiB")], "--gpu", "MI300X")
        self.assertEqual(q.returncode, 2, q.stderr)
        self.assertIn("ROCm's AITER", q.stderr)
        # The published fp8 checkpoint (weight_block_size [128, 128]) is tests/cli/test_serve_fp8_block.py's.

    def test_text_names_the_mla_terms(self):
        p = run("serve", self.config, *VLLM[:-1])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("multi-head latent attention by vLLM's FLASHMLA", p.stdout)
        self.assertIn("KV cache: 40 B per token, blocks of 64 tokens = 2,560 B", p.stdout)


class FlashInferMlaOnB200(unittest.TestCase):
    """DeepSeek-V2-Lite (tests/models/hf_configs; 27 layers, 16 heads, kv_lora_rank 512, qk_rope 64, qk_nope 128,
    v 128: a latent and rope key of 576) on a B200 at vLLM's defaults there (max_model_len 163,840, 1,024 sequences),
    --enforce-eager (from 0.20 graphs need it; here it only keeps the runs alike):
      0.14: CUTLASS MLA, block 128: W = max(min(max(8 x 163,840, 4 x 1,024 x 128), 65,536), 1,024 x 128) = 131,072;
            simulated 131,072 x 16 x 256 x 2 = 1,073,741,824 B; cutlass_mla.py's 128 MiB module workspace.
      0.16: FlashInfer MLA preselected, the default 16 forced to 64: W = max(65,536, 1,024 x 64) = 65,536; simulated
            536,870,912 B; flashinfer_mla.py's 128 MiB alone (only the preselected module is imported).
      0.18: FlashInfer MLA's preferred 32 (it takes multiples of 32 and 64): W = 65,536; both modules imported by
            get_valid_backends, 256 MiB: 134,217,728 B more weights than 0.16. A given 16 runs Triton MLA.
    (docs/research/vllm-flashinfer-mla-blackwell.md sections 1 and 2.)
    """

    def serve(self, *extra):
        p = run("serve", os.path.join(SRC, "tests", "models", "hf_configs", "DeepSeek-V2-Lite.json"), "--engine", "vllm",
                "--graph", "decode", "--gpu", "B200", "--enforce-eager", "--json", *extra)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def test_backend_block_and_workspaces_by_release(self):
        expected = {"0.14.0": ("CUTLASS_MLA", 128, 131072, 1073741824, 128 << 20),
                    "0.16.0": ("FLASHINFER_MLA", 64, 65536, 536870912, 128 << 20),
                    "0.18.0": ("FLASHINFER_MLA", 32, 65536, 536870912, 256 << 20)}
        weights = {}
        for version, (backend, block, w, simulated, workspace) in expected.items():
            j = self.serve("--engine-version", version)
            m = j["replaced"]["mla"]
            self.assertEqual((m["backend"], j["settings"]["block_size"], m["workspace_tokens"],
                              m["simulated_decompression_bytes"], m["module_workspace_bytes"]),
                             (backend, block, w, simulated, workspace), version)
            self.assertEqual(j["kv_cache"]["block_bytes"], block * 27 * 576 * 2, version)
            weights[version] = j["memory"]["weights_bytes"]
        self.assertEqual(weights["0.18.0"] - weights["0.16.0"], 128 << 20)
        self.assertEqual(weights["0.16.0"], weights["0.14.0"])
        j = self.serve("--engine-version", "0.18.0", "--block-size", "16")
        self.assertEqual((j["replaced"]["mla"]["backend"], j["settings"]["block_size"]), ("TRITON_MLA", 16))
        j = self.serve("--engine-version", "0.16.0", "--block-size", "32")
        self.assertEqual((j["replaced"]["mla"]["backend"], j["settings"]["block_size"]), ("FLASHINFER_MLA", 32))

    def test_what_vllm_refuses_there(self):
        # 0.16 preselects FlashInfer MLA and validates it alone (no fallback); 0.18 walks on past it for fp8_e5m2, to a
        # backend not read. Triton MLA takes multiples of 16 from 0.17.1 (PR #36292). Each: exit 2, one line.
        model = os.path.join(SRC, "tests", "models", "hf_configs", "DeepSeek-V2-Lite.json")
        for gpu, extra, words in (
                ("B200", ["--engine-version", "0.16.0", "--flashinfer", "no"],
                 "at compute capability 10.0: --flashinfer no: FlashInfer MLA, which check_and_update_config selects "
                 "there, does not import without FlashInfer"),
                ("B200", ["--engine-version", "0.16.0", "--kv-cache-dtype", "fp8_e5m2"],
                 "--kv-cache-dtype fp8_e5m2: FlashInfer MLA, which check_and_update_config selects there, takes fp8 "
                 "and fp8_e4m3 caches only"),
                ("B200", ["--engine-version", "0.18.0", "--kv-cache-dtype", "fp8_e5m2"],
                 "--kv-cache-dtype fp8_e5m2: FlashInfer MLA takes fp8 and fp8_e4m3 only"),
                ("A100-80GB", ["--engine-version", "0.17.1", "--block-size", "24"],
                 "at compute capability 8.0: --block-size 24: Triton MLA takes multiples of 16 from 0.17.1")):
            p = run("serve", model, "--engine", "vllm", "--graph", "decode", "--gpu", gpu, "--enforce-eager", *extra)
            self.assertEqual(p.returncode, 2, (extra, p.stderr))
            self.assertIn(words, p.stderr)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)


class DeepSeekV3(unittest.TestCase):
    def test_published_figures(self):
        with open(os.path.join(SRC, "tests", "models", "hf_configs", "DeepSeek-V3.json")) as f:
            config = json.load(f)
        config.pop("quantization_config")
        with tempfile.TemporaryDirectory() as d:
            path = write_config(d, config)
            p = run("serve", path, "--engine", "vllm", "--graph", "decode", "--gpu", "H200", "--json")
        self.assertEqual(p.returncode in (0, 1), True, p.stderr)
        j = json.loads(p.stdout)
        self.assertEqual(j["kv_cache"]["bytes_per_token"], 61 * 576 * 2)
        self.assertEqual(j["kv_cache"]["bytes_per_token"], 70272)
        mla = j["replaced"]["mla"]
        self.assertEqual(mla["workspace_tokens"], 65536)
        self.assertEqual(mla["simulated_decompression_bytes"], 4294967296)
        self.assertEqual(mla["workspace_after_profile_bytes"], 75497472)
        self.assertEqual(mla["router_bias_float32_bytes"], 29696)
        self.assertEqual(j["memory"]["rotary_cache_bytes"], 20971520)
        self.assertEqual(j["settings"]["block_size"], 64)


class DeepSeekV2Lite(unittest.TestCase):
    """deepseek_v2 (tests/models/hf_configs/DeepSeek-V2-Lite.json, bf16, q_lora_rank null, 16 heads) on an H200:
    vLLM's deepseek_v2.py serves it with the same DeepseekV2MLAAttention: 27 x (512 + 64) x 2 = 31,104 B a token;
    W = min(max(8 x 163,840, 4 x 1,024 x 64), 65,536) = 65,536 tokens; the simulated tensor 65,536 x 16 x
    (128 + 128) x 2 = 536,870,912 B; the workspace 65,536 x 576 x 2 = 75,497,472 B; yarn factor 40 on 4,096:
    163,840 rotary rows x 64 x 2 = 20,971,520 B; no router bias (DeepseekV2MoE makes e_score_correction_bias for
    topk_method noaux_tc only; this is greedy)."""

    def test_published_figures(self):
        path = os.path.join(SRC, "tests", "models", "hf_configs", "DeepSeek-V2-Lite.json")
        p = run("serve", path, "--engine", "vllm", "--graph", "decode", "--gpu", "H200", "--json")
        self.assertEqual(p.returncode in (0, 1), True, p.stderr)
        j = json.loads(p.stdout)
        self.assertEqual(j["kv_cache"]["bytes_per_token"], 27 * 576 * 2)
        self.assertEqual(j["kv_cache"]["bytes_per_token"], 31104)
        mla = j["replaced"]["mla"]
        self.assertEqual(mla["workspace_tokens"], 65536)
        self.assertEqual(mla["simulated_decompression_bytes"], 536870912)
        self.assertEqual(mla["workspace_after_profile_bytes"], 75497472)
        self.assertEqual(mla["router_bias_float32_bytes"], 0)
        self.assertEqual(j["memory"]["rotary_cache_bytes"], 20971520)
        self.assertEqual(j["settings"]["block_size"], 64)


if __name__ == "__main__":
    unittest.main()
