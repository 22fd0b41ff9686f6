"""--tp N and --sequence-parallel through the binary, against numbers computed here by hand.

Run by ctest with MEMPLAN_BIN and MEMPLAN_SOURCE_DIR set (Debian's python3 + python3-jsonschema).
  - Parameters per GPU from the tiny Llama's config (tests/models/llama.py, CONFIGS["llama_tiny"]), split the way
    Megatron-LM splits them (megatron/core/tensor_parallel/layers.py): q/k/v/gate/up by output features, o/down by
    input features, the embedding and the untied head by vocabulary rows, the RMSNorm weights replicated.
  - Activations at the peak from Korthikanti et al. 2022 (arXiv:2205.05198) sec. 4.2, eq. 2 and 3 (tensor
    parallelism sbh(10 + 24/t + 5as/(ht)), with sequence parallelism sbh(34/t + 5as/(ht))), adapted to the zoo
    GPT exactly as tests/accuracy/published_gpu.py adapts eq. 1: no dropout, so the two replicated masks (2sbh),
    the sharded attention-dropout mask and output (3as^2b) go and the values read the softmax output.
  - Error paths: message and exit code 2 (docs/exit-codes.md).
"""
import json
import os
import subprocess
import unittest

import jsonschema

BIN = os.environ["MEMPLAN_BIN"]
SRC = os.environ["MEMPLAN_SOURCE_DIR"]


def run(*args):
    return subprocess.run([BIN, *args], cwd=SRC, capture_output=True, text=True, timeout=600)


def run_json(*args):
    p = run(*args, "--json")
    if p.returncode != 0:
        raise AssertionError(f"memplan {' '.join(args)} exited {p.returncode}: {p.stderr}")
    return json.loads(p.stdout)


# tests/models/llama.py CONFIGS["llama_tiny"]: hidden 128, ffn 352, 4 layers, 4 heads, 2 kv heads (head_dim 32),
# vocab 1000, untied head.
H, FFN, LAYERS, KV, V = 128, 352, 4, 2 * 32, 1000


def llama_tiny_params_per_gpu(t):
    layer = (H * H + 2 * H * KV + H * H + 3 * H * FFN) // t + 2 * H  # projections split, the two RMSNorms not
    return 2 * (V * H) // t + LAYERS * layer + H  # embedding, head (split by vocab), final norm


# The zoo GPT (tests/models/zoo.py GPT_CONFIG): 12 layers, hidden 768, 12 heads, vocab 50257, 25 LayerNorms.
L, h, a, v = 12, 768, 12, 50257


def gpt_activations(s, b, t, sp):
    """Korthikanti eq. 2 (sp False) / eq. 3 (sp True), without dropout, 16-bit, plus what lies outside the layers
    counted the same way as published_gpu.py does for t = 1: final LayerNorm input and output 4sbh (split along the
    sequence with sp), logits and log-softmax 2sb(v/t) each (vocab-parallel, rank 0's ceil(v/t) columns), the
    LayerNorms' float32 mean and rstd (8 B per row each; rows split along the sequence with sp), and what every rank
    holds whole: the int64 token ids and targets 8sb each (the batch, which the training loop holds to the step's
    end), the int64 position ids 8s and the fp16 loss 2 B."""
    vt = -(-v // t)
    if sp:
        layer = s * b * h * 32 // t + 2 * a * s * s * b // t
        outside = 4 * s * b * h // t + 4 * s * b * vt + 25 * 8 * s * b // t
    else:
        layer = s * b * h * (8 + 24 // t) + 2 * a * s * s * b // t
        outside = 4 * s * b * h + 4 * s * b * vt + 25 * 8 * s * b
    return L * layer + outside + 2 * 8 * s * b + 8 * s + 2


class TensorParallelTest(unittest.TestCase):
    LLAMA = ["estimate", "tests/models/llama_tiny_train.onnx", "--batch", "2", "--dim", "seq=16", "--mode", "train",
             "--optimizer", "adamw"]

    def test_parameters_grads_and_states_per_gpu_by_hand(self):
        self.assertEqual(llama_tiny_params_per_gpu(1), 994432)  # LlamaConfig.parameter_count()
        for t in (1, 2):
            e = run_json(*self.LLAMA, "--tp", str(t))
            p = llama_tiny_params_per_gpu(t) * 4
            self.assertEqual(e["training"]["param_bytes"], p, t)
            self.assertEqual(e["training"]["grad_bytes"], p, t)
            self.assertEqual(e["training"]["optimizer_state_bytes"], 2 * p, t)  # AdamW: exp_avg, exp_avg_sq
        self.assertEqual(llama_tiny_params_per_gpu(2), 497792)

    def test_json_says_the_figures_are_one_gpus(self):
        with open(os.path.join(SRC, "docs", "schemas", "estimate.schema.json")) as f:
            schema = json.load(f)
        for sp in ([], ["--sequence-parallel"]):
            e = run_json(*self.LLAMA, "--tp", "2", *sp)
            jsonschema.validate(e, schema)
            self.assertEqual(e["parallel"], {"tp": 2, "sequence_parallel": bool(sp), "busiest_tp_rank": 0})
            self.assertTrue(any(n.startswith("--tp 2") for n in e["notes"]))
        self.assertNotIn("parallel", run_json(*self.LLAMA))

    def test_inference_weights_per_gpu_by_hand(self):
        # ideal counts every initializer as the file holds it (pytorch too, unless --tied-embeddings shape takes the
        # eval export's pre-transposed head for a tied copy of the embedding: docs/cost-models.md 3.10).
        inference = ["estimate", "tests/models/llama_tiny.onnx", "--batch", "2", "--dim", "seq=16", "--runtime", "ideal"]
        one = run_json(*inference)
        two = run_json(*inference, "--tp", "2")
        # The split weights lose half their bytes; whatever else the graph keeps on the device is unchanged.
        self.assertEqual(one["breakdown"]["weights"] - two["breakdown"]["weights"],
                         (llama_tiny_params_per_gpu(1) - llama_tiny_params_per_gpu(2)) * 4)
        self.assertEqual(two["parallel"]["tp"], 2)
        sp = run_json(*inference, "--tp", "2", "--sequence-parallel")
        self.assertEqual(sp["breakdown"]["weights"], two["breakdown"]["weights"])

    def test_gpt_activations_match_korthikanti_with_and_without_sequence_parallelism(self):
        s, b = 512, 4  # activations dominate the peak (at the loss's backward), as in published_gpu.py rows 3-4
        for t in (1, 2, 4):
            for sp in ([False, True] if t > 1 else [False]):
                e = run_json("estimate", "tests/models/gpt_train.onnx", "--batch", str(b), "--dim", f"seq={s}",
                             "--mode", "train", "--precision", "fp16", "--optimizer", "sgd", "--runtime", "ideal",
                             "--tp", str(t), *(["--sequence-parallel"] if sp else []))
                self.assertEqual(e["breakdown"]["activations"], gpt_activations(s, b, t, sp), (t, sp))

    def test_sequence_parallelism_saves_memory_and_fit_takes_tp(self):
        base = ["tests/models/llama_tiny_train.onnx", "--dim", "seq=64", "--mode", "train", "--optimizer", "adamw"]
        plain = run_json("estimate", *base, "--batch", "8", "--tp", "2")
        sp = run_json("estimate", *base, "--batch", "8", "--tp", "2", "--sequence-parallel")
        one = run_json("estimate", *base, "--batch", "8")
        self.assertLess(sp["breakdown"]["activations"], plain["breakdown"]["activations"])
        self.assertLess(plain["total_bytes"], one["total_bytes"])
        f1 = run_json("fit", *base, "--memory", "256MiB")
        f2 = run_json("fit", *base, "--memory", "256MiB", "--tp", "2")
        self.assertGreater(f2["value"], f1["value"])

    def test_errors_name_the_node_and_exit_2(self):
        cases = [
            (["--tp", "4"], "--tp 4 does not divide the 2 key/value heads"),
            (["--tp", "3"], "--tp 3 does not divide the 4 attention heads"),
            (["--sequence-parallel"], "--sequence-parallel needs --tp N with N >= 2"),
        ]
        for extra, text in cases:
            p = run(*self.LLAMA, *extra)
            self.assertEqual(p.returncode, 2, (extra, p.stderr))
            self.assertIn(text, p.stderr, extra)
        p = run("estimate", "tests/models/llama_tiny_train.onnx", "--batch", "2", "--dim", "seq=15", "--mode", "train",
                "--tp", "2", "--sequence-parallel")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--sequence-parallel: --tp 2 does not divide the sequence length 15 of '/embed_tokens/Gather_output_0' "
                      "at node '/embed_tokens/Gather'", p.stderr)
        p = run(*self.LLAMA, "--tp", "4")
        self.assertIn("at node '", p.stderr)
        self.assertIn("of model 'tests/models/llama_tiny_train.onnx'", p.stderr)
        p = run("estimate", "tests/models/llama_tiny.onnx", "--batch", "2", "--dim", "seq=16", "--tp", "2", "--runtime",
                "onnxruntime")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--tp models Megatron-style tensor parallelism in PyTorch: use --runtime pytorch or ideal", p.stderr)
        p = run("estimate", "tests/models/resnet18_train.onnx", "--batch", "2", "--mode", "train", "--tp", "2")
        self.assertEqual(p.returncode, 0, p.stderr)  # the classifier's Gemm is the one column-parallel layer


if __name__ == "__main__":
    unittest.main()
