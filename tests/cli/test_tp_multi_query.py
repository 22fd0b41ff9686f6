"""Tensor parallelism over multi-query attention (one KV head), numbers by hand.

The tensor-parallel plan (cost_models/tensor_parallel.cc) split k_proj's and v_proj's one head across the GPUs
along head_dim: serve --engine vllm --tp 2 on such a model stopped with an internal error (its KV share was half a
head), and a training --tp 2 estimate went on with half-heads that neither vLLM nor Megatron-LM runs.
  vLLM (QKVParallelLinear, num_kv_head_replicas = tp / kv heads): every rank holds the one head whole.
  Megatron-LM (num_query_groups must be divisible by tp): refused.

gemma-3-1b-pt (tests/models/hf_configs/gemma-3-1b-pt.json: 26 layers, 4 query heads, 1 KV head of head_dim 256,
bf16): one token's KV over every layer is 26 x 2 (K, V) x 1 head x 256 x 2 B = 26,624 B, at tp 1 and, the head
replicated, on each of 2 ranks.
"""
import json
import os
import subprocess
import unittest

BIN = os.environ["MEMPLAN_BIN"]
SRC = os.environ["MEMPLAN_SOURCE_DIR"]
GEMMA = os.path.join(SRC, "tests", "models", "hf_configs", "gemma-3-1b-pt.json")


def run(*args):
    return subprocess.run([BIN, *args], cwd=SRC, capture_output=True, text=True, timeout=600)


class MultiQueryTensorParallel(unittest.TestCase):
    def serve(self, *extra):
        p = run("serve", GEMMA, "--graph", "decode", "--gpu", "L4", "--context", "4096", "--json", *extra)
        self.assertIn(p.returncode, (0, 1), p.stderr)
        return json.loads(p.stdout)

    def test_vllm_replicates_the_one_kv_head(self):
        one, two = self.serve(), self.serve("--tp", "2")
        self.assertEqual(one["kv_cache"]["bytes_per_token"], 26 * 2 * 1 * 256 * 2)
        self.assertEqual(two["kv_cache"]["bytes_per_token"], 26624)

    def test_training_refuses_half_a_head(self):
        p = run("estimate", GEMMA, "--graph", "train", "--batch", "1", "--dim", "seq=128", "--mode", "train",
                "--tp", "2")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--tp 2 does not divide the 1 key/value head", p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)


if __name__ == "__main__":
    unittest.main()
