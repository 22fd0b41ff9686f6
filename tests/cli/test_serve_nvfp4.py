"""`memplan serve --engine vllm` on ModelOpt NVFP4 checkpoints (hf_quant_config.json quant_algo "NVFP4", group_size
16; cost_models/vllm_nvfp4.h), numbers by hand from vLLM's ModelOptNvFp4LinearMethod and its kernels' layouts.

The dense llama of test_serve_modelopt.py (hidden 512, 4 heads of 128, 2 KV heads, intermediate 768, 2 layers, vocab
512, bf16), tp 1, --max-batched-tokens 64 (M = 64 rows a profile call). vLLM fuses a layer's linear layers into four
modules, N x K on one rank: qkv_proj 1,024 x 512, o_proj 512 x 512, gate_up_proj 1,536 x 512, down_proj 512 x 768.
Every module keeps four float32 scalars (alpha, input_global_scale and its inverse, weight_global_scale): 16 B.
  B200 (compute capability 10.0): the FP4 GEMM's layout, weight uint8 [round_up(N, 32), round_up(K, 32) / 2] and
    swizzled fp8 scales [round_up(N, 128), round_up(K/16, 4)]:
      qkv 1,024 x 256 + 1,024 x 32 + 16 = 294,928; o 512 x 256 + 512 x 32 + 16 = 147,472;
      gate_up 1,536 x 256 + 1,536 x 32 + 16 = 442,384; down 512 x 384 + 512 x 48 + 16 = 221,200;
      1,105,984 a layer, 2,211,968 for two (the bf16 modules: 7,864,320).
    A call quantizes its input: uint8 [64, K/2] and scales round_up(64, 128) x round_up(K/16, 4): K 512 (qkv, o,
    gate_up) 16,384 + 4,096 = 20,480; K 768 (down) 24,576 + 6,144 = 30,720 (no N is off 32: no padded output).
    FlashInfer's mm_fp4 workspace: 32 MiB, allocated by the first call.
  H100 (9.0, 132 multiprocessors): Marlin, N_m = round_up(N, 64) = N here: weight K x N_m / 2, scales K/16 x N_m,
    workspace 132 x 4 = 528 B:
      qkv 262,144 + 32,768 + 528 + 16 = 295,456; o 131,072 + 16,384 + 544 = 148,000;
      gate_up 393,216 + 49,152 + 544 = 442,912; down 196,608 + 24,576 + 544 = 221,728;
      1,108,096 a layer, 2,216,192 for two.
    A call: no quantized input; the float32 c_tmp 132 x min(round_up(64, 16), 64) x 256 x 4 = 8,650,752 B.
"""
import json
import os
import tempfile
import unittest

import jsonschema

from test_serve_modelopt import dense_config, with_quantization
from tiny_serve import SRC, run

NVFP4 = with_quantization(quant_algo="NVFP4", kv_cache_quant_algo=None, group_size=16)
ARGS = ["--engine", "vllm", "--max-batched-tokens", "64", "--max-num-seqs", "64", "--graph", "decode",
        "--reserve", "0", "--context", "64", "--dtype", "bf16"]
FP16 = [*ARGS[:-1], "fp16"]  # below 8.0, where vLLM has no bfloat16


def serve(path, *extra, rc=0):
    p = run("serve", path, *ARGS, "--json", *extra)
    assert p.returncode == rc, (p.returncode, p.stderr)
    return json.loads(p.stdout) if rc == 0 else p


class Nvfp4ByHand(unittest.TestCase):
    def answers(self, gpu):
        with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as e:
            return serve(dense_config(e), "--gpu", gpu), serve(dense_config(d, NVFP4), "--gpu", gpu)

    def test_the_fp4_gemm_layout_on_blackwell(self):
        bf16, q = self.answers("B200")
        with open(os.path.join(SRC, "docs", "schemas", "serve.vllm.schema.json")) as f:
            jsonschema.validate(q, json.load(f))
        self.assertEqual(q["settings"]["quantization"], "nvfp4")
        self.assertEqual(q["memory"]["quantized_linear_bytes"], 2_211_968)
        self.assertEqual(bf16["memory"]["weights_bytes"] - q["memory"]["weights_bytes"], 7_864_320 - 2_211_968)
        n = q["replaced"]["nvfp4"]
        self.assertEqual((n["kernel"], n["gemm_workspace_bytes"]), ("fp4_gemm", 32 << 20))
        self.assertEqual(n["call_bytes"], 30_720 if "down_proj" in n["call_layer"] else 20_480)

    def test_marlin_below_blackwell(self):
        bf16, q = self.answers("H100-80GB")
        self.assertEqual(q["memory"]["quantized_linear_bytes"], 2_216_192)
        n = q["replaced"]["nvfp4"]
        self.assertEqual((n["kernel"], n["gemm_workspace_bytes"], n["call_bytes"]), ("marlin", 0, 8_650_752))
        # The profile's peak step grows by no more than the call (and never shrinks below the bf16 model's less its
        # weights' difference): the call is placed at one layer's step.
        self.assertLessEqual(n["call_peak_allocated_bytes"] - bf16["profile_run"]["forward_peak_allocated_bytes"],
                             8_650_752)


class Nvfp4FlashInfer(unittest.TestCase):
    """--flashinfer: ModelOptNvFp4LinearMethod.__init__ takes flashinfer-cutlass whenever has_flashinfer() (v0.11.0 to
    v0.13.0 tags; from 10.0 only after PR #33076, in 0.16), "cutlass" from 10.0 without it."""

    def test_blackwell_without_flashinfer_has_no_gemm_workspace(self):
        with tempfile.TemporaryDirectory() as d:
            path = dense_config(d, NVFP4)
            # At 0.12, whose sampler FlashInfer does not change (opt-in from 0.11.1).
            auto, yes, no = (serve(path, "--gpu", "B200", "--engine-version", "0.12", *extra) for extra in
                             ((), ("--flashinfer", "yes"), ("--flashinfer", "no")))
        self.assertEqual(auto["replaced"]["nvfp4"]["gemm_workspace_bytes"], 32 << 20)  # auto: present, as before
        self.assertEqual(yes["replaced"]["nvfp4"]["gemm_workspace_bytes"], 32 << 20)
        self.assertEqual(no["replaced"]["nvfp4"]["gemm_workspace_bytes"], 0)
        self.assertEqual((auto["settings"]["flashinfer"], no["settings"]["flashinfer"]), ("auto", "no"))
        # The workspace is held through the profile run: 32 MiB more available without it.
        self.assertEqual(no["memory"]["available_kv_cache_bytes"] - yes["memory"]["available_kv_cache_bytes"],
                         32 << 20)

    def test_hopper_with_flashinfer_does_not_start_before_0_16(self):
        with tempfile.TemporaryDirectory() as d:
            path = dense_config(d, NVFP4)
            for version in ("0.11", "0.13", "0.15"):
                p = run("serve", path, *ARGS, "--gpu", "H100-80GB", "--flashinfer", "yes", "--engine-version", version)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn("with --flashinfer yes and --engine-version " + version + ": vLLM's "
                              "ModelOptNvFp4LinearMethod takes FlashInfer's FP4 GEMM", p.stderr)
                self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
            self.assertEqual(serve(path, "--gpu", "H100-80GB", "--flashinfer", "no")["replaced"]["nvfp4"]["kernel"],
                             "marlin")
            j = serve(path, "--gpu", "H100-80GB", "--flashinfer", "yes", "--engine-version", "0.16")
            self.assertEqual(j["replaced"]["nvfp4"]["kernel"], "marlin")


class Nvfp4Refusals(unittest.TestCase):
    def refused(self, says, *extra, quant=NVFP4, args=ARGS):
        with tempfile.TemporaryDirectory() as d:
            p = run("serve", dense_config(d, quant), *args, *extra)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(says, p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)

    def test_other_engines(self):
        for engine in ("sglang", "trtllm"):
            self.refused("is a ModelOpt NVFP4 checkpoint, which memplan sizes under --engine vllm only", "--gpu",
                         "H100-80GB", args=["--engine", engine, "--graph", "decode", "--context", "64"])
        self.refused("ModelOpt NVFP4 quantization is modelled by serve --engine vllm only", "--gpu", "H100-80GB",
                     args=["--engine", "eager", "--graph", "decode", "--context", "64"])

    def test_marlin_needs_the_gpus_multiprocessors(self):
        self.refused("vLLM runs it on Marlin, whose workspace and float32 reduction buffer are sized by the GPU's "
                     "multiprocessors, which --memory does not say: give --gpu NAME", "--memory", "80GiB")

    def test_below_7_5_and_rocm(self):
        # ModelOptNvFp4Config.get_min_capability: 80 at the v0.11.0 to v0.13.0 tags, 75 from PR #29901 (0.14).
        self.refused("ModelOpt NVFP4 on compute capability 7.0 with --engine-version 0.14: vLLM's ModelOptNvFp4Config "
                     "needs 7.5 (get_min_capability", "--gpu", "V100-32GB", "--engine-version", "0.14", args=FP16)
        self.refused("ModelOpt NVFP4 on compute capability 7.0 with --engine-version 0.11: vLLM's ModelOptNvFp4Config "
                     "needs 8.0 (get_min_capability", "--gpu", "V100-32GB", args=FP16)
        self.refused("ModelOpt NVFP4 on ROCm (compute capability 9.4)", "--gpu", "MI300X")

    def test_turing_from_0_14(self):
        # ModelOptNvFp4Config and is_fp4_marlin_supported needed 8.0 before PR #29901 (in 0.14.0): a T4 does not
        # start ModelOpt NVFP4 at 0.13 and does at 0.14, in float16 (a T4 has no bfloat16).
        self.refused("ModelOpt NVFP4 on compute capability 7.5 with --engine-version 0.13: vLLM's ModelOptNvFp4Config "
                     "needs 8.0 (get_min_capability; 8.0 before 0.14", "--gpu", "T4", "--engine-version", "0.13",
                     args=FP16)
        with tempfile.TemporaryDirectory() as d:
            p = run("serve", dense_config(d, NVFP4), *FP16, "--gpu", "T4", "--engine-version", "0.14", "--format",
                    "json")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout)["replaced"]["nvfp4"]["kernel"], "marlin")

    def test_group_size(self):
        self.refused("key \"group_size\" is 32: NVFP4 scales blocks of 16 values", "--gpu", "B200",
                     quant=with_quantization(quant_algo="NVFP4", group_size=32))


if __name__ == "__main__":
    unittest.main()
