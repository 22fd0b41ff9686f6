"""What the tiny-config serve tests share: the binary, a config.json written into a temporary folder, and
`serve --engine vllm` at a small fixed budget (1 GiB, no non-torch reserve, 64-token context, 64 batched tokens,
64 sequences) whose terms the tests compute by hand."""
import json
import os
import subprocess
import tempfile
import unittest

BIN = os.environ["MEMPLAN_BIN"]
SRC = os.environ["MEMPLAN_SOURCE_DIR"]

VLLM = ["--engine", "vllm", "--graph", "decode", "--memory", "1GiB", "--reserve", "0", "--context", "64",
        "--max-batched-tokens", "64", "--max-num-seqs", "64", "--json"]


def run(*args, timeout=900):
    return subprocess.run([BIN, *args], cwd=SRC, capture_output=True, text=True, timeout=timeout)


def write_config(directory, config, **overrides):
    """config with overrides, as DIRECTORY/config.json; its path."""
    path = os.path.join(directory, "config.json")
    with open(path, "w") as f:
        json.dump({**config, **overrides}, f)
    return path


# deepseek_v3's keys, one dense layer then one sparse one, 4 routed experts (top-2 in 2 groups, 1 kept) and one
# shared; each test gives its own sizes.
DEEPSEEK_V3 = {"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 2,
               "first_k_dense_replace": 1, "n_routed_experts": 4, "n_group": 2, "topk_group": 1,
               "num_experts_per_tok": 2, "n_shared_experts": 1, "max_position_embeddings": 256,
               "rms_norm_eps": 1e-6, "rope_theta": 10000, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
               "hidden_act": "silu", "norm_topk_prob": True, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
               "topk_method": "noaux_tc", "moe_layer_freq": 1, "ep_size": 1}


def deepseek_v3_config(directory, hidden, heads, q_lora, kv_lora, nope, rope, v, intermediate, moe_intermediate,
                       vocab, **overrides):
    """A tiny deepseek_v3 config.json of these sizes in DIRECTORY; its path."""
    sizes = {"hidden_size": hidden, "num_attention_heads": heads, "num_key_value_heads": heads,
             "q_lora_rank": q_lora, "kv_lora_rank": kv_lora, "qk_nope_head_dim": nope, "qk_rope_head_dim": rope,
             "v_head_dim": v, "intermediate_size": intermediate, "moe_intermediate_size": moe_intermediate,
             "vocab_size": vocab}
    return write_config(directory, {**DEEPSEEK_V3, **sizes}, **overrides)


class TinyConfigCase(unittest.TestCase):
    """self.config: make_config(folder) written into a fresh temporary folder for each test."""
    make_config = None

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.config = type(self).make_config(self.dir.name)

    def tearDown(self):
        self.dir.cleanup()

    def vllm(self, *extra):
        p = run("serve", self.config, *VLLM, *extra)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)
