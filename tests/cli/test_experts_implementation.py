"""--experts-implementation eager|grouped_mm through the binary: where grouped_mm is refused (exit 2, one message),
what the hf-* recipes set, and that `memplan export` of a grouped_mm graph is a file ONNX's checker and memplan read.

The tensors of one grouped_mm block are counted by hand in tests/cost_models/grouped_mm_test.cc; here the tiny
qwen3_moe of that test (2 layers, H = 16, E = 4 experts of I = 8, top-2) at batch 1 x seq 128.
"""
import json
import os
import subprocess
import tempfile
import unittest

BIN = os.environ["MEMPLAN_BIN"]
SRC = os.environ["MEMPLAN_SOURCE_DIR"]
CONFIGS = os.path.join(SRC, "tests", "models", "hf_configs")

TINY = {"model_type": "qwen3_moe", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 4, "vocab_size": 64,
        "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": False,
        "torch_dtype": "float32", "hidden_act": "silu", "num_experts": 4, "num_experts_per_tok": 2,
        "moe_intermediate_size": 8, "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
        "output_router_logits": False, "router_aux_loss_coef": 0.001, "attention_bias": False}
TRAIN = ["--graph", "train", "--batch", "1", "--dim", "seq=128", "--mode", "train"]


def run(*args):
    return subprocess.run([BIN, *args], cwd=SRC, capture_output=True, text=True, timeout=600)


class ExpertsImplementation(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="memplan_experts_")
        cls.config = os.path.join(cls.dir, "config.json")
        with open(cls.config, "w") as f:
            json.dump(TINY, f)
        cls.dense = os.path.join(cls.dir, "dense.json")
        with open(cls.dense, "w") as f:
            json.dump({k: v for k, v in TINY.items() if k not in (
                "num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob",
                "decoder_sparse_step", "mlp_only_layers", "output_router_logits", "router_aux_loss_coef")}
                      | {"model_type": "qwen3"}, f)

    def refused(self, args, message):
        p = run(*args)
        self.assertEqual(p.returncode, 2, (args, p.stdout[-500:], p.stderr))
        self.assertIn(message, p.stderr, args)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)

    def test_answers_both(self):
        for experts in ("eager", "grouped_mm"):
            p = run("estimate", self.config, *TRAIN, "--experts-implementation", experts, "--json")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertGreater(json.loads(p.stdout)["total_bytes"], 0)

    def test_refusals(self):
        g = ["--experts-implementation", "grouped_mm"]
        self.refused(["estimate", "tests/models/gpt_tiny.onnx", "--dim", "seq=8", *g],
                     "--experts-implementation and --ep choose how a config.json's experts run")
        self.refused(["estimate", self.dense, *TRAIN, *g], "model_type \"qwen3\" has no experts")
        self.refused(["estimate", self.config, *TRAIN, *g, "--gpus", "2", "--tp", "2"],
                     "--experts-implementation grouped_mm with --tp 2: not modelled")
        # LoRA on the 3-D experts (PEFT's target_parameters, its ParamWrapper): dropout is refused as PEFT refuses it.
        self.refused(["estimate", self.config, *TRAIN, *g, "--lora-rank", "8", "--lora-targets", "gate_up_proj",
                      "--lora-dropout", "0.05"],
                     "PEFT's ParamWrapper (LoraConfig(target_parameters=...)) refuses lora_dropout != 0")
        # --frozen-dtype bf16 over float32 parameters: PEFT adds delta.to(param.dtype) to the bf16 parameter and
        # aten::_grouped_mm (no autocast rule) cannot take float32 rows with that sum; the message names the options
        # that describe a bf16 base.
        for precision in ("fp32", "amp-bf16"):
            self.refused(["estimate", self.config, *TRAIN, *g, "--precision", precision, "--lora-rank", "8",
                          "--lora-targets", "experts", "--frozen-dtype", "bf16"],
                         "--frozen-dtype bf16 with --lora-targets naming the stacked experts' parameter "
                         "'layers.0.mlp.experts.gate_up_proj': PEFT's ParamWrapper adds its delta, cast to the "
                         "parameter's type, to it in the type it is stored in, and aten::_grouped_mm (on no autocast "
                         "list, pytorch issue #174763) cannot multiply float32 rows by that bfloat16 sum; a base "
                         "stored in bfloat16 runs in bfloat16: give --precision bf16 (PEFT's adapters stay float32), "
                         "or --precision amp-bf16 --param-dtype bf16, and no --frozen-dtype")
        for accepted in (["--precision", "bf16", "--frozen-dtype", "bf16"],
                         ["--precision", "amp-bf16", "--param-dtype", "bf16", "--frozen-dtype", "bf16"]):
            p = run("estimate", self.config, *TRAIN, *g, "--lora-rank", "8", "--lora-targets", "experts", *accepted)
            self.assertEqual(p.returncode, 0, (accepted, p.stderr))
        self.refused(["estimate", self.config, *TRAIN, *g, "--lora-rank", "8", "--lora-targets", "no_such_proj"],
                     "matches the weight of no MatMul/Gemm layer of model")
        self.refused(["serve", self.config, "--engine", "vllm", "--gpu", "H100-80GB", *g],
                     "--experts-implementation with --engine vllm: the engine replaces the experts")

    def test_lora_target_parameters(self):
        # --lora-targets naming the stacked experts: PEFT's LoraConfig(target_parameters=[...]). Rank 2 on the tiny
        # qwen3_moe: gate_up_proj [4, 16, 16] ([E, out, in], PEFT swaps in/out: in 16, out 16) gets lora_A [r·E, in]
        # = [8, 16] and lora_B [out, r·E] = [16, 8], 256 values; down_proj [4, 16, 8] (in 8, out 16) [8, 8] and
        # [16, 8], 192; two layers: 896 float32 values, 3,584 bytes, and as many of grads and of momentum.
        g = ["--experts-implementation", "grouped_mm"]
        def estimate(*extra):
            p = run("estimate", self.config, *TRAIN, *g, "--runtime", "ideal", "--optimizer", "momentum", "--json",
                    *extra)
            self.assertEqual(p.returncode, 0, p.stderr)
            return json.loads(p.stdout)
        e = estimate("--lora-rank", "2", "--lora-targets", "experts")
        self.assertEqual(e["training"]["lora"], {"adapted_layers": 0, "adapter_parameters": 896, "target_parameters": 4})
        self.assertEqual(e["training"]["grad_bytes"], 3584)
        self.assertEqual(e["training"]["optimizer_state_bytes"], 3584)
        self.assertTrue(any("target_parameters" in n and "ParamWrapper" in n for n in e["notes"]), e["notes"])
        # With the attention's Linear layers too (q_proj, v_proj: lora.Linear, [r, 16] + [out, r] each: q 2·16 + 16·2
        # = 64, v 2·16 + 8·2 = 48, a layer 112, two 224): 896 + 224 = 1,120.
        both = estimate("--lora-rank", "2", "--lora-targets", "q_proj|v_proj|experts")
        self.assertEqual(both["training"]["lora"],
                         {"adapted_layers": 4, "adapter_parameters": 1120, "target_parameters": 4})
        # gpt_oss's eager loop reads one expert at a time (self.gate_up_proj[expert_idx]): refused, one line, exit 2.
        oss = os.path.join(self.dir, "gpt_oss.json")
        with open(oss, "w") as f:
            json.dump({"model_type": "gpt_oss", "num_hidden_layers": 2, "hidden_size": 16, "intermediate_size": 8,
                       "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 4, "vocab_size": 64,
                       "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 150000.0,
                       "tie_word_embeddings": False, "torch_dtype": "float32", "hidden_act": "silu",
                       "attention_bias": True, "num_local_experts": 4, "num_experts_per_tok": 2,
                       "experts_per_token": 2, "sliding_window": 8,
                       "layer_types": ["sliding_attention", "full_attention"], "swiglu_limit": 7.0}, f)
        self.refused(["estimate", oss, *TRAIN, "--experts-implementation", "eager", "--lora-rank", "2",
                      "--lora-targets", "experts"],
                     "LoRA through PEFT's target_parameters is modelled on transformers' grouped_mm experts only")
        p = run("estimate", oss, *TRAIN, *g, "--lora-rank", "2", "--lora-targets", "experts\\.(gate_up|down)_proj",
                "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout)["training"]["lora"]["adapter_parameters"], 896)

    def test_decoder_graphs(self):
        # serve --engine eager runs transformers' decoder: grouped_mm's block on the new tokens (N = batch x new).
        g = ["--experts-implementation", "grouped_mm"]
        p = run("serve", self.config, "--graph", "decode", "--engine", "eager", "--context", "128", "--gpu",
                "H100-80GB", *g, "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        for graph, dims in (("decode", ["--dim", "sequence_length=1", "--dim", "past_sequence_length=8",
                                        "--dim", "total_sequence_length=9"]),
                            ("prefill", ["--dim", "sequence_length=128", "--dim", "total_sequence_length=128"])):
            out = os.path.join(self.dir, f"grouped_{graph}.onnx")
            p = run("export", self.config, "--graph", graph, *g, "-o", out)
            self.assertEqual(p.returncode, 0, p.stderr)
            a = run("estimate", out, "--batch", "2", *dims, "--json")
            b = run("estimate", self.config, "--graph", graph, "--batch", "2", *dims, *g, "--json")
            self.assertEqual((a.returncode, b.returncode), (0, 0), a.stderr + b.stderr)
            self.assertEqual(json.loads(a.stdout)["total_bytes"], json.loads(b.stdout)["total_bytes"], graph)

    def test_recipe_sets_grouped_mm_where_modelled(self):
        # hf-trainer on the MoE training graph answers as --experts-implementation grouped_mm; an explicit eager wins.
        def total(*extra):
            p = run("estimate", self.config, *TRAIN, "--runtime", "ideal", "--json", *extra)
            self.assertEqual(p.returncode, 0, p.stderr)
            return json.loads(p.stdout)["total_bytes"]
        recipe = total("--recipe", "hf-trainer")
        self.assertEqual(recipe, total("--recipe", "hf-trainer", "--experts-implementation", "grouped_mm"))
        self.assertNotEqual(recipe, total("--recipe", "hf-trainer", "--experts-implementation", "eager"))
        # Not set where there are no experts: a dense config answers (no refusal).
        self.assertEqual(run("estimate", self.dense, *TRAIN, "--recipe", "hf-trainer").returncode, 0)
        # The configuration line says how the experts ran (the recipe's choice or the user's), and nothing without one.
        self.assertIn(", grouped_mm experts, ", run("estimate", self.config, *TRAIN, "--recipe", "hf-trainer").stdout)
        self.assertIn(", eager experts, ", run("estimate", self.config, *TRAIN, "--experts-implementation", "eager").stdout)
        self.assertNotIn(" experts, ", run("estimate", self.config, *TRAIN).stdout.splitlines()[1])

    def test_qlora_says_the_stacked_experts_stay_whole(self):
        # hf-peft-qlora (grouped_mm experts): the note names the 4 stacked parameters and their 12,288 float32 bytes
        # (2 layers x (4 x 16 x 16 + 4 x 16 x 8) values x 4 B, tests/cost_models/lora_parameters_test.cc); with the
        # eager loop's per-expert Linear layers (quantized) it is not written.
        lora = ["--recipe", "hf-peft-qlora", "--lora-rank", "2", "--lora-targets", "q_proj"]
        p = run("estimate", self.config, *TRAIN, *lora)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("4 stacked experts' parameters (12288 bytes) are not re-stored", p.stdout)
        self.assertNotIn("stacked experts' parameters", run("estimate", self.config, *TRAIN, *lora,
                                                            "--experts-implementation", "eager").stdout)
        # The same 4 parameters when --lora-targets adapts them (PEFT's target_parameters: the _grouped_mm reads their
        # W + delta): still not re-stored, still said.
        p = run("estimate", self.config, *TRAIN, "--recipe", "hf-peft-qlora", "--lora-rank", "2", "--lora-targets",
                "q_proj|experts")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("4 stacked experts' parameters (12288 bytes) are not re-stored", p.stdout)

    def test_deepseek_and_gpt_oss(self):
        # DeepSeek-V2-Lite (deepseek_v2), DeepSeek-V3 (deepseek_v3) and gpt-oss-20b (gpt_oss, without its mxfp4
        # quantization_config, the bfloat16 model) are built with the grouped block (their transformers 5 experts
        # classes are use_experts_implementation's), and the hf-* recipes set it for them. DeepSeek-V3 carries FP8
        # weights (quantization_config), refused off serve: written without it.
        paths = []
        for name in ("DeepSeek-V2-Lite", "DeepSeek-V3", "gpt-oss-20b"):
            with open(os.path.join(CONFIGS, name + ".json")) as f:
                config = {k: v for k, v in json.load(f).items() if k != "quantization_config"}
            paths.append(os.path.join(self.dir, name + ".json"))
            with open(paths[-1], "w") as f:
                json.dump(config, f)
        train = ["--graph", "train", "--batch", "1", "--dim", "seq=16", "--mode", "train"]
        for path in paths:
            p = run("export", path, "--graph", "train", "--experts-implementation", "grouped_mm", "-o",
                    path + ".onnx")
            self.assertEqual(p.returncode, 0, (path, p.stderr))
            import onnx  # Debian's python3-onnx
            model = onnx.load(path + ".onnx", load_external_data=False)
            aten = [n for n in model.graph.node if n.op_type == "ATen"]
            sparse = len([n for n in aten if {a.name: a.s for a in n.attribute}["operator"] == b"histc"])
            # one histc and two _grouped_mm per sparse layer (DeepSeek's first_k_dense_replace layers are dense)
            expected = {"DeepSeek-V2-Lite": 27 - 1, "DeepSeek-V3": 61 - 3, "gpt-oss-20b": 24}
            self.assertEqual(sparse, expected[os.path.basename(path)[:-5]], path)
            self.assertEqual(len(aten), 3 * sparse)
            p = run("estimate", path, *train, "--recipe", "hf-trainer", "--precision", "bf16")
            self.assertEqual(p.returncode, 0, (path, p.stderr))
            self.assertIn(", grouped_mm experts, ", p.stdout, path)

    def test_deepseek_balanced_routing(self):
        # A deepseek_v3 whose router cannot make --moe-routing balanced (8 experts in 2 groups of 4, one group kept,
        # top-3: token 1's experts 3, 4, 5 span both groups): the eager loop, whose expert sizes follow the rule, is
        # refused naming worst; grouped_mm, whose tensors are S rows whatever the routing, answers.
        config = {"model_type": "deepseek_v3", "num_hidden_layers": 2, "first_k_dense_replace": 1, "hidden_size": 16,
                  "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 8, "kv_lora_rank": 8,
                  "qk_nope_head_dim": 4, "qk_rope_head_dim": 4, "v_head_dim": 4, "intermediate_size": 32,
                  "moe_intermediate_size": 8, "vocab_size": 64, "n_routed_experts": 8, "n_group": 2,
                  "topk_group": 1, "num_experts_per_tok": 3, "n_shared_experts": 1, "max_position_embeddings": 256,
                  "rms_norm_eps": 1e-6, "rope_theta": 10000, "tie_word_embeddings": False, "torch_dtype": "float32",
                  "hidden_act": "silu", "norm_topk_prob": True, "routed_scaling_factor": 2.5,
                  "scoring_func": "sigmoid", "topk_method": "noaux_tc", "moe_layer_freq": 1, "ep_size": 1}
        path = os.path.join(self.dir, "deepseek_groups.json")
        with open(path, "w") as f:
            json.dump(config, f)
        self.refused(["estimate", path, *TRAIN, "--experts-implementation", "eager"], "use --moe-routing worst")
        p = run("estimate", path, *TRAIN, "--experts-implementation", "grouped_mm", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        # Its decoder graphs (eval, constant folding) on the new tokens: one grouped block (histc and two _grouped_mm)
        # in the one sparse layer, the exported file estimated as the config.
        for graph, dims in (("decode", ["--dim", "sequence_length=1", "--dim", "past_sequence_length=8",
                                        "--dim", "total_sequence_length=9"]),
                            ("prefill", ["--dim", "sequence_length=128", "--dim", "total_sequence_length=128"])):
            out = os.path.join(self.dir, f"deepseek_{graph}.onnx")
            p = run("export", path, "--graph", graph, "--experts-implementation", "grouped_mm", "-o", out)
            self.assertEqual(p.returncode, 0, p.stderr)
            import onnx  # Debian's python3-onnx
            model = onnx.load(out, load_external_data=False)
            self.assertEqual(len([n for n in model.graph.node if n.op_type == "ATen"]), 3, graph)
            a = run("estimate", out, "--batch", "2", *dims, "--json")
            b = run("estimate", path, "--graph", graph, "--batch", "2", *dims, "--experts-implementation",
                    "grouped_mm", "--json")
            self.assertEqual((a.returncode, b.returncode), (0, 0), a.stderr + b.stderr)
            self.assertEqual(json.loads(a.stdout)["total_bytes"], json.loads(b.stdout)["total_bytes"], graph)

    def test_export_is_read_back(self):
        out = os.path.join(self.dir, "grouped.onnx")
        p = run("export", self.config, "--graph", "train", "--experts-implementation", "grouped_mm", "-o", out)
        self.assertEqual(p.returncode, 0, p.stderr)
        import onnx  # Debian's python3-onnx
        model = onnx.load(out, load_external_data=False)
        # memplan writes no weights: the external-data file the initializers name, all zeros (sparse), as
        # tests/import/hf_config_export_test.py makes it, so that check_model on the path finds it. ONNX's checker
        # knows ATen as an experimental op (it warns "Checker does not support models with experimental ops: ATen")
        # and checks the rest of the model.
        size = max(int({e.key: e.value for e in t.external_data}["offset"]) +
                   int({e.key: e.value for e in t.external_data}["length"]) for t in model.graph.initializer)
        with open(out + ".data", "wb") as f:
            f.truncate(size)
        onnx.checker.check_model(out)
        aten = [n for n in model.graph.node if n.op_type == "ATen"]
        self.assertEqual(len(aten), 6)  # histc and two _grouped_mm in each of the 2 layers
        self.assertEqual({n.domain for n in aten}, {"org.pytorch.aten"})
        self.assertIn("org.pytorch.aten", {o.domain for o in model.opset_import})
        a = run("estimate", out, "--batch", "1", "--dim", "seq=128", "--mode", "train", "--json")
        b = run("estimate", self.config, *TRAIN, "--experts-implementation", "grouped_mm", "--json")
        self.assertEqual(a.returncode, 0, a.stderr)
        self.assertEqual(json.loads(a.stdout)["total_bytes"], json.loads(b.stdout)["total_bytes"])


if __name__ == "__main__":
    unittest.main()
