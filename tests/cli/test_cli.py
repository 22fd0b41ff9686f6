"""End-to-end tests of memplan's decision commands (estimate, fit, check, timeline) through the binary.

Run by ctest with MEMPLAN_BIN and MEMPLAN_SOURCE_DIR set; needs only Debian's python3 and python3-jsonschema.
Expected numbers are computed here independently of memplan (sums, bounds) or come from separate invocations.
"""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import jsonschema

BIN = os.environ["MEMPLAN_BIN"]
SRC = os.environ["MEMPLAN_SOURCE_DIR"]
MODELS = os.path.join(SRC, "tests", "models")
SCHEMAS = os.path.join(SRC, "docs", "schemas")
GOLDEN = os.path.join(SRC, "tests", "cli", "golden")

# Every zoo model, with the dims that text models need.
ZOO = {
    "resnet18.onnx": [], "resnet50.onnx": [], "mobilenet_v2.onnx": [], "efficientnet_b0.onnx": [],
    "vit_b_16.onnx": [], "gpt_tiny.onnx": ["--dim", "seq=128"], "gpt.onnx": ["--dim", "seq=128"],
    "bert.onnx": ["--dim", "seq=128"],
}
TRAIN_ZOO = {
    "resnet18_train.onnx": [], "mobilenet_v2_train.onnx": [], "gpt_tiny.onnx": ["--dim", "seq=128"],
    "bert.onnx": ["--dim", "seq=128"],
}


def run(*args, check_rc=None):
    p = subprocess.run([BIN, *args], cwd=SRC, capture_output=True, text=True, timeout=600)
    if check_rc is not None and p.returncode != check_rc:
        raise AssertionError(f"memplan {' '.join(args)} exited {p.returncode}, expected {check_rc}\n"
                             f"stdout: {p.stdout[-2000:]}\nstderr: {p.stderr[-2000:]}")
    return p


def run_json(*args, rc=0):
    return json.loads(run(*args, "--json", check_rc=rc).stdout)


def schema(name):
    with open(os.path.join(SCHEMAS, f"{name}.schema.json")) as f:
        return json.load(f)


class EstimateTest(unittest.TestCase):
    def test_json_matches_schema_and_breakdown_sums_to_total(self):
        for runtime in ["ideal", "pytorch", "onnxruntime"]:
            e = run_json("estimate", "tests/models/gpt_tiny.onnx", "--batch", "4", "--dim", "seq=256", "--runtime", runtime)
            jsonschema.validate(e, schema("estimate"))
            self.assertEqual(sum(e["breakdown"].values()), e["total_bytes"], runtime)
            self.assertLessEqual(e["lower_bound_bytes"], e["arena_bytes"], runtime)
            if runtime == "pytorch":
                self.assertLessEqual(e["allocated_bytes"], e["reserved_bytes"])
                self.assertEqual(e["total_bytes"], e["reserved_bytes"] + e["breakdown"]["fixed"])

    def test_training_json_matches_schema(self):
        e = run_json("estimate", "tests/models/gpt_tiny.onnx", "--batch", "4", "--dim", "seq=128", "--mode", "train",
                     "--optimizer", "adamw", "--precision", "amp-bf16")
        jsonschema.validate(e, schema("estimate"))
        self.assertIn("training", e)
        self.assertEqual(sum(e["breakdown"].values()), e["total_bytes"])
        # The steady state holds the optimizer states the first iteration creates only at its end.
        self.assertGreater(e["breakdown"]["optimizer_states"], 0)

    def test_output_is_deterministic(self):
        args = ["estimate", "tests/models/resnet18.onnx", "--batch", "8", "--runtime", "pytorch", "--json"]
        self.assertEqual(run(*args, check_rc=0).stdout, run(*args, check_rc=0).stdout)

    def test_larger_batch_never_needs_less(self):
        totals = [run_json("estimate", "tests/models/resnet18.onnx", "--batch", str(b))["total_bytes"] for b in (1, 2, 8)]
        self.assertEqual(totals, sorted(totals))

    def test_the_allocator_at_capacity_and_expandable_segments(self):
        # The issue's Llama-3.2-3B-shaped full fine-tune (bf16, AdamW, batch 4): with fixed segments the
        # unconstrained reserve falls from seq 704 to 768 (freed logits blocks fit the vocab x hidden gradients
        # exactly only at 4 x 768 = 3072 tokens = hidden), while what the step needs of the device only grows.
        # Expandable segments map only the pages a request lacks: they reserve less at 704, never more.
        args = ["estimate", "tests/models/llama3_2_3b_train.onnx", "--mode", "train", "--precision", "bf16",
                "--optimizer", "adamw", "--batch", "4"]
        fixed = {s: run_json(*args, "--dim", f"seq={s}") for s in (640, 704, 768, 832)}
        self.assertGreater(fixed[704]["total_bytes"], fixed[768]["total_bytes"])
        required = [fixed[s]["required_bytes"] for s in (640, 704, 768, 832)]
        self.assertEqual(required, sorted(required))
        for e in fixed.values():
            self.assertLessEqual(e["allocated_bytes"], e["required_bytes"])
            self.assertLessEqual(e["required_bytes"], e["total_bytes"])
        expandable = run_json(*args, "--dim", "seq=704", "--expandable-segments")
        jsonschema.validate(expandable, schema("estimate"))
        self.assertLess(expandable["reserved_bytes"], fixed[704]["reserved_bytes"])
        self.assertLessEqual(expandable["required_bytes"], fixed[704]["required_bytes"])
        self.assertIn("(expandable segments)", expandable["configuration"])
        p = run("estimate", "tests/models/gpt_tiny.onnx", "--dim", "seq=8", "--runtime", "onnxruntime",
                "--expandable-segments", check_rc=2)
        self.assertIn("--runtime onnxruntime with --expandable-segments: --expandable-segments configures PyTorch's "
                      "caching allocator", p.stderr)

    def test_markdown_golden(self):
        out = run("estimate", "tests/models/gpt_tiny.onnx", "--batch", "8", "--dim", "seq=512", "--runtime", "pytorch",
                  "--format", "markdown", check_rc=0).stdout
        with open(os.path.join(GOLDEN, "estimate_gpt_tiny.md")) as f:
            self.assertEqual(out, f.read())


class TiedEmbeddingsTest(unittest.TestCase):
    """The constant-folded tiny Llama has an untied head (tests/models/llama.py: vocab 1000 x hidden 128 for
    both embed_tokens and lm_head), folded pre-transposed as Llama-3.1-8B's is: the default (auto) counts it,
    as the file proves no tie; `shape` takes it for a tied copy of the embedding."""

    HEAD = 1000 * 128 * 4  # one fp32 vocab x hidden matrix, by hand

    def weights(self, *extra):
        j = run_json("estimate", os.path.join(MODELS, "llama_tiny.onnx"), "--batch", "1", "--dim", "seq=8",
                     "--runtime", "pytorch", "--json", *extra)
        return j["breakdown"]["weights"]

    def test_shape_drops_the_head_that_auto_counts(self):
        self.assertEqual(self.weights() - self.weights("--tied-embeddings", "shape"), self.HEAD)
        self.assertEqual(self.weights("--tied-embeddings", "no"), self.weights())

    def test_llama_3_1_8b_untied_head_is_counted_by_default(self):
        """Llama-3.1-8B's lm_head is its own weight (tie_word_embeddings false): Meta's 8,030,261,248 parameters
        (docs/zoo.md) in bf16 are all held; `shape` would drop the 128256 x 4096 head, 6.5 % of them."""
        def weights(*extra):
            return run_json("estimate", os.path.join(MODELS, "llama3_1_8b.onnx"), "--batch", "1", "--dim", "seq=16",
                            "--runtime", "pytorch", "--dtype", "bf16", "--json", *extra)["breakdown"]["weights"]
        auto = weights()
        self.assertGreaterEqual(auto, 8030261248 * 2)
        self.assertEqual(auto - weights("--tied-embeddings", "shape"), 128256 * 4096 * 2)

    def test_a_recorded_tie_that_names_no_transpose_is_ignored_with_a_warning(self):
        """memplan export of a tied config's decoder (folded: the head reads a transposed copy of the embedding)
        records the tie in metadata memplan.tied_copy, "COPY=PARAMETER"; an entry naming no initializer transposing another is never trusted: a warning, and
        the head counted, vocab 1000 x hidden 64 x 4 bytes more by hand."""
        import onnx
        with open(os.path.join(SRC, "tests", "models", "hf_configs", "Llama-3.2-1B.json")) as f:
            config = json.load(f)
        config.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=16, vocab_size=1000, max_position_embeddings=128)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tied.json")
            with open(path, "w") as f:
                json.dump(config, f)
            good = os.path.join(d, "tied.onnx")
            run("export", path, "--graph", "decode", "-o", good, check_rc=0)
            model = onnx.load(good, load_external_data=False)
            entry = [e for e in model.metadata_props if e.key == "memplan.tied_copy"]
            self.assertEqual(len(entry), 1)
            entry[0].value = "no_such_tensor=" + entry[0].value.split("=")[1]
            bad = os.path.join(d, "bad.onnx")
            onnx.save(model, bad)
            def estimate(p):
                return run("estimate", p, "--batch", "1", "--dim", "sequence_length=1", "--dim",
                           "past_sequence_length=7", "--dim", "total_sequence_length=8", "--runtime", "pytorch",
                           "--json", check_rc=0)
            trusted, ignored = estimate(good), estimate(bad)
            self.assertEqual(json.loads(ignored.stdout)["breakdown"]["weights"] -
                             json.loads(trusted.stdout)["breakdown"]["weights"], 1000 * 64 * 4)
            self.assertIn("metadata memplan.tied_copy 'no_such_tensor=", json.loads(ignored.stdout)["warnings"][0])
            self.assertIn("names no initializer transposing another: ignored", json.loads(ignored.stdout)["warnings"][0])

    def test_bad_value_is_an_input_error(self):
        r = run("estimate", os.path.join(MODELS, "llama_tiny.onnx"), "--tied-embeddings", "maybe")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--tied-embeddings", r.stderr)


class FitTest(unittest.TestCase):
    def assert_fit_consistent(self, model, extra, memory):
        f = run_json("fit", f"tests/models/{model}", "--memory", memory, *extra)
        jsonschema.validate(f, schema("fit"))
        budget = f["budget_bytes"]
        v = f["value"]
        self.assertIsNotNone(v, f"{model}: nothing fits {memory}")
        # Independent estimate calls at the found value and the next one: what each needs of the device.
        at = run_json("estimate", f"tests/models/{model}", "--batch", str(v), *extra)["required_bytes"]
        self.assertLessEqual(at, budget, f"{model}: batch {v} does not fit")
        # Training: the search's answer on the steady step alone may be lowered for the run (the first iteration's
        # cache, report/fit.h RunCheck); the steady step's boundary is then at steady_step_value.
        steady = f["run"]["steady_step_value"] if "run" in f else v
        self.assertGreaterEqual(steady, v)
        nxt = run_json("estimate", f"tests/models/{model}", "--batch", str(steady + 1), *extra)["required_bytes"]
        self.assertGreater(nxt, budget, f"{model}: batch {steady + 1} fits too: the search stopped early")

    def test_every_zoo_model_inference(self):
        for model, extra in ZOO.items():
            with self.subTest(model=model):
                self.assert_fit_consistent(model, extra + ["--runtime", "pytorch"], "6GiB")

    def test_zoo_models_training(self):
        for model, extra in TRAIN_ZOO.items():
            with self.subTest(model=model):
                self.assert_fit_consistent(model, extra + ["--mode", "train", "--optimizer", "adamw"], "12GiB")

    def test_an_answer_the_run_lowered_says_so(self):
        # Llama-3.1-8B QLoRA on an A100: the steady step fits at 17, the run (first iteration's cache) at 14 only.
        # The next value's line must not read as if it fitted: it is its steady step that needs less than the budget.
        args = ["fit", "tests/models/hf_configs/Llama-3.1-8B.json", "--gpu", "A100-80GB", "--mode", "train",
                "--recipe", "hf-peft-qlora", "--lora-rank", "16", "--lora-targets", "proj", "--dim", "seq=2048"]
        f = run_json(*args)
        v = f["value"]
        self.assertGreater(f["run"]["steady_step_value"], v)
        self.assertLess(f["estimate_at_next"]["required_bytes"], f["budget_bytes"])
        r = run(*args)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"batch = {v + 1}'s steady step needs", r.stdout)
        self.assertIn("but its run does not fit", r.stdout)
        self.assertIn(f"left at batch = {v}'s steady step (the run, not the step, sets this answer)", r.stdout)

    def test_gpu_budget_is_memory_minus_reserve(self):
        f = run_json("fit", "tests/models/resnet18.onnx", "--gpu", "A100-80GB")
        # catalog: 81034 MiB (the lower end of PyTorch's "79.14 GiB" total capacity), reserve 1024 MiB
        self.assertEqual(f["budget_bytes"], 81034 * 2**20 - 1024 * 2**20)

    def test_catalog_table_and_global_batch(self):
        t = run_json("fit", "tests/models/resnet18.onnx", "--max", "4096")
        jsonschema.validate(t, schema("fit"))
        self.assertGreaterEqual(len(t["gpus"]), 15)
        g = run_json("fit", "tests/models/resnet18.onnx", "--memory", "2GiB", "--global-batch", "1000",
                     "--mode", "train", "--optimizer", "sgd")
        gb = g["global_batch"]
        self.assertLessEqual(gb["micro_batch"], g["value"])
        self.assertGreaterEqual(gb["micro_batch"] * gb["grad_accum"], 1000)

    def test_gpu_by_a_part_of_its_name(self):
        # "h100" is a part of one catalog name (H100-80GB), "4090" of one (RTX-4090): the same answers as the full
        # names; "A100" is a part of two sizes, refused with both named.
        for part, name in (("h100", "H100-80GB"), ("4090", "RTX-4090")):
            full = run("fit", "tests/models/resnet18.onnx", "--gpu", name, "--json").stdout
            self.assertEqual(run("fit", "tests/models/resnet18.onnx", "--gpu", part, "--json").stdout, full)
        err = run("fit", "tests/models/resnet18.onnx", "--gpu", "A100", check_rc=2).stderr
        self.assertIn("--gpu A100 names 2 GPUs: A100-40GB, A100-80GB; say which", err)

    def test_nothing_fits_exits_1(self):
        p = run("fit", "tests/models/resnet50.onnx", "--memory", "1MiB", check_rc=1)
        self.assertIn("nothing fits", p.stdout)

    def test_bad_usage_exits_2(self):
        self.assertIn("unknown GPU", run("fit", "tests/models/resnet18.onnx", "--gpu", "Z80", check_rc=2).stderr)
        run("fit", "tests/models/resnet18.onnx", "--gpu", "T4", "--memory", "8GiB", check_rc=2)
        self.assertIn("not a size", run("fit", "tests/models/resnet18.onnx", "--memory", "lots", check_rc=2).stderr)
        self.assertIn("drop --batch", run("fit", "tests/models/resnet18.onnx", "--memory", "8GiB", "--batch", "2",
                                          check_rc=2).stderr)


class TrainingFlagsTest(unittest.TestCase):
    TRAIN = ["estimate", "tests/models/gpt_tiny_train.onnx", "--batch", "4", "--dim", "seq=128", "--mode", "train"]

    def test_frozen_parameters_have_no_grads_or_states(self):
        full = run_json(*self.TRAIN, "--runtime", "ideal")["training"]
        part = run_json(*self.TRAIN, "--runtime", "ideal", "--trainable", r"^blocks\.1\.")["training"]
        # Only block 1's parameters train: fewer grad and state bytes, the same parameters held.
        self.assertLess(part["grad_bytes"], full["grad_bytes"])
        self.assertEqual(part["optimizer_state_bytes"], 2 * part["grad_bytes"])  # AdamW: exp_avg, exp_avg_sq
        self.assertEqual(part["param_bytes"], part["grad_bytes"])

    def test_amsgrad_adds_a_third_state(self):
        two = run_json(*self.TRAIN, "--runtime", "ideal")["training"]
        three = run_json(*self.TRAIN, "--runtime", "ideal", "--amsgrad")["training"]
        self.assertEqual(three["optimizer_state_bytes"] * 2, two["optimizer_state_bytes"] * 3)

    def test_paged_bitsandbytes_states_are_reported_apart(self):
        # llama_tiny: embed_tokens and lm_head are the only parameters of at least 1e5 elements (1000 x 128 =
        # 128,000 each); PagedAdamW8bit pages their two uint8 states: 2 x 2 x 128,000 = 512,000 bytes, in no other
        # figure. AdamW8bit holds the same bytes on the device instead.
        llama = ["estimate", "tests/models/llama_tiny_train.onnx", "--batch", "2", "--dim", "seq=16", "--mode", "train",
                 "--runtime", "ideal"]
        paged = run_json(*llama, "--optimizer", "paged-adamw8bit")
        jsonschema.validate(paged, schema("estimate"))
        on_device = run_json(*llama, "--optimizer", "adamw8bit")["training"]
        self.assertEqual(paged["training"]["paged_optimizer_state_bytes"], 512000)
        self.assertEqual(on_device["optimizer_state_bytes"] - paged["training"]["optimizer_state_bytes"], 512000)
        self.assertNotIn("paged_optimizer_state_bytes", on_device)

    def test_errors_name_the_flag(self):
        cases = [
            (["--optimizer", "adamw8bit", "--maximize"], "--maximize with --optimizer adamw8bit: bitsandbytes' optimizers have no maximize"),
            (["--optimizer", "paged-adamw", "--optimizer-impl", "fused"],
             "--optimizer-impl applies to torch.optim's adam and adamw; --optimizer paged-adamw updates each parameter in one bitsandbytes kernel"),
            (["--optimizer", "paged-adamw", "--shard", "zero2", "--gpus", "2"], "--shard zero1/zero2 with --optimizer adamw8bit/paged-adamw/paged-adamw8bit: not modelled"),
            (["--trainable", "lora_"], "--trainable 'lora_' matches no parameter of model 'tests/models/gpt_tiny_train.onnx'"),
            (["--frozen", "("], "--frozen '(' is not a valid regular expression"),
            (["--torch", "3"], "--torch 3: expected one of 2|2.x|1.13"),
            (["--torch", "1.13", "--attention", "sdpa"], "--attention sdpa with --torch 1.13: scaled_dot_product_attention is new in PyTorch 2.0"),
            (["--zero-grad", "none"], "--zero-grad none: expected one of set-to-none|zeros"),
            (["--amsgrad", "--optimizer", "sgd"], "--amsgrad applies to --optimizer adam or adamw"),
            (["--weight-decay", "-1"], "--weight-decay -1: must be at least 0"),
        ]
        for extra, message in cases:
            self.assertIn(message, run(*self.TRAIN, *extra, check_rc=2).stderr, extra)
        self.assertIn("--frozen applies to --mode train",
                      run("estimate", "tests/models/gpt_tiny.onnx", "--dim", "seq=8", "--frozen", "x", check_rc=2).stderr)


class CudnnBenchmarkTest(unittest.TestCase):
    # --cudnn-benchmark (report/cudnn_workspace.h): the decision counts no cuDNN workspace either way; fit and check
    # say the margin at the answer, what part of the decision the workspace took (none) and, with the benchmark,
    # what it may take.
    TRAIN = ["tests/models/resnet18_train.onnx", "--mode", "train", "--gpu", "T4"]

    def test_a_bad_value_is_one_message_and_exit_2(self):
        for command in (["fit", *self.TRAIN], ["check", *self.TRAIN, "--batch", "8"],
                        ["estimate", "tests/models/resnet18.onnx", "--batch", "8"]):
            p = run(*command, "--cudnn-benchmark", "yes", check_rc=2)
            self.assertEqual(p.stderr.strip().splitlines(),
                             ["memplan: error: --cudnn-benchmark yes: expected one of on|off"], command)
            self.assertEqual(p.stdout, "", command)

    def test_fit_and_check_say_the_margin_and_the_workspaces_part_of_the_decision(self):
        on = run_json("fit", *self.TRAIN)
        jsonschema.validate(on, schema("fit"))
        self.assertEqual(on["margin_bytes"], on["budget_bytes"] - on["estimate_at_value"]["required_bytes"])
        self.assertEqual(on["cudnn_workspace"]["benchmark"], True)
        self.assertEqual(on["cudnn_workspace"]["decision_bytes"], 0)
        self.assertGreater(on["cudnn_workspace"]["first_iteration_extra_free_bytes"], 0)
        off = run_json("fit", *self.TRAIN, "--cudnn-benchmark", "off")
        self.assertEqual((off["value"], off["margin_bytes"]), (on["value"], on["margin_bytes"]))
        self.assertEqual(off["cudnn_workspace"], {"benchmark": False, "decision_bytes": 0})
        check = run_json("check", *self.TRAIN, "--batch", str(on["value"]))
        jsonschema.validate(check, schema("check"))
        self.assertEqual(check["limits"][0]["margin_bytes"], on["margin_bytes"])
        self.assertEqual(check["cudnn_workspace"], on["cudnn_workspace"])
        over = run_json("check", *self.TRAIN, "--batch", str(on["value"] + 1), rc=1)
        self.assertEqual(over["limits"][0]["margin_bytes"],
                         over["limits"][0]["limit_bytes"] - over["limits"][0]["value_bytes"])
        self.assertLess(over["limits"][0]["margin_bytes"], 0)
        # A model without convolutions says nothing of cuDNN.
        self.assertNotIn("cudnn_workspace", run_json("fit", "tests/models/gpt_tiny.onnx", "--dim", "seq=64",
                                                     "--gpu", "T4"))


class CheckpointLayersTest(unittest.TestCase):
    def test_layers_are_the_per_layer_boundaries_of_the_cpu_measurements(self):
        # bench/cpu_ground_truth/measure.py checkpoints each decoder layer (llama_forward, gpt_forward) and recorded
        # the boundaries it found from the exports' module scopes; --checkpoint layers must find those tensors, so
        # its figures are the at: figures the accuracy gate compares with the measured peaks. (Its resnet and
        # mobilenet rows checkpoint whole stages, not the repeated blocks.)
        with open(os.path.join(SRC, "bench", "cpu_ground_truth", "measurements.json")) as f:
            rows = json.load(f)["measurements"]
        seen = set()
        for m in rows:
            if not m["checkpoint"] or m["onnx"] in seen or not m.get("seq"):
                continue
            seen.add(m["onnx"])
            args = ["estimate", m["onnx"], "--mode", "train", "--runtime", "ideal", "--batch", str(m["batch"]),
                    "--dim", f"seq={m['seq']}"]
            layers = run_json(*args, "--checkpoint", "layers")
            at = run_json(*args, "--checkpoint", "at:" + ",".join(m["checkpoint"]))
            self.assertEqual(layers["training"]["checkpoint_boundaries"], m["checkpoint"], m["onnx"])
            self.assertEqual(layers["total_bytes"], at["total_bytes"], m["onnx"])
        self.assertGreaterEqual(len(seen), 3)

    def test_checkpoint_impl(self):
        # --checkpoint-impl non-reentrant (use_reentrant=False): the recomputed output and its grad are not held to
        # each layer's backward end (bench/cpu_ground_truth/README.md measures both on the CPU), so the step needs no
        # more than the reentrant one; under --torch 2 its early stop recomputes less still.
        args = ["estimate", "tests/models/llama_tiny_train.onnx", "--mode", "train", "--runtime", "ideal", "--batch", "8",
                "--dim", "seq=128"]
        def peak(*extra):
            j = run_json(*args, "--checkpoint", "layers", *extra)
            return j["resident_bytes"] + j["lower_bound_bytes"]
        reentrant, whole = peak("--torch", "1.13"), peak("--torch", "1.13", "--checkpoint-impl", "non-reentrant")
        self.assertLess(whole, reentrant)
        self.assertLessEqual(peak("--checkpoint-impl", "non-reentrant"), peak("--torch", "2", "--checkpoint-impl",
                                                                              "non-reentrant"))
        for extra, message in [
            (["--checkpoint", "none", "--checkpoint-impl", "reentrant"],
             "--checkpoint-impl reentrant applies to --checkpoint: nothing is checkpointed"),
            (["--checkpoint", "selective", "--checkpoint-impl", "reentrant"],
             "--checkpoint selective[:op|:N] with --checkpoint-impl reentrant: torchtitan's selective checkpointing is "
             "always non-reentrant (ptd_checkpoint_wrapper, CheckpointImpl.NO_REENTRANT): drop --checkpoint-impl"),
            (["--checkpoint", "layers", "--checkpoint-impl", "both"], "--checkpoint-impl"),
        ]:
            p = run(*args, *extra, check_rc=2)
            self.assertIn(message, p.stderr, extra)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)

    def test_a_block_whose_output_does_not_separate_the_graph_is_refused(self):
        # blocks.0's one output h0 is added to the block's own input outside it (x + h0, a residual around the
        # whole block): x bypasses h0, so no tensor leaving blocks.0 separates the graph.
        import onnx
        from onnx import TensorProto, helper, numpy_helper
        import numpy as np
        w = [numpy_helper.from_array(np.ones((4, 4), np.float32), f"blocks.{i}.fc.weight") for i in range(2)]
        nodes = [helper.make_node("MatMul", ["x", "blocks.0.fc.weight"], ["h0"], name="/blocks.0/fc/MatMul"),
                 helper.make_node("Add", ["x", "h0"], ["r0"], name="/Add"),
                 helper.make_node("MatMul", ["r0", "blocks.1.fc.weight"], ["y"], name="/blocks.1/fc/MatMul")]
        graph = helper.make_graph(nodes, "blocks", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], w)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "blocks.onnx")
            onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
            err = run("estimate", path, "--mode", "train", "--checkpoint", "layers", check_rc=2).stderr
        self.assertEqual(err, f"memplan: error: --checkpoint layers: block 'blocks.0' of model '{path}' has 0 separating "
                              "tensors leaving it, not one (its nodes are those torch.onnx named under its module scope); "
                              "give at:T1,T2,...\n")

    def test_a_model_without_repeated_blocks_is_refused(self):
        # torchvision's ViT names its encoder layers encoder_layer_0, ...: no <prefix>.<N>. blocks.
        err = run("estimate", "tests/models/vit_b_16_train.onnx", "--mode", "train", "--batch", "1", "--checkpoint",
                  "layers", check_rc=2).stderr
        self.assertIn("--checkpoint layers: model 'tests/models/vit_b_16_train.onnx' has no repeated blocks", err)


class CheckpointSelectiveTest(unittest.TestCase):
    BASE = ["estimate", "tests/models/llama_tiny_train.onnx", "--batch", "2", "--dim", "seq=256", "--mode", "train",
            "--runtime", "ideal"]

    def test_selective_lies_between_none_and_layers(self):
        # torchtitan's selective AC keeps some of each block's activations (mm and SDPA outputs), layers only the
        # blocks' inputs, none everything autograd saves; selective:2 checkpoints two of the four layers whole.
        total = {c: run_json(*self.BASE, "--attention", "sdpa", "--checkpoint", c)["total_bytes"]
                 for c in ("none", "selective", "selective:op", "selective:2", "layers")}
        self.assertEqual(total["selective"], total["selective:op"])
        self.assertLess(total["layers"], total["selective"])
        self.assertLess(total["selective"], total["none"])
        self.assertLess(total["layers"], total["selective:2"])
        self.assertLess(total["selective:2"], total["none"])
        # selective:2 reports the boundaries of the checkpointed layers only: layers.1 is (h0, h1], layers.3 (h2, h3].
        two = run_json(*self.BASE, "--checkpoint", "selective:2")["training"]["checkpoint_boundaries"]
        self.assertEqual(two, [f"/layers.{i}/Add_1_output_0" for i in range(4)])

    def test_bad_selective_options_are_refused(self):
        for bad in ("selective:0", "selective:x", "selective: 2", "selective:-1"):
            err = run(*self.BASE, "--checkpoint", bad, check_rc=2).stderr
            self.assertEqual(err, f"memplan: error: --checkpoint {bad}: expected selective, selective:op or "
                                  "selective:N with N >= 1 (every N-th block checkpointed; every block is "
                                  "--checkpoint layers)\n")

    def test_a_model_without_repeated_blocks_is_refused_as_layers_refuses_it(self):
        args = ["estimate", "tests/models/vit_b_16_train.onnx", "--mode", "train", "--batch", "1", "--checkpoint"]
        layers = run(*args, "layers", check_rc=2).stderr
        for mode in ("selective", "selective:2"):
            self.assertEqual(run(*args, mode, check_rc=2).stderr, layers)


class FsdpTest(unittest.TestCase):
    """--shard fsdp on the tiny Llama (tests/models/llama.py, CONFIGS["llama_tiny"]: hidden 128, ffn 352, 4 layers,
    kv 64, vocab 1000, untied head). Units: layers.0-3 and the root (embed_tokens, norm, lm_head)."""
    BASE = ["estimate", "tests/models/llama_tiny_train.onnx", "--batch", "2", "--dim", "seq=64", "--mode", "train",
            "--runtime", "ideal"]
    # Per layer 2*128*128 + 2*128*64 + 3*128*352 + 2*128 = 184,576 elements: over 3 GPUs ceil(/3) = 61,526 per
    # rank (FSDP pads the flat parameter to a multiple of 3), 246,104 bytes fp32. Root 128,000 + 128 + 128,000
    # = 256,128 elements = 85,376 per rank, 341,504 bytes. Per GPU: 4 * 246,104 + 341,504 = 1,325,920 bytes.
    PER_GPU = 4 * 61526 * 4 + 85376 * 4

    def test_shards_by_hand(self):
        out = run_json(*self.BASE, "--gpus", "3", "--shard", "fsdp")
        jsonschema.validate(out, schema("estimate"))
        t = out["training"]
        self.assertEqual(t["param_bytes"], self.PER_GPU)
        self.assertEqual(t["grad_bytes"], self.PER_GPU)
        self.assertEqual(t["optimizer_state_bytes"], 2 * self.PER_GPU)  # AdamW: exp_avg, exp_avg_sq
        self.assertTrue(any(n.startswith("FSDP FULL_SHARD: 5 wrapping units") for n in out["notes"]), out["notes"])
        # One unit for all four layers: 4 * 184,576 = 738,304 elements, 246,102 per rank (divisible by 3).
        one = run_json(*self.BASE, "--gpus", "3", "--shard", "fsdp", "--fsdp-wrap", r"^(layers)\.")["training"]
        self.assertEqual(one["param_bytes"], 246102 * 4 + 85376 * 4)

    def test_accumulation_outside_no_sync_says_how_to_model_it(self):
        # Plain --shard fsdp --grad-accum reduce-scatters every micro-batch (no no_sync()); the note names the flag for
        # a loop under model.no_sync(), whose unsharded grads would otherwise go uncounted. ZeRO-2 has no no_sync.
        notes = run_json(*self.BASE, "--gpus", "3", "--shard", "fsdp", "--grad-accum", "2")["notes"]
        acc = [n for n in notes if n.startswith("Gradient accumulation")]
        self.assertEqual(len(acc), 1, notes)
        self.assertIn("outside no_sync()", acc[0])
        self.assertIn("--fsdp-no-sync", acc[0])
        inside = run_json(*self.BASE, "--gpus", "3", "--shard", "fsdp", "--grad-accum", "2", "--fsdp-no-sync")["notes"]
        self.assertFalse(any("outside no_sync()" in n for n in inside), inside)
        zero2 = run_json(*self.BASE, "--gpus", "3", "--shard", "zero2", "--grad-accum", "2")["notes"]
        self.assertFalse(any("--fsdp-no-sync" in n for n in zero2), zero2)

    def test_fsdp2_shards_each_parameter_by_hand(self):
        # fully_shard keeps ceil(dim0 / 3) rows of each parameter (torch.chunk's chunks[0], padded). Per layer:
        # the two norms 43 + 43, q and o 43 * 128 = 5,504 each, k and v 22 * 128 = 2,816 each, gate and up
        # 118 * 128 = 15,104 each, down 43 * 352 = 15,136: 62,070 elements = 248,280 bytes. Root: embed_tokens and
        # lm_head 334 * 128 = 42,752 each, norm 43: 85,547 = 342,188 bytes. Per GPU 4 * 248,280 + 342,188 =
        # 1,335,308 bytes (FSDP1's padded flat parameters: 1,325,920).
        out = run_json(*self.BASE, "--gpus", "3", "--shard", "fsdp2")
        jsonschema.validate(out, schema("estimate"))
        t = out["training"]
        per_gpu = 4 * 62070 * 4 + 85547 * 4
        self.assertEqual(t["param_bytes"], per_gpu)
        self.assertEqual(t["grad_bytes"], per_gpu)
        self.assertEqual(t["optimizer_state_bytes"], 2 * per_gpu)
        self.assertTrue(any(n.startswith("FSDP2 (fully_shard): 5 parameter groups") for n in out["notes"]), out["notes"])
        # fsdp1 is fsdp's other name.
        self.assertEqual(run_json(*self.BASE, "--gpus", "3", "--shard", "fsdp1")["training"],
                         run_json(*self.BASE, "--gpus", "3", "--shard", "fsdp")["training"])

    def test_fsdp2_over_tensor_parallel_shards_each_slice_by_hand(self):
        # --tp 2 --gpus 3 (torchtitan's 2-D parallelism): fully_shard chunks the tensor-parallel slice on dim 0
        # (FSDPParam._init_sharding_spec_tp: param._local_tensor). Per layer: q [64,128] 22 * 128 = 2,816; k and v
        # [32,128] 11 * 128 = 1,408 each; o [128,64] 43 * 64 = 2,752; gate and up [176,128] 59 * 128 = 7,552 each;
        # down [128,176] 43 * 176 = 7,568; norms 43 each: 31,142 elements. Root: embed_tokens and lm_head [500,128]
        # 167 * 128 = 21,376 each, norm 43: 42,795. Per GPU 4 * 31,142 + 42,795 = 167,363 elements, float32.
        out = run_json(*self.BASE, "--gpus", "3", "--shard", "fsdp2", "--tp", "2")
        jsonschema.validate(out, schema("estimate"))
        t = out["training"]
        per_gpu = (4 * 31142 + 42795) * 4
        self.assertEqual(t["param_bytes"], per_gpu)
        self.assertEqual(t["grad_bytes"], per_gpu)
        self.assertEqual(t["optimizer_state_bytes"], 2 * per_gpu)
        self.assertTrue(any("rows of every parameter (of its --tp slice" in n for n in out["notes"]), out["notes"])

    def test_fsdp2_mixed_precision_keeps_float32_shards(self):
        # --fsdp2-mp bf16:fp32 (MixedPrecisionPolicy, torchtitan's): the shards, grad shards and AdamW's states stay
        # float32, so per GPU they are the fp32 figures above (1,335,308 bytes each, states twice); the gathered
        # parameters and the activations are bf16, which the peak shows: it is below the policy-less fp32 step's.
        mp = run_json(*self.BASE, "--gpus", "3", "--shard", "fsdp2", "--fsdp2-mp", "bf16:fp32")
        jsonschema.validate(mp, schema("estimate"))
        t = mp["training"]
        per_gpu = 4 * 62070 * 4 + 85547 * 4
        self.assertEqual(t["param_bytes"], per_gpu)
        self.assertEqual(t["grad_bytes"], per_gpu)
        self.assertEqual(t["optimizer_state_bytes"], 2 * per_gpu)
        self.assertTrue(any("MixedPrecisionPolicy: shards, their grads and the optimizer states float32, gathered "
                            "and computed in bfloat16, reduced in float32" in n for n in mp["notes"]), mp["notes"])
        fp32 = run_json(*self.BASE, "--gpus", "3", "--shard", "fsdp2")
        self.assertLess(mp["total_bytes"], fp32["total_bytes"])

    def test_fsdp2_mixed_precision_with_lora_by_hand(self):
        # --fsdp2-mp bf16:fp32 with LoRA r 8 on q/v over the float32 model (not accelerate's run, which adds autocast over
        # a bf16:bf16 policy: below): the adapters are float32
        # parameters sharded with the base (the base's shards as above, 1,335,308 bytes) and cast to bf16 at each
        # all-gather. Adapters a layer, ceil(dim0 / 3) rows: q lora_A [8,128] 3 * 128 = 384, lora_B [128,8] 43 * 8 =
        # 344; v lora_A 384, lora_B [64,8] 22 * 8 = 176: 1,288 elements, 4 layers 5,152 = 20,608 bytes, which are
        # also the grads (float32 shards) and half the AdamW states. The base is float32, so --lora-dtype (PEFT's
        # upcast of half adapters) changes nothing: the same answer with base.
        args = (*self.BASE, "--gpus", "3", "--shard", "fsdp2", "--fsdp2-mp", "bf16:fp32", "--lora-rank", "8",
                "--lora-targets", "q_proj|v_proj")
        out = run_json(*args)
        jsonschema.validate(out, schema("estimate"))
        t = out["training"]
        adapters = 4 * 1288 * 4
        self.assertEqual(t["param_bytes"], 4 * 62070 * 4 + 85547 * 4 + adapters)
        self.assertEqual(t["grad_bytes"], adapters)
        self.assertEqual(t["optimizer_state_bytes"], 2 * adapters)
        base = run_json(*args, "--lora-dtype", "base")
        self.assertEqual(base["total_bytes"], out["total_bytes"])
        self.assertEqual(base["training"], out["training"])
        # FSDP2 with MixedPrecisionPolicy(bf16, bf16) under a loop's own torch.autocast (the policy accelerate's
        # set_mixed_precision builds; fsdp2_prepare_model keeps the adapters float32 shards): the same shards, grads
        # and states as above, the step's activations bf16 and float32 as autocast makes them over the bf16 gathered
        # parameters (tests/cost_models/fsdp_amp_test.cc).
        acc = run_json(*self.BASE, "--gpus", "3", "--shard", "fsdp2", "--fsdp2-mp", "bf16:bf16", "--precision",
                       "amp-bf16", "--lora-rank", "8", "--lora-targets", "q_proj|v_proj")
        jsonschema.validate(acc, schema("estimate"))
        self.assertEqual(acc["training"]["param_bytes"], t["param_bytes"])
        self.assertEqual(acc["training"]["grad_bytes"], adapters)
        self.assertEqual(acc["training"]["optimizer_state_bytes"], 2 * adapters)
        self.assertTrue(any("Under torch.autocast (accelerate's mixed_precision) on top" in n for n in acc["notes"]),
                        acc["notes"])
        # The recipes set that policy under --shard fsdp with --precision amp-*: the same answer as the flags (and
        # accelerate's convert_outputs_to_fp32, --outputs-to-fp32). Under fsdp2 accelerate runs no autocast
        # (Accelerator._prepare_fsdp2 never calls prepare_model): the recipes refuse amp-* there, naming the flags of
        # what it builds, the float32 shards computing in the policy's type.
        for recipe in ("hf-trainer", "hf-peft"):
            args = (*self.BASE, "--recipe", recipe, "--gpus", "3", "--shard", "fsdp", "--precision", "amp-bf16")
            by_recipe = run_json(*args)
            by_flags = run_json(*args, "--fsdp2-mp", "bf16:bf16", "--outputs-to-fp32")
            self.assertEqual(by_recipe["total_bytes"], by_flags["total_bytes"], recipe)
            self.assertTrue(any("bfloat16" in n and "autocast" in n for n in by_recipe["notes"]), recipe)
            err = run(*self.BASE, "--recipe", recipe, "--gpus", "3", "--shard", "fsdp2", "--precision", "amp-bf16",
                      check_rc=2).stderr
            self.assertIn("accelerate runs no torch.autocast under FSDP2", err)
            self.assertIn("--precision fp32 --fsdp2-mp bf16:bf16", err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)
            run_json(*self.BASE, "--recipe", recipe, "--gpus", "3", "--shard", "fsdp2", "--precision", "fp32",
                     "--fsdp2-mp", "bf16:bf16")
        # A policy whose param_dtype is not autocast's type is not accelerate's: one message, exit 2.
        err = run(*self.BASE, "--gpus", "3", "--shard", "fsdp2", "--fsdp2-mp", "bf16:bf16", "--precision", "amp-fp16",
                  check_rc=2).stderr
        self.assertIn("--fsdp2-mp bf16:bf16 with --precision amp-fp16: not modelled: the policy's param_dtype is not "
                      "autocast's type", err)
        self.assertIn("give --fsdp2-mp fp16:fp16", err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)

    def test_frozen_half_under_fsdp_needs_its_policy_and_accelerate_units_need_fsdp2(self):
        # Frozen bf16 weights under FSDP are modelled under a bf16 policy (accelerate over a bf16 checkpoint, which
        # upcasts only what requires grad); without one, one message naming both flags and the policy, exit 2.
        lora = ("--lora-rank", "8", "--lora-targets", "q_proj|v_proj", "--frozen-dtype", "bf16")
        for shard, precision in (("fsdp", "amp-bf16"), ("fsdp2", "fp32")):
            err = run(*self.BASE, "--gpus", "3", "--shard", shard, "--precision", precision, *lora, check_rc=2).stderr
            self.assertIn("--shard %s with --frozen-dtype bf16: modelled under a mixed-precision policy in the frozen "
                          "weights' type" % shard, err)
            self.assertIn("--fsdp2-mp bf16:bf16", err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)
            run_json(*self.BASE, "--gpus", "3", "--shard", shard, "--precision", precision, *lora,
                     "--fsdp2-mp", "bf16:bf16")
        # accelerate's FSDP2 units are fully_shard's: under FSDP1 one message, exit 2.
        err = run(*self.BASE, "--gpus", "3", "--shard", "fsdp", "--fsdp-wrap", "accelerate", check_rc=2).stderr
        self.assertIn("--fsdp-wrap accelerate is accelerate's fully_shard groups: it needs --shard fsdp2", err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)

    def test_fsdp2_cpu_offload_moves_shards_grads_states_to_the_host(self):
        # --fsdp-cpu-offload (CPUOffloadPolicy, torchtune's fsdp_cpu_offload): the fp32 shards (1,335,308 bytes a GPU,
        # test_fsdp2_shards_each_parameter_by_hand), their grads (the same) and AdamW's two states (twice) all on the
        # host: 4 x 1,335,308 = 5,341,232 bytes on the host line; none on the GPU, whose step is smaller.
        out = run_json(*self.BASE, "--gpus", "3", "--shard", "fsdp2", "--fsdp-cpu-offload")
        jsonschema.validate(out, schema("estimate"))
        t = out["training"]
        per_gpu = 4 * 62070 * 4 + 85547 * 4
        self.assertEqual(t["fsdp_offload_host_bytes"], 4 * per_gpu)
        self.assertEqual((t["param_bytes"], t["grad_bytes"], t["optimizer_state_bytes"]), (0, 0, 0))
        self.assertTrue(any("CPUOffloadPolicy" in n for n in out["notes"]), out["notes"])
        plain = run_json(*self.BASE, "--gpus", "3", "--shard", "fsdp2")
        self.assertNotIn("fsdp_offload_host_bytes", plain["training"])
        self.assertLess(out["total_bytes"], plain["total_bytes"])
        table = run(*self.BASE, "--gpus", "3", "--shard", "fsdp2", "--fsdp-cpu-offload", check_rc=0).stdout
        self.assertIn("FSDP CPU offload", table)
        self.assertIn("5,341,232 B", run(*self.BASE, "--gpus", "3", "--shard", "fsdp2", "--fsdp-cpu-offload",
                                          "--format", "markdown", check_rc=0).stdout)

    def test_fsdp1_cpu_offload_moves_flat_shards_cpu_grads_states_to_the_host(self):
        # --shard fsdp --fsdp-cpu-offload (FSDP1's CPUOffload(offload_params=True)): each unit's padded flat shard
        # (PER_GPU = 1,325,920 bytes a GPU, test_shards_by_hand), its _cpu_grad (zeros_like the shard, pinned) and
        # AdamW's two states, all on the host: 4 x 1,325,920 = 5,303,680 bytes on the host line; none on the GPU.
        out = run_json(*self.BASE, "--gpus", "3", "--shard", "fsdp", "--fsdp-cpu-offload")
        jsonschema.validate(out, schema("estimate"))
        t = out["training"]
        self.assertEqual(t["fsdp_offload_host_bytes"], 4 * self.PER_GPU)
        self.assertEqual((t["param_bytes"], t["grad_bytes"], t["optimizer_state_bytes"]), (0, 0, 0))
        self.assertTrue(any("CPUOffload(offload_params=True)" in n for n in out["notes"]), out["notes"])
        plain = run_json(*self.BASE, "--gpus", "3", "--shard", "fsdp")
        self.assertLess(out["total_bytes"], plain["total_bytes"])
        self.assertIn("5,303,680 B", run(*self.BASE, "--gpus", "3", "--shard", "fsdp", "--fsdp-cpu-offload",
                                          "--format", "markdown", check_rc=0).stdout)
        # Gradient accumulation outside no_sync() is wrong under FSDP1's CPU offload (its docstring): refused.
        err = run(*self.BASE, "--gpus", "3", "--shard", "fsdp", "--fsdp-cpu-offload", "--grad-accum", "2",
                  check_rc=2).stderr
        self.assertIn("FSDP1's CPU offload does not accumulate gradients outside no_sync()", err)
        self.assertIn("it needs --shard fsdp2 or fsdp",
                      run(*self.BASE, "--gpus", "3", "--shard", "ddp", "--fsdp-cpu-offload", check_rc=2).stderr)

    def test_fsdp1_mixed_precision_keeps_float32_flat_shards(self):
        # --shard fsdp --fsdp2-mp bf16:fp32 (FSDP1's MixedPrecision; --fsdp-mp is the same flag): _local_shard, the grad
        # shards (cast back to float32) and AdamW's states stay float32, PER_GPU each (states twice) as without it;
        # the gathered flat parameters, the activations and the unsharded grads are bf16: the step's total is lower.
        for flag in ("--fsdp2-mp", "--fsdp-mp"):
            mp = run_json(*self.BASE, "--gpus", "3", "--shard", "fsdp", flag, "bf16:fp32")
            jsonschema.validate(mp, schema("estimate"))
            t = mp["training"]
            self.assertEqual((t["param_bytes"], t["grad_bytes"], t["optimizer_state_bytes"]),
                             (self.PER_GPU, self.PER_GPU, 2 * self.PER_GPU), flag)
            self.assertTrue(any("MixedPrecision: the shards, their grads and the optimizer states float32; each shard "
                                "cast to a bfloat16 _mp_shard" in n for n in mp["notes"]), mp["notes"])
        fp32 = run_json(*self.BASE, "--gpus", "3", "--shard", "fsdp")
        self.assertLess(mp["total_bytes"], fp32["total_bytes"])
        # With CPUOffload the host holds what it holds without MixedPrecision: 4 x PER_GPU.
        off = run_json(*self.BASE, "--gpus", "3", "--shard", "fsdp", "--fsdp-mp", "bf16:fp32", "--fsdp-cpu-offload")
        self.assertEqual(off["training"]["fsdp_offload_host_bytes"], 4 * self.PER_GPU)
        # accelerate's mixed_precision="bf16" is a bf16:bf16 policy under torch.autocast: the shards, grads and states
        # as above (float32, PER_GPU), the gathered units bf16; fp16 autocast over a bf16 policy is refused.
        acc = run_json(*self.BASE, "--gpus", "3", "--shard", "fsdp", "--fsdp-mp", "bf16:bf16", "--precision", "amp-bf16")
        t = acc["training"]
        self.assertEqual((t["param_bytes"], t["grad_bytes"], t["optimizer_state_bytes"]),
                         (self.PER_GPU, self.PER_GPU, 2 * self.PER_GPU))
        self.assertLess(acc["total_bytes"], run_json(*self.BASE, "--gpus", "3", "--shard", "fsdp", "--precision",
                                                     "amp-bf16")["total_bytes"])
        err = run(*self.BASE, "--gpus", "3", "--shard", "fsdp", "--fsdp-mp", "fp16:fp32", "--precision", "amp-bf16",
                  check_rc=2).stderr
        self.assertIn("--fsdp2-mp fp16:fp32 with --precision amp-bf16: not modelled: the policy's param_dtype", err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)

    def test_fsdp1_no_sync_keeps_unsharded_grads_by_hand(self):
        # --grad-accum 2 --fsdp-no-sync (accelerate's accumulate / HF Trainer: the first micro-batch inside FSDP1's
        # no_sync()): each unit's unsharded flat grad, unpadded, kept from it: a layer 184,576 x 4 = 738,304 B, the root
        # 256,128 x 4 = 1,024,512 B, 3,977,728 B in all, besides the grad shards the last micro-batch makes (PER_GPU).
        # Outside no_sync() the shards alone (PER_GPU), kept between micro-batches.
        args = (*self.BASE, "--gpus", "3", "--shard", "fsdp", "--grad-accum", "2")
        no_sync = run_json(*args, "--fsdp-no-sync")
        jsonschema.validate(no_sync, schema("estimate"))
        self.assertEqual(no_sync["training"]["grad_bytes"], self.PER_GPU + 3977728)
        self.assertTrue(any("inside FSDP1's no_sync()" in n for n in no_sync["notes"]), no_sync["notes"])
        reduced = run_json(*args)
        self.assertEqual(reduced["training"]["grad_bytes"], self.PER_GPU)
        self.assertGreater(no_sync["total_bytes"], reduced["total_bytes"])
        # bf16:fp32: the kept grads are bf16, 1,988,864 B.
        mp = run_json(*args, "--fsdp-no-sync", "--fsdp-mp", "bf16:fp32")
        self.assertEqual(mp["training"]["grad_bytes"], self.PER_GPU + 1988864)
        # Under CPU offload no_sync() accumulates (on the GPU); outside it stays refused.
        off = run_json(*args, "--fsdp-no-sync", "--fsdp-cpu-offload")
        self.assertEqual(off["training"]["fsdp_offload_host_bytes"], 4 * self.PER_GPU)
        self.assertEqual(off["training"]["grad_bytes"], 3977728)
        for extra in (["--shard", "fsdp"], ["--shard", "fsdp2", "--grad-accum", "2"]):
            err = run(*self.BASE, "--gpus", "3", "--fsdp-no-sync", *extra, check_rc=2).stderr
            self.assertIn("--fsdp-no-sync is FSDP1's no_sync() over gradient accumulation: it needs --shard fsdp and "
                          "--grad-accum N with N >= 2", err)

    def test_fsdp2_qlora_torchao_nf4_by_hand(self):
        """torchtune's distributed QLoRA (--recipe torchtune --lora-rank 8 --frozen-dtype nf4 --gpus 2: fully_shard
        over torchao's NF4Tensor) on a tiny Llama config: hidden 256, 4 heads of 64 (2 KV heads), MLP 512, 2 layers,
        vocab 1000, untied. Per layer the NF4 weights (n values: data n/2 B uint8, scalers n/64 B int8, a bf16
        factor per 16,384 values, all three split over the 2 ranks; scaler_mean and the 16-entry table, 34 B, whole):
        q, o 65,536 values: 32,768 + 1,024 + 8 = 33,800 B; k, v 32,768: 16,900 B; gate, up, down 131,072: 67,600 B;
        304,200 B, 152,100 a rank + 7 x 34 = 152,338 B; 2 layers 304,676 B. Adapters (r 8 on q, v, o, gate, up,
        down, bf16): q 8 x (256 + 256) = 4,096, v 8 x (256 + 128) = 3,072, o 4,096, gate, up, down 8 x 768 = 6,144
        each: 29,696 a layer, 59,392 in all; each dim 0 even, so half a rank: 59,392 B of bf16 grads, AdamW 2 x.
        Parameters a rank: NF4 304,676 + adapters 59,392 + norms 2 x 2 x 128 x 2 = 1,024 + embed_tokens and lm_head
        2 x 500 x 256 x 2 = 512,000 + the final norm 256 = 877,348 B."""
        with open(os.path.join(SRC, "tests", "models", "hf_configs", "Llama-3.2-1B.json")) as f:
            config = json.load(f)
        config.update(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=64, vocab_size=1000, max_position_embeddings=128,
                      tie_word_embeddings=False)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tiny.json")
            with open(path, "w") as f:
                json.dump(config, f)
            args = ["estimate", path, "--graph", "train", "--batch", "1", "--dim", "seq=16", "--mode", "train",
                    "--recipe", "torchtune", "--lora-rank", "8", "--frozen-dtype", "nf4"]
            out = run_json(*args, "--gpus", "2")
            jsonschema.validate(out, schema("estimate"))
            t = out["training"]
            self.assertEqual(t["frozen_stored_bytes"], 304676)
            self.assertEqual(t["param_bytes"], 877348)
            self.assertEqual(t["grad_bytes"], 59392)
            self.assertEqual(t["optimizer_state_bytes"], 2 * 59392)
            self.assertTrue(any("FSDP2 (fully_shard)" in n for n in out["notes"]), out["notes"])
            # 4 ranks cannot split k_proj's 2 blocks of 16,384 values (torchao's nf4_split asserts).
            self.assertIn("k_proj", run(*args, "--gpus", "4", check_rc=2).stderr)
            self.assertIn("nf4_split", run(*args, "--gpus", "4", check_rc=2).stderr)
        self.assertIn("--shard fsdp2 with --frozen-dtype nf4 is distributed QLoRA (torchtune's torchao NF4Tensor, or "
                      "accelerate's bitsandbytes Params4bit, under fully_shard): give --lora-rank R",
                      run(*self.BASE, "--gpus", "2", "--shard", "fsdp2", "--frozen-dtype", "nf4", "--frozen", "mlp",
                          check_rc=2).stderr)

    def test_errors(self):
        cases = [
            (["--gpus", "2", "--shard", "fsdp2", "--precision", "amp-bf16"],
             "--shard fsdp2 with --precision amp-bf16 and no --fsdp2-mp: not modelled: FSDP2's mixed precision is its "
             "MixedPrecisionPolicy; under autocast give a policy in autocast's type (--fsdp2-mp bf16:bf16)"),
            (["--gpus", "2", "--shard", "ddp", "--fsdp2-mp", "bf16:fp32"], "--fsdp2-mp is fully_shard's "
             "MixedPrecisionPolicy (--shard fsdp2) or FSDP1's MixedPrecision (--shard fsdp): it needs one of them"),
            (["--gpus", "2", "--shard", "fsdp2", "--fsdp2-mp", "bf16:fp32", "--precision", "amp-fp16"],
             "--fsdp2-mp bf16:fp32 with --precision amp-fp16: not modelled: the policy's param_dtype is not autocast's"),
            (["--gpus", "2", "--shard", "fsdp", "--fsdp-mp", "bf16:bf16", "--precision", "amp-bf16", "--torch", "1.13"],
             "--fsdp2-mp with --torch 1.13: FSDP's MixedPrecision is modelled from PyTorch 2's"),
            (["--gpus", "2", "--shard", "fsdp", "--fsdp-mp", "bf16:fp32", "--torch", "1.13"],
             "--fsdp2-mp with --torch 1.13: FSDP's MixedPrecision is modelled from PyTorch 2's"),
            (["--gpus", "2", "--shard", "fsdp2", "--fsdp2-mp", "bf16:fp32", "--precision", "bf16"],
             "--precision fp16/bf16 with --fsdp2-mp bf16:fp32/bf16:bf16/fp16:fp32/fp16:fp16: --fsdp2-mp casts"),
            (["--gpus", "2", "--shard", "fsdp2", "--fsdp2-mp", "fp32:bf16"], "--fsdp2-mp fp32:bf16: expected one of"),
            (["--shard", "fsdp"], "--shard fsdp needs --gpus N with N >= 2"),
            (["--gpus", "2", "--shard", "fsdp", "--fsdp-wrap", r"(decoder)\."],
             r"--fsdp-wrap '(decoder)\.' matches no parameter of model 'tests/models/llama_tiny_train.onnx'"),
            (["--gpus", "2", "--shard", "fsdp", "--fsdp-wrap", "layers"], "has no capture group"),
            (["--gpus", "2", "--shard", "zero3", "--fsdp-wrap", "(layers)"], "--fsdp-wrap applies to --shard fsdp"),
        ]
        for extra, message in cases:
            self.assertIn(message, run(*self.BASE, *extra, check_rc=2).stderr, extra)


class PipelineTest(unittest.TestCase):
    """--pp on the tiny Llama (4 decoder layers): stages of layers.0-1 (with the embedding) and layers.2-3 (with the
    final norm, the head and the loss)."""
    BASE = ["estimate", "tests/models/llama_tiny_train.onnx", "--batch", "2", "--dim", "seq=64", "--mode", "train",
            "--runtime", "ideal"]

    def test_stages_and_the_busiest_gpu(self):
        out = run_json(*self.BASE, "--pp", "2")
        jsonschema.validate(out, schema("estimate"))
        p = out["training"]["pipeline"]
        self.assertEqual([(s["first_unit"], s["last_unit"], s["in_flight_micro_batches"]) for s in p["stages"]],
                         [("layers.0", "layers.1", 2), ("layers.2", "layers.3", 1)])
        busiest = max(range(2), key=lambda i: p["stages"][i]["peak_bytes"])
        self.assertEqual(p["busiest_stage"], busiest)
        self.assertEqual(out["training"]["param_bytes"], p["stages"][busiest]["param_bytes"])
        # Per layer 184,576 fp32 parameters; stage 0 also holds embed_tokens (128,000), stage 1 norm + lm_head.
        self.assertEqual(p["stages"][0]["param_bytes"], (2 * 184576 + 128000) * 4)
        self.assertEqual(p["stages"][1]["param_bytes"], (2 * 184576 + 128 + 128000) * 4)
        # One micro-batch: stage 0 holds one micro-batch's activations, not two.
        one = run_json(*self.BASE, "--pp", "2", "--micro-batches", "1")["training"]["pipeline"]["stages"][0]
        self.assertEqual(one["in_flight_micro_batches"], 1)
        self.assertEqual(p["stages"][0]["peak_bytes"] - one["peak_bytes"], p["stages"][0]["saved_bytes_per_micro_batch"])
        text = run(*self.BASE, "--pp", "2", check_rc=0).stdout
        self.assertIn("pipeline stage 1 (GPU 1) lower bound", text)

    def test_each_stage_says_what_its_gpu_needs(self):
        # required_bytes of a stage: the least device memory its program runs in on the runtime's allocator. No
        # allocator runs a program in less than its live peak plus resident bytes (peak_bytes). The estimate is the
        # busiest stage's program (its lower bound plus resident bytes is that stage's peak_bytes), the busiest is
        # the stage that needs most, and the top-level required_bytes is what that program needs.
        for runtime in ("pytorch", "ideal"):
            base = [a if a != "ideal" else runtime for a in self.BASE]
            out = run_json(*base, "--pp", "2")
            jsonschema.validate(out, schema("estimate"))
            p = out["training"]["pipeline"]
            stages = p["stages"]
            busy = stages[p["busiest_stage"]]
            for s in stages:
                self.assertGreaterEqual(s["required_bytes"], s["peak_bytes"], (runtime, s["stage"]))
                self.assertLessEqual(s["required_bytes"], busy["required_bytes"], (runtime, s["stage"]))
            self.assertEqual(busy["peak_bytes"], out["lower_bound_bytes"] + out["resident_bytes"], runtime)
            self.assertEqual(busy["required_bytes"], out["required_bytes"], runtime)
            if runtime == "pytorch":
                # The caching allocator's rounding and cached blocks: the field is not the lower bound again.
                self.assertGreater(busy["required_bytes"], busy["peak_bytes"])

    def test_errors(self):
        cases = [
            (["--pp", "5"], "--pp 5 needs at least 5 blocks (wrapping units) in model 'tests/models/llama_tiny_train.onnx', which has 4"),
            (["--pp", "2", "--gpus", "2", "--shard", "fsdp"], "--shard fsdp with --pp: not modelled"),
            (["--micro-batches", "2"], "--micro-batches applies to --pp N with N >= 2"),
            (["--pp", "2", "--checkpoint", "sqrt"], "--checkpoint with --pp: not modelled yet"),
        ]
        for extra, message in cases:
            self.assertIn(message, run(*self.BASE, *extra, check_rc=2).stderr, extra)


class LoraWhatIfTest(unittest.TestCase):
    """--lora-rank / --lora-targets on the plain tiny Llama (tests/models/llama.py, CONFIGS["llama_tiny"]:
    hidden 128, 4 layers, 4 heads of 32, 2 kv heads, so q_proj is 128 -> 128 and v_proj 128 -> 64)."""
    BASE = ["estimate", "tests/models/llama_tiny_train.onnx", "--batch", "2", "--dim", "seq=64", "--mode", "train",
            "--runtime", "ideal"]
    LORA = ["--lora-rank", "8", "--lora-targets", "q_proj|v_proj"]
    # Per layer: q (A 8x128, B 128x8) + v (A 8x128, B 64x8) = 2048 + 1536; 4 layers.
    ADAPTER_PARAMS = 4 * ((128 * 8 + 8 * 128) + (128 * 8 + 8 * 64))  # 14,336

    def test_adapter_parameters_grads_and_states_by_hand(self):
        out = run_json(*self.BASE, *self.LORA)
        jsonschema.validate(out, schema("estimate"))
        t = out["training"]
        self.assertEqual(self.ADAPTER_PARAMS, 14336)
        self.assertEqual(t["lora"], {"adapted_layers": 4 * 2, "adapter_parameters": self.ADAPTER_PARAMS})
        self.assertEqual(t["param_bytes"], 4 * self.ADAPTER_PARAMS)  # the trainable parameters: adapters only
        self.assertEqual(t["grad_bytes"], 4 * self.ADAPTER_PARAMS)  # float32 grads of the adapters only
        self.assertEqual(t["optimizer_state_bytes"], 2 * 4 * self.ADAPTER_PARAMS)  # AdamW exp_avg, exp_avg_sq

    def test_real_size_adapter_count_by_hand(self):
        # Llama-3.1-8B (config.json: hidden 4096, 32 layers, 8 kv heads of 128, so v_proj is 4096 -> 1024),
        # r=16 on q_proj and v_proj: 32 x ((4096*16 + 16*4096) + (4096*16 + 16*1024)) = 6,815,744 adapter
        # parameters, float32 on the bf16 base (PEFT's autocast_adapter_dtype).
        t = run_json("estimate", "tests/models/llama3_1_8b_train.onnx", "--batch", "1", "--dim", "seq=256",
                     "--mode", "train", "--precision", "bf16", "--lora-rank", "16", "--lora-targets", "q_proj|v_proj")
        adapters = 32 * ((4096 * 16 + 16 * 4096) + (4096 * 16 + 16 * 1024))
        self.assertEqual(adapters, 6815744)
        self.assertEqual(t["training"]["grad_bytes"], 4 * adapters)
        self.assertEqual(t["training"]["optimizer_state_bytes"], 2 * 4 * adapters)

    def test_agrees_with_the_peft_export(self):
        # The zoo's PEFT-style export of the same model (export_llama.py, LoraConfig r=8 on q_proj, v_proj)
        # estimated with --trainable lora_: the same parameters, grads and states, and the same program
        # up to the names, so the same peak.
        what_if = run_json(*self.BASE, *self.LORA)
        peft = run_json("estimate", "tests/models/llama_tiny_lora_train.onnx", *self.BASE[2:], "--trainable", "lora_")
        for key in ["param_bytes", "grad_bytes", "optimizer_state_bytes"]:
            self.assertEqual(what_if["training"][key], peft["training"][key], key)
        for key in ["total_bytes", "lower_bound_bytes", "resident_bytes"]:
            self.assertEqual(what_if[key], peft[key], key)

    def test_deepspeed_zero3_agrees_with_the_peft_export(self):
        # Under ZeRO-3 every module's hooks fetch and release its own parameters: PEFT's lora.Linear holds the base
        # Linear as `base_layer` beside lora_A and lora_B, which the export's names show (q_proj.base_layer.weight,
        # /layers.0/self_attn/q_proj/base_layer/MatMul). The what-if names its nodes so and fetches the base weight as
        # base_layer's: the same gathers, releases and prefetches, so the same figures, with and without prefetch, and
        # with each decoder layer checkpointed (its frozen base weights and frozen head: deepspeed3_checkpoint_test).
        for config, extra in (("hf_zero3_auto.json", []), ("hf_zero3_auto_no_prefetch.json", []),
                              ("hf_zero3_auto.json", ["--checkpoint", "layers"])):
            ds = ["--deepspeed", f"bench/deepspeed/{config}", "--gpus", "2", "--precision", "fp32", *extra]
            what_if = run_json(*self.BASE, *self.LORA, *ds)
            peft = run_json("estimate", "tests/models/llama_tiny_lora_train.onnx", *self.BASE[2:], "--trainable",
                            "lora_", *ds)
            for key in ["total_bytes", "lower_bound_bytes", "resident_bytes"]:
                self.assertEqual(what_if[key], peft[key], (config, key))
            for key in ["param_bytes", "grad_bytes", "optimizer_state_bytes"]:
                self.assertEqual(what_if["training"][key], peft["training"][key], (config, key))

    def test_deepspeed_half_config_and_the_adapters_type(self):
        # bf16 under DeepSpeed. Stage 2: the engine casts every parameter to bf16 (_cast_module_mixed_precision), PEFT's
        # float32 adapters too: without --lora-dtype the answer is --lora-dtype base's; given float32, refused.
        # Stage 3: the model is built under zero.Init, which that cast skips (DeepSpeed >= 0.19.2), so the adapters
        # stay float32: 14,336 elements, 7,168 a GPU on 2, gradient partitions 7,168 x 4 = 28,672 bytes, and the
        # partitions are the float32 sub-group (no copy): Adam's two states 2 x 28,672 = 57,344.
        def ds(stage):
            d = tempfile.mkdtemp(prefix="memplan_ds_lora_")
            self.addCleanup(shutil.rmtree, d)
            path = os.path.join(d, "ds.json")
            with open(path, "w") as f:
                f.write('{"bf16": {"enabled": "auto"}, "zero_optimization": {"stage": %d, '
                        '"stage3_prefetch_bucket_size": 0}}' % stage)
            return ["--deepspeed", path, "--gpus", "2", "--precision", "bf16"]
        plain = run_json(*self.BASE, *self.LORA, *ds(2))
        base = run_json(*self.BASE, *self.LORA, *ds(2), "--lora-dtype", "base")
        self.assertEqual(plain["total_bytes"], base["total_bytes"])
        self.assertIn("the adapters in the base's half type", " ".join(plain["notes"]))
        p = run(*self.BASE, *self.LORA, *ds(2), "--lora-dtype", "float32", check_rc=2)
        self.assertIn("DeepSpeed at stage 2 casts every parameter to bf16, PEFT's float32 adapters too: --lora-dtype "
                      "float32 contradicts it", p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        t = run_json(*self.BASE, *self.LORA, *ds(3))["training"]
        self.assertEqual((t["grad_bytes"], t["optimizer_state_bytes"]), (28672, 57344))

    def test_autocast_agrees_with_the_peft_export(self):
        # Under amp-bf16 q_proj's and v_proj's input (the RMSNorm's float32 output) is float32 already, so
        # PEFT's _cast_input_dtype returns it (the fp32-traced PEFT export has no Cast there): the what-if's
        # Cast must cost nothing, and the autocast copies of inputs and adapter weights match the export's.
        what_if = run_json(*self.BASE, *self.LORA, "--precision", "amp-bf16")
        peft = run_json("estimate", "tests/models/llama_tiny_lora_train.onnx", *self.BASE[2:], "--trainable", "lora_",
                        "--precision", "amp-bf16")
        for key in ["total_bytes", "lower_bound_bytes", "resident_bytes"]:
            self.assertEqual(what_if[key], peft[key], key)

    def test_half_base_keeps_float32_adapters_and_copies_the_input(self):
        # --precision bf16: base weights bf16, adapters float32 (PEFT's autocast_adapter_dtype), so the
        # adapters, their grads and AdamW states take 4 bytes per element, not bf16's 2.
        t = run_json(*self.BASE, *self.LORA, "--precision", "bf16")["training"]
        self.assertEqual(t["param_bytes"], 4 * self.ADAPTER_PARAMS)
        self.assertEqual(t["grad_bytes"], 4 * self.ADAPTER_PARAMS)
        self.assertEqual(t["optimizer_state_bytes"], 2 * 4 * self.ADAPTER_PARAMS)

    def test_base_dtype_adapters_agree_with_the_bf16_peft_export(self):
        # --lora-dtype base (autocast_adapter_dtype=False): the adapters are bf16 like the base, no copies, so the
        # what-if is the PEFT export run in bf16 with --trainable lora_, and its adapter bytes are bf16's 2 each.
        what_if = run_json(*self.BASE, *self.LORA, "--precision", "bf16", "--lora-dtype", "base")
        peft = run_json("estimate", "tests/models/llama_tiny_lora_train.onnx", *self.BASE[2:], "--trainable", "lora_",
                        "--precision", "bf16")
        for key in ["total_bytes", "lower_bound_bytes", "resident_bytes"]:
            self.assertEqual(what_if[key], peft[key], key)
        self.assertEqual(what_if["training"]["param_bytes"], 2 * self.ADAPTER_PARAMS)
        lora_note = [n for n in what_if["notes"] if n.startswith("LoRA (--lora-rank")]
        self.assertEqual(len(lora_note), 1)
        self.assertNotIn("float32 adapters", lora_note[0])  # no copies to describe: the adapters are bf16
        float32 = run_json(*self.BASE, *self.LORA, "--precision", "bf16")
        self.assertIn("float32 adapters copy each adapted layer's input",
                      [n for n in float32["notes"] if n.startswith("LoRA (--lora-rank")][0])

    def test_dropout_copies_the_adapter_input(self):
        plain = run_json(*self.BASE, *self.LORA)
        dropped = run_json(*self.BASE, *self.LORA, "--lora-dropout", "0.1")
        zero = run_json(*self.BASE, *self.LORA, "--lora-dropout", "0")
        self.assertEqual(zero["total_bytes"], plain["total_bytes"])  # p = 0 is nn.Identity
        # Each of the 8 adapted layers' inputs ([2, 64, 128] = 16,384 elements) gets a 1-byte mask and a
        # float32 dropout output that lora_A saves: the live bytes at the peak grow by at least the masks
        # and at most masks + outputs.
        grown = dropped["lower_bound_bytes"] - plain["lower_bound_bytes"]
        self.assertGreaterEqual(grown, 8 * 16384 * 1)
        self.assertLessEqual(grown, 8 * 16384 * (1 + 4))

    def test_errors(self):
        cases = [
            (["--lora-rank", "8", "--lora-targets", "nothing_here"],
             "--lora-targets 'nothing_here' matches the weight of no MatMul/Gemm layer of model "
             "'tests/models/llama_tiny_train.onnx'"),
            (["--lora-rank", "8"], "--lora-rank needs --lora-targets REGEX"),
            (["--lora-targets", "q_proj"], "--lora-targets, --lora-dropout and --lora-dtype need --lora-rank R"),
            (["--lora-rank", "0", "--lora-targets", "q_proj"], "--lora-targets, --lora-dropout and --lora-dtype need "
                                                               "--lora-rank R"),
            (["--lora-rank", "-4", "--lora-targets", "q_proj"], "--lora-rank -4: must be at least 0"),
            (["--lora-rank", "8", "--lora-targets", "("], "--lora-targets '(' is not a valid regular expression"),
            (["--lora-rank", "8", "--lora-targets", "q_proj", "--lora-dropout", "1"], "--lora-dropout 1: expected a number in [0, 1)"),
        ]
        for extra, message in cases:
            self.assertIn(message, run(*self.BASE, *extra, check_rc=2).stderr, extra)
        self.assertIn("--lora-rank applies to --mode train",
                      run("estimate", "tests/models/llama_tiny.onnx", "--batch", "1", "--dim", "seq=8", *self.LORA,
                          check_rc=2).stderr)


class FrameworkOptionErrorsTest(unittest.TestCase):
    """Bad input to the fine-tuning framework options (--upcast, --kbit-prep, --lora-dtype, --recipe): exit 2 and one
    message naming the options."""
    BASE = ["estimate", "tests/models/llama_tiny_train.onnx", "--batch", "2", "--dim", "seq=64", "--mode", "train"]
    LORA = ["--lora-rank", "8", "--lora-targets", "q_proj|v_proj"]

    def test_errors(self):
        cases = [
            (["--upcast", "rmsnorm,gelu"], "--upcast rmsnorm,gelu: 'gelu' is not one of rmsnorm, softmax, loss, logits"),
            ([*self.LORA, "--kbit-prep"], "--kbit-prep prepares a 4-bit base: it needs --frozen-dtype nf4"),
            ([*self.LORA, "--frozen-dtype", "nf4", "--kbit-prep", "--precision", "amp-bf16"],
             "--kbit-prep with --precision amp-bf16: the precision is the 4-bit layers' compute dtype"),
            ([*self.LORA, "--frozen-dtype", "nf4", "--kbit-prep", "--trainable", "norm"],
             "--kbit-prep freezes every base parameter (prepare_model_for_kbit_training): --trainable and --frozen "
             "are not modelled with it"),
            (["--lora-dtype", "base"], "--lora-targets, --lora-dropout and --lora-dtype need --lora-rank R"),
            ([*self.LORA, "--lora-dtype", "half"], "--lora-dtype half"),
            (["--recipe", "hf-peft", "--lora-rank", "0"],
             "--recipe hf-peft trains LoRA adapters: --lora-rank 0 leaves none"),
            (["--recipe", "hf-trainer", "--optimizer", "adam"],
             "--recipe hf-trainer --optimizer adam: not an optimizer the framework offers"),
            (["--recipe", "hf-peft-qlora", "--frozen-dtype", "int8"],
             "--recipe hf-peft-qlora quantizes the base to NF4: --frozen-dtype int8 makes it another recipe"),
            (["--recipe", "axolotl"], "--recipe axolotl: expected one of hf-trainer|hf-peft|hf-peft-qlora|torchtune"),
            (["--recipe", "torchtune", "--precision", "fp16"],
             "--recipe torchtune trains in its config's dtype, bf16 or fp32, without autocast"),
            (["--recipe", "torchtune", *self.LORA, "--lora-dtype", "float32"],
             "--recipe torchtune builds the adapters in the model's dtype and checks it"),
            (["--recipe", "torchtune", "--gpus", "2", "--shard", "zero2"],
             "--recipe torchtune --gpus 2 runs its distributed recipes, which shard with FSDP2"),
        ]
        for extra, message in cases:
            self.assertIn(message, run(*self.BASE, *extra, check_rc=2).stderr, extra)
        # --quantize-experts: bitsandbytes' NF4 over a mixture of experts' stacked parameters (axolotl's
        # quantize_moe_experts); a dense model has none, and axolotl skips k-bit preparation for it.
        moe = ["estimate", "tests/models/hf_configs/Qwen3-30B-A3B.json", "--graph", "train", "--batch", "1", "--dim",
               "seq=64", "--experts-implementation", "grouped_mm", "--lora-rank", "8"]
        self.assertIn("--quantize-experts applies to --frozen-dtype nf4",
                      run(*moe, "--lora-targets", "q_proj", "--mode", "train", "--quantize-experts",
                          check_rc=2).stderr)
        self.assertIn("--kbit-prep with --quantize-experts: axolotl skips prepare_model_for_kbit_training",
                      run(*moe, "--lora-targets", "q_proj", "--recipe", "hf-peft-qlora", "--quantize-experts",
                          check_rc=2).stderr)
        self.assertIn("--quantize-experts with --lora-targets naming the stacked experts' parameter "
                      "'layers.0.mlp.experts.gate_up_proj'",
                      run(*moe, "--lora-targets", "q_proj|experts\\.gate_up_proj", "--mode", "train",
                          "--frozen-dtype", "nf4", "--quantize-experts", check_rc=2).stderr)
        self.assertIn("--quantize-experts: model 'tests/models/llama_tiny_train.onnx' has no stacked experts' "
                      "parameters", run(*self.BASE, *self.LORA, "--frozen-dtype", "nf4", "--quantize-experts",
                                        check_rc=2).stderr)
        # --upcast logits shifts along the sequence: a classifier's [batch, classes] output has none.
        self.assertIn("--upcast logits shifts the logits along the sequence: output",
                      run("estimate", "tests/models/resnet18_train.onnx", "--batch", "2", "--mode", "train",
                          "--upcast", "logits", check_rc=2).stderr)
        self.assertIn("--recipe applies to --mode train (the default --mode is inference unless --recipe is given: "
                      "add --mode train)",
                      run("estimate", "tests/models/llama_tiny.onnx", "--batch", "1", "--dim", "seq=8", "--mode",
                          "inference", "--recipe", "hf-trainer", check_rc=2).stderr)
        # Without --mode, a --recipe means the training step; a config.json's --graph train alone stays inference,
        # as its exported graph does.
        tiny = ["estimate", "tests/models/llama_tiny_train.onnx", "--batch", "1", "--dim", "seq=8", "--json"]
        self.assertEqual(run(*tiny, "--recipe", "hf-trainer").stdout,
                         run(*tiny, "--recipe", "hf-trainer", "--mode", "train").stdout)
        config = ["estimate", "tests/models/hf_configs/Llama-3.2-1B.json", "--graph", "train", "--batch", "1",
                  "--dim", "seq=8", "--json"]
        self.assertEqual(json.loads(run(*config, "--recipe", "hf-trainer").stdout)["mode"], "train")
        self.assertEqual(json.loads(run(*config).stdout)["mode"], "inference")


class OffloadActivationsTest(unittest.TestCase):
    """--offload-activations (torchtune's OffloadActivations) on the tiny Llama (hidden 128, 4 layers, vocab 1000) at
    batch 8, seq 512, float32, --checkpoint layers."""
    BASE = ["estimate", "tests/models/llama_tiny_train.onnx", "--batch", "8", "--dim", "seq=512", "--mode", "train",
            "--checkpoint", "layers"]

    def test_host_bytes_by_hand_and_the_gpu_peak_drops(self):
        plain = run_json(*self.BASE)
        off = run_json(*self.BASE, "--offload-activations")
        self.assertNotIn("offloaded_activation_host_bytes", plain["training"])
        # What the pack hook sees, each of at least 1024 bytes, none a parameter: the embedding's indices (input_ids
        # int64 8x512: 32768); each checkpointed layer's inputs, the hidden state (8x512x128 float32: 2097152) and,
        # for layers 1-3, the rotary cos and sin (1x512x32: 65536 each) and the mask (1x1x512x512: 1048576), made
        # inside layer 0's segment; the final RMSNorm's saves: its input twice (Pow and Mul: 2 x 2097152), the
        # rsqrt's Sqrt and Div results (8x512x1: 16384 each) and the normalised x (2097152). norm.weight is a
        # parameter; the head's input is kept (NoOpManager on the output head).
        hidden, side = 8 * 512 * 128 * 4, 2 * 512 * 32 * 4 + 512 * 512 * 4
        expected = 8 * 512 * 8 + 4 * hidden + 3 * side + 3 * hidden + 2 * 8 * 512 * 4
        self.assertEqual(off["training"]["offloaded_activation_host_bytes"], expected)
        self.assertEqual(expected, 18284544)
        # The GPU holds two layers' inputs in backward instead of every earlier one: the live peak drops, by less
        # than what went to the host (the forward stash and the copies brought back stay on the GPU a while).
        self.assertLess(off["lower_bound_bytes"], plain["lower_bound_bytes"])
        self.assertGreater(off["lower_bound_bytes"], plain["lower_bound_bytes"] - expected)
        text = run(*self.BASE, "--offload-activations", check_rc=0).stdout
        self.assertIn("offloaded activations", text)
        md = run(*self.BASE, "--offload-activations", "--format", "markdown", check_rc=0).stdout
        self.assertIn("offloaded activations (pinned host memory", md)

    def test_refusals(self):
        base = self.BASE[:-2]
        self.assertIn("--offload-activations needs --checkpoint",
                      run(*base, "--offload-activations", check_rc=2).stderr)
        self.assertIn("--torch 1.13 with --offload-activations: torchtune's OffloadActivations needs PyTorch 2.6",
                      run(*self.BASE, "--offload-activations", "--torch", "1.13", check_rc=2).stderr)
        self.assertIn("--offload-activations applies to --mode train",
                      run("estimate", "tests/models/llama_tiny.onnx", "--batch", "1", "--dim", "seq=8",
                          "--offload-activations", check_rc=2).stderr)


class StoredPrecisionTest(unittest.TestCase):
    """--precision auto, which hf-trainer and hf-peft set: the model in the type its checkpoint is stored in, as
    transformers 5's from_pretrained(dtype="auto") loads it. Llama-3.2-1B's config says bfloat16; its parameters by
    hand: embedding 128,256 x 2,048 = 262,668,288 (tied head), per layer q and o 2,048^2 each, k and v 2,048 x 512
    each, gate, up and down 2,048 x 8,192 each, two norms of 2,048: 60,821,504, x 16 = 973,144,064, final norm 2,048:
    1,235,814,400 elements, 2,471,628,800 bytes in bfloat16 (4,943,257,600 in float32)."""
    BASE = ["estimate", "tests/models/hf_configs/Llama-3.2-1B.json", "--graph", "train", "--batch", "1",
            "--dim", "seq=64", "--mode", "train"]

    def test_hf_trainer_trains_the_bf16_checkpoint_in_bf16(self):
        auto = run_json(*self.BASE, "--recipe", "hf-trainer")
        self.assertEqual(auto["training"]["param_bytes"], 2 * 1235814400)
        given = run_json(*self.BASE, "--recipe", "hf-trainer", "--precision", "bf16")
        self.assertEqual(auto["training"], given["training"])
        self.assertEqual(auto["total_bytes"], given["total_bytes"])
        table = run(*self.BASE, "--recipe", "hf-trainer", check_rc=0).stdout
        self.assertIn("bf16 (auto: as stored)", table)
        # A given --precision wins; hf-peft-qlora keeps float32 (k-bit preparation's upcast).
        fp32 = run_json(*self.BASE, "--recipe", "hf-trainer", "--precision", "fp32")
        self.assertEqual(fp32["training"]["param_bytes"], 4 * 1235814400)
        # Without a recipe, --precision auto is the stored type and nothing else.
        self.assertEqual(run_json(*self.BASE, "--precision", "auto")["training"],
                         run_json(*self.BASE, "--precision", "bf16")["training"])

    def test_trainer_bf16_autocast_keeps_the_stored_type(self):
        """The Trainer's bf16=True (--precision amp-bf16) over the bf16 checkpoint: accelerate's autocast runs over the
        parameters as loaded (--param-dtype auto: bf16), so the parameters and their grads are 2 bytes an element and
        fused AdamW's two states 4 (2,471,628,800 B, 2,471,628,800 B, 4,943,257,600 B); plain PyTorch AMP
        (--param-dtype fp32) holds float32 master weights, twice each."""
        auto = run_json(*self.BASE, "--recipe", "hf-trainer", "--precision", "amp-bf16")
        self.assertEqual(auto["training"]["param_bytes"], 2 * 1235814400)
        self.assertEqual(auto["training"]["grad_bytes"], 2 * 1235814400)
        self.assertGreaterEqual(auto["training"]["optimizer_state_bytes"], 4 * 1235814400)
        given = run_json(*self.BASE, "--recipe", "hf-trainer", "--precision", "amp-bf16", "--param-dtype", "bf16")
        self.assertEqual(auto["total_bytes"], given["total_bytes"])
        master = run_json(*self.BASE, "--recipe", "hf-trainer", "--precision", "amp-bf16", "--param-dtype", "fp32")
        self.assertEqual(master["training"]["param_bytes"], 4 * 1235814400)
        self.assertEqual(master["training"]["grad_bytes"], 4 * 1235814400)
        self.assertEqual(master["training"]["optimizer_state_bytes"] - auto["training"]["optimizer_state_bytes"],
                         4 * 1235814400)
        table = run(*self.BASE, "--recipe", "hf-trainer", "--precision", "amp-bf16", check_rc=0).stdout
        self.assertIn("amp-bf16, parameters bf16 (auto: as stored)", table)

    def test_fp16_autocast_over_fp16_parameters_that_train_is_refused(self):
        """Llama-2-7b-hf is stored in float16: the Trainer's fp16=True full fine-tune has fp16 grads, which torch's
        GradScaler refuses; PEFT's float32 adapters over it are fine."""
        base = ["estimate", "tests/models/hf_configs/Llama-2-7b-hf.json", "--graph", "train", "--batch", "1",
                "--dim", "seq=64", "--mode", "train", "--precision", "amp-fp16"]
        err = run(*base, "--recipe", "hf-trainer", check_rc=2).stderr
        self.assertIn("Attempting to unscale FP16 gradients.", err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("--param-dtype bf16 applies to --precision amp-fp16/amp-bf16",
                      run(*self.BASE, "--param-dtype", "bf16", "--precision", "bf16", check_rc=2).stderr)

    def test_auto_outside_training_is_refused(self):
        err = run("estimate", "tests/models/hf_configs/Llama-3.2-1B.json", "--graph", "train", "--batch", "1",
                  "--dim", "seq=64", "--precision", "auto", check_rc=2).stderr
        self.assertIn("--precision applies to --mode train", err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)


class TorchtuneRecipeTest(unittest.TestCase):
    """--recipe torchtune (docs/recipes.md) is the flags it lists and nothing else: each of torchtune's four recipes
    estimates to the same bytes as those flags written out on the tiny Llama, and runs (no combination it makes is
    refused)."""
    BASE = ["estimate", "tests/models/llama_tiny_train.onnx", "--batch", "2", "--dim", "seq=64", "--mode", "train"]
    COMMON = ["--precision", "bf16", "--upcast", "rmsnorm", "--attention", "sdpa", "--loss", "chunked-ce:8",
              "--free-output", "--checkpoint", "layers", "--checkpoint-impl", "non-reentrant"]
    LORA = ["--lora-rank", "8", "--lora-targets", "q_proj|v_proj|o_proj|gate_proj|up_proj|down_proj",
            "--lora-dtype", "base", "--optimizer", "adamw", "--optimizer-impl", "fused"]

    def test_nf4_impl_refusals(self):
        """--nf4-impl's own checks (report/option_checks.cc): each one line naming the flags, exit 2."""
        lora = ["--lora-rank", "8", "--lora-targets", "q_proj"]
        cases = [
            (["--nf4-impl", "torchao"], "memplan: error: --nf4-impl applies to --frozen-dtype nf4\n"),
            ([*lora, "--frozen-dtype", "nf4", "--nf4-impl", "torchao", "--double-quant"],
             "memplan: error: --double-quant is bitsandbytes' compress_statistics; torchao's NF4Tensor (--nf4-impl "
             "torchao, or auto under --shard fsdp2) always quantizes its scalers: drop --double-quant\n"),
            ([*lora, "--frozen-dtype", "nf4", "--double-quant", "--gpus", "2", "--shard", "fsdp2"],
             "memplan: error: --double-quant is bitsandbytes' compress_statistics; torchao's NF4Tensor (--nf4-impl "
             "torchao, or auto under --shard fsdp2) always quantizes its scalers: drop --double-quant\n"),
        ]
        for flags, message in cases:
            self.assertEqual(run(*self.BASE, *flags, check_rc=2).stderr, message, flags)
        # bitsandbytes' Params4bit under fully_shard is modelled (its numbers by hand: Fsdp2BnbNf4.*): the note says
        # what the re-stored bytes are, and torchao's rule (auto under fsdp2) gives other ones.
        bnb = run_json(*self.BASE, *lora, "--precision", "bf16", "--frozen-dtype", "nf4", "--nf4-impl", "bitsandbytes",
                       "--gpus", "2", "--shard", "fsdp2")
        self.assertTrue(any("bitsandbytes' Params4bit (the packed values" in n for n in bnb["notes"]), bnb["notes"])
        # Under accelerate's FSDP2 policy the Params4bit's quant_storage is param_dtype (the type FSDP2 leaves uncast;
        # Fsdp2BnbNf4.PolicyLeavesThePackedWeightsUncast by hand): the same NF4 bytes as the bf16 run's, and a run.
        mp = run_json(*self.BASE, *lora, "--precision", "fp32", "--fsdp2-mp", "bf16:bf16", "--frozen-dtype", "nf4",
                      "--nf4-impl", "bitsandbytes", "--gpus", "2", "--shard", "fsdp2")
        self.assertGreater(mp["total_bytes"], 0)
        for flags, message in (
                (["--shard", "fsdp", "--nf4-impl", "bitsandbytes"],
                 "memplan: error: --fsdp2-mp bf16:bf16 with --shard fsdp and --frozen-dtype nf4: not modelled: FSDP1 "
                 "flattens bitsandbytes' quant_storage"),
                (["--shard", "fsdp2"],
                 "memplan: error: --fsdp2-mp bf16:bf16 with --frozen-dtype nf4 under --shard fsdp2 (--nf4-impl auto: "
                 "torchao's NF4Tensor): not modelled")):
            p = run(*self.BASE, *lora, "--precision", "fp32", "--fsdp2-mp", "bf16:bf16", "--frozen-dtype", "nf4",
                    "--gpus", "2", *flags, check_rc=2)
            self.assertTrue(p.stderr.startswith(message), p.stderr)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)

    def test_each_recipe_is_its_flags(self):
        cases = [
            ("full_finetune_single_device", [],
             ["--optimizer", "paged-adamw", "--optimizer-in-backward"]),
            ("full_finetune_distributed", ["--gpus", "2"],
             ["--gpus", "2", "--shard", "fsdp2", "--optimizer", "adamw", "--optimizer-impl", "fused"]),
            ("lora_finetune_single_device", ["--lora-rank", "8"], self.LORA),
            ("lora_finetune_distributed", ["--lora-rank", "8", "--gpus", "2"], [*self.LORA, "--gpus", "2", "--shard", "fsdp2"]),
        ]
        for name, given, flags in cases:
            recipe = run_json(*self.BASE, "--recipe", "torchtune", *given)
            written = run_json(*self.BASE, *self.COMMON, *flags)
            for key in ("allocated_bytes", "reserved_bytes", "resident_bytes"):
                self.assertEqual(recipe[key], written[key], f"{name}: {key}")
        # QLoRA, on one GPU or distributed (fully_shard), is torchao's NF4Tensor, which cannot hold the tiny Llama:
        # to_nf4 asserts on k_proj's 64 x 128 = 8,192 values (not whole blocks of 64 x 256); the recipe and its flags
        # say so alike. test_fsdp2_qlora_torchao_nf4_by_hand runs it on a config whose weights divide.
        for given, flags in ((["--lora-rank", "8", "--frozen-dtype", "nf4"], []),
                             (["--lora-rank", "8", "--frozen-dtype", "nf4", "--gpus", "2"], ["--gpus", "2", "--shard", "fsdp2"])):
            refused = run(*self.BASE, "--recipe", "torchtune", *given, check_rc=2).stderr
            self.assertIn("weight 'layers.0.self_attn.k_proj.weight' has 8192 values, not a multiple of 64 x 256", refused)
            self.assertEqual(refused, run(*self.BASE, *self.COMMON, *self.LORA, "--frozen-dtype", "nf4", "--nf4-impl",
                                          "torchao", *flags, check_rc=2).stderr)
        # The recipe's choices matter: plain PyTorch's defaults (fp32, eager attention, one cross-entropy, Adam
        # after backward) make another step.
        self.assertNotEqual(run_json(*self.BASE, "--recipe", "torchtune")["allocated_bytes"],
                            run_json(*self.BASE)["allocated_bytes"])


class LitgptRecipeTest(unittest.TestCase):
    """--recipe litgpt (docs/recipes.md) is the flags it lists and nothing else: finetune/lora.py on one GPU, its
    QLoRA (--quantize bnb.nf4) and its FSDP2 run estimate to the same bytes as those flags written out on the tiny
    Llama, at 64 positions (one chunk of 128) and at 300 (three: 128, 128, 44)."""
    COMMON = ["--precision", "bf16", "--upcast", "rmsnorm", "--attention", "sdpa", "--loss", "chunked-ce-tokens:128",
              "--outputs-to-default-dtype", "--lora-rank", "8", "--lora-targets", "q_proj|v_proj", "--lora-dropout",
              "0.05", "--lora-dtype", "base"]

    def test_each_run_is_its_flags(self):
        cases = [
            ("lora single device", [], ["--optimizer", "adamw"]),
            ("qlora", ["--frozen-dtype", "nf4"], ["--frozen-dtype", "nf4", "--optimizer", "paged-adamw"]),
            ("fsdp", ["--gpus", "2"], ["--optimizer", "adamw", "--gpus", "2", "--shard", "fsdp", "--checkpoint", "layers",
                                       "--checkpoint-impl", "non-reentrant",
                                       "--fsdp-wrap", r"^(.*lora_[AB].*|.*?\.[0-9]+\.)"]),
        ]
        for seq in ("64", "300"):
            base = ["estimate", "tests/models/llama_tiny_train.onnx", "--batch", "2", "--dim", f"seq={seq}", "--mode",
                    "train"]
            for name, given, flags in cases:
                recipe = run_json(*base, "--recipe", "litgpt", *given)
                written = run_json(*base, *self.COMMON, *flags)
                for key in ("allocated_bytes", "reserved_bytes", "resident_bytes"):
                    self.assertEqual(recipe[key], written[key], f"{name}, seq {seq}: {key}")
        # litgpt's loss is not torchtune's: 128-position chunks of Fabric's float32 copies, kept, make another step.
        base = ["estimate", "tests/models/llama_tiny_train.onnx", "--batch", "2", "--dim", "seq=300", "--mode", "train"]
        tt = [a if a != "chunked-ce-tokens:128" else "chunked-ce:8" for a in self.COMMON
              if a != "--outputs-to-default-dtype"]
        self.assertNotEqual(run_json(*base, "--recipe", "litgpt")["allocated_bytes"],
                            run_json(*base, *tt, "--optimizer", "adamw")["allocated_bytes"])


class LitgptFullRecipeTest(unittest.TestCase):
    """--recipe litgpt --lora-rank 0 is litgpt v0.5.13's finetune/full.py: one GPU and its FSDPStrategy run estimate
    to the same bytes as the flags docs/recipes.md lists for it, written out on the tiny Llama; what full.py cannot run
    is exit 2 and one message naming the flag."""
    BASE = ["estimate", "tests/models/llama_tiny_train.onnx", "--batch", "2", "--dim", "seq=300", "--mode", "train"]
    FULL = ["--precision", "bf16", "--upcast", "rmsnorm", "--attention", "sdpa", "--loss", "chunked-ce-rows:128",
            "--outputs-to-default-dtype", "--optimizer", "adamw"]

    def test_each_run_is_its_flags(self):
        for name, given, flags in (("one gpu", [], []),
                                   ("fsdp", ["--gpus", "4"], ["--gpus", "4", "--shard", "fsdp", "--checkpoint", "layers",
                                                              "--checkpoint-impl", "non-reentrant"])):
            recipe = run_json(*self.BASE, "--recipe", "litgpt", "--lora-rank", "0", *given)
            written = run_json(*self.BASE, *self.FULL, *flags)
            for key in ("allocated_bytes", "reserved_bytes", "resident_bytes"):
                self.assertEqual(recipe[key], written[key], f"{name}: {key}")
        # The whole head's loss is not the LoRA recipe's chunked head: another step.
        lora_loss = [a if a != "chunked-ce-rows:128" else "chunked-ce-tokens:128" for a in self.FULL]
        self.assertNotEqual(run_json(*self.BASE, *self.FULL)["allocated_bytes"],
                            run_json(*self.BASE, *lora_loss)["allocated_bytes"])

    def test_what_full_py_cannot_run_is_one_message(self):
        full = "--recipe litgpt --lora-rank 0 is finetune/full.py,"
        for given, says in (
                (["--loss", "chunked-ce-tokens:128"], full + " which computes litgpt.utils.chunked_cross_entropy("
                                                      "logits[..., :-1, :], targets[..., 1:]) on the whole head's logits"),
                (["--frozen-dtype", "nf4"], full + " whose setup() has no quantize and trains every parameter: "
                                            "--frozen-dtype nf4 is not one of its choices"),
                (["--trainable", "layers"], full + " which trains every parameter"),
                (["--gpus", "2", "--shard", "fsdp2"], full + " whose --gpus 2 shards with FSDP1"),
                (["--gpus", "2", "--precision", "amp-bf16"], full + " whose --gpus 2 runs Lightning's FSDPPrecision"),
                (["--free-output"], "--recipe litgpt keeps the logits through backward"),
                (["--optimizer-in-backward"], "--recipe litgpt: fit() steps the optimizer after backward")):
            refused = run(*self.BASE, "--recipe", "litgpt", "--lora-rank", "0", *given, check_rc=2).stderr
            self.assertIn(says, refused, given)
            self.assertEqual(len(refused.strip().splitlines()), 1, refused)


class FrozenDtypeTest(unittest.TestCase):
    """--frozen-dtype on the tiny Llama with LoRA on q/v: the frozen Linear weights of the 4 layers (q 128x128,
    k and v 64x128, o 128x128, gate/up 352x128, down 128x352; the lm_head writes the logits and stays float32)
    re-stored as bitsandbytes stores them (bitsandbytes/functional.py; QLoRA paper, section 3)."""
    BASE = LoraWhatIfTest.BASE + LoraWhatIfTest.LORA
    WEIGHTS = [(128, 128), (64, 128), (64, 128), (128, 128), (352, 128), (352, 128), (128, 352)] * 4  # (rows, cols)

    def resident(self, *extra):
        return run_json(*self.BASE, *extra)["resident_bytes"]

    def test_stored_bytes_by_hand(self):
        same = self.resident()
        fp32 = sum(4 * r * c for r, c in self.WEIGHTS)
        nf4 = sum(r * c // 2 + 4 * (r * c // 64) for r, c in self.WEIGHTS)  # 4 bits + a float32 absmax per 64
        blocks = [r * c // 64 for r, c in self.WEIGHTS]
        nf4_dq = sum(r * c // 2 for r, c in self.WEIGHTS) + sum(b + 4 * (-(-b // 256) + 1) for b in blocks)
        int8 = sum(r * c + 4 * r for r, c in self.WEIGHTS)  # a byte each + a float32 scale per row
        self.assertEqual(nf4, 414720)
        self.assertEqual(self.resident("--frozen-dtype", "nf4"), same - fp32 + nf4)
        out = run_json(*self.BASE, "--frozen-dtype", "nf4")
        jsonschema.validate(out, schema("estimate"))
        self.assertEqual(out["training"]["frozen_stored_bytes"], nf4)
        self.assertNotIn("frozen_stored_bytes", run_json(*self.BASE)["training"])
        self.assertEqual(self.resident("--frozen-dtype", "nf4", "--double-quant"), same - fp32 + nf4_dq)
        self.assertEqual(self.resident("--frozen-dtype", "int8"), same - fp32 + int8)
        # The double-quantized constants: 8/64 + 32/(64*256) bits per weight (QLoRA's 0.127) plus the offsets.
        self.assertLess((nf4_dq - sum(r * c // 2 for r, c in self.WEIGHTS)) * 8 / sum(r * c for r, c in self.WEIGHTS), 0.13)

    def test_gptq_and_awq_stored_bytes_by_hand(self):
        # (rows, cols) = (out, in). GPTQ as gptqmodel's BaseQuantLinear registers it, groups of 128: qweight int32
        # [in / 8, out], qzeros int32 [ceil(in / 128), out / 8], scales float16 [ceil(in / 128), out], g_idx int32
        # [in]. AWQ as AutoAWQ's WQLinear_GEMM, groups of 32: qweight int32 [in, out / 8], qzeros int32
        # [in / 32, out / 8], scales float16 [in / 32, out]. They replace the bf16 (fp16) weights, 2 bytes each.
        half = 2 * sum(r * c for r, c in self.WEIGHTS)
        gptq = sum(c // 8 * r * 4 + -(-c // 128) * (r // 8) * 4 + -(-c // 128) * r * 2 + c * 4 for r, c in self.WEIGHTS)
        awq = sum(c * (r // 8) * 4 + (c // 32) * (r // 8) * 4 + (c // 32) * r * 2 for r, c in self.WEIGHTS)
        self.assertEqual(gptq, 401280)  # bench/cpu_ground_truth/gptq_lora.json's buffer_bytes, the stand-in's buffers
        self.assertEqual(awq, 426240)
        bf16 = self.resident("--precision", "bf16")
        out = run_json(*self.BASE, "--precision", "bf16", "--frozen-dtype", "gptq-int4")
        jsonschema.validate(out, schema("estimate"))
        self.assertEqual(out["resident_bytes"], bf16 - half + gptq)
        self.assertEqual(out["training"]["frozen_stored_bytes"], gptq)
        fp16 = self.resident("--precision", "fp16")
        self.assertEqual(self.resident("--precision", "fp16", "--frozen-dtype", "awq-int4", "--frozen-group-size", "32"),
                         fp16 - half + awq)
        self.assertIn("'layers.0.mlp.down_proj.weight' (352 inputs, 128 outputs) has an input not a multiple of "
                      "--frozen-group-size 128",
                      run(*self.BASE, "--precision", "fp16", "--frozen-dtype", "awq-int4", check_rc=2).stderr)
        self.assertIn("--frozen-dtype gptq-int4 with --precision fp32",
                      run(*self.BASE, "--frozen-dtype", "gptq-int4", check_rc=2).stderr)

    def test_nf4_saves_inputs_and_frees_dequantized_weights(self):
        # At the peak (the loss backward, every forward save alive), besides the resident weights (the test
        # above), NF4 changes the non-resident live bytes (lower_bound_bytes) by exactly this:
        #  - bitsandbytes' MatMul4Bit saves its input A when it needs a grad (ctx.tensors = (A, B)), which a
        #    frozen nn.Linear does not: per layer o_proj's input (the attention output, [2, 64, 128] float32),
        #    gate/up's shared input ([2, 64, 128]) and down's ([2, 64, 352]); q/k/v's input is saved anyway by
        #    lora_A (and needs no grad in layer 0, below the first adapter).
        # The dequantized weights are transients of their own steps, none alive at the loss backward.
        same = run_json(*self.BASE)
        nf4 = run_json(*self.BASE, "--frozen-dtype", "nf4")
        saved_inputs = 4 * 4 * (2 * 64 * 128 + 2 * 64 * 128 + 2 * 64 * 352)
        self.assertEqual(nf4["peak"]["name"], same["peak"]["name"])
        self.assertEqual(nf4["lower_bound_bytes"], same["lower_bound_bytes"] + saved_inputs)
        self.assertEqual(saved_inputs, 1245184)

    def test_errors(self):
        self.assertIn("--double-quant applies to --frozen-dtype nf4",
                      run(*self.BASE, "--frozen-dtype", "int8", "--double-quant", check_rc=2).stderr)
        self.assertIn("--frozen-dtype needs frozen parameters",
                      run(*LoraWhatIfTest.BASE, "--frozen-dtype", "nf4", check_rc=2).stderr)
        self.assertIn("--frozen-dtype applies to --mode train",
                      run("estimate", "tests/models/llama_tiny.onnx", "--batch", "1", "--dim", "seq=8",
                          "--frozen-dtype", "nf4", check_rc=2).stderr)


class QuantizedWeightsTest(unittest.TestCase):
    """tests/models/quant (make_quant_models.py): the stored bytes of each quantized weight, counted by hand."""

    def test_inspect_counts_packed_weights_by_hand(self):
        # MatMulNBits K=80, N=32, 4 bits, block 32: B uint8 [32, 3, 16] = 1536 B, float16 scales [96] = 192 B,
        # packed uint8 zero points 32 * ceil(3 * 4 / 8) = 64 B.
        j = run_json("inspect", "tests/models/quant/matmulnbits_4bit_zp.onnx", "--batch", "1", "--dim", "seq=1")
        q = j["quantized_weights"]
        self.assertEqual((q["weights"], q["count"], q["bytes"], q["tensors"]), (1, 80 * 32, 1536 + 192 + 64, 3))
        self.assertEqual(list(q["by_format"]), ["MatMulNBits 4-bit block 32"])
        # Scales and zero points are not trainable parameters.
        self.assertEqual(j["parameters"]["count"], 0)
        self.assertEqual(j["buffers"]["bytes"], 1536 + 192 + 64)
        # Blocked int4: 64 * 32 / 2 = 1024 B of values, float32 scales [2, 32] = 256 B, int4 zero points 32 B.
        q = run_json("inspect", "tests/models/quant/qdq_blocked_int4.onnx", "--batch", "1")["quantized_weights"]
        self.assertEqual(q["by_format"]["DequantizeLinear int4 blocked 32"]["bytes"], 1024 + 256 + 32)
        self.assertNotIn("quantized_weights", run_json("inspect", "tests/models/resnet18.onnx", "--batch", "1"))

    def test_onnxruntime_dequantizes_matmulnbits_only_past_one_row(self):
        def workspace(batch, seq):
            return run_json("estimate", "tests/models/quant/matmulnbits_4bit_zp.onnx", "--batch", str(batch),
                            "--dim", f"seq={seq}", "--runtime", "onnxruntime")["breakdown"]["workspace"]
        self.assertEqual(workspace(1, 1), 0)             # M = 1: the fused GEMV reads the packed weight
        self.assertEqual(workspace(2, 3), 32 * 96 * 2)   # M = 6: B dequantized to float16 [N, K padded to 96]

    def test_bad_bits_exits_2_naming_the_node(self):
        p = run("estimate", "tests/models/quant/bad_matmulnbits_bits3.onnx", "--batch", "1", "--dim", "seq=1", check_rc=2)
        self.assertIn("MatMulNBits_0", p.stderr)
        self.assertIn("bits is 3; it must be 2, 4 or 8", p.stderr)


class CheckTest(unittest.TestCase):
    MODEL = ["tests/models/resnet18.onnx", "--batch", "8", "--runtime", "pytorch"]

    def setUp(self):
        self.tmp = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def test_pass_budget_fail_regression_fail_bad_baseline(self):
        e = run_json("estimate", *self.MODEL)
        total, required = e["total_bytes"], e["required_bytes"]
        base = os.path.join(self.tmp, "base.json")
        # Pass: a budget exactly at what the step needs of the device fits; the baseline is written and matches itself.
        p = run("check", *self.MODEL, "--budget", str(required), "--write-baseline", base, check_rc=0)
        self.assertIn("PASS", p.stdout)
        with open(base) as f:
            b = json.load(f)
        jsonschema.validate(b, schema("baseline"))
        self.assertEqual(b["total_bytes"], total)
        c = run_json("check", *self.MODEL, "--baseline", base)
        jsonschema.validate(c, schema("check"))
        self.assertTrue(c["passed"])
        # Budget fail: one byte less than needed, exit 1, says by how much.
        p = run("check", *self.MODEL, "--budget", str(required - 1), check_rc=1)
        self.assertIn("exceeds the budget", p.stdout)
        self.assertIn("(1 B over)", p.stdout)
        # Regression fail: a baseline 10% smaller, limit +5%.
        b["total_bytes"] = int(total / 1.10)
        smaller = os.path.join(self.tmp, "smaller.json")
        with open(smaller, "w") as f:
            json.dump(b, f)
        c = run_json("check", *self.MODEL, "--baseline", smaller, "--max-increase", "5", rc=1)
        self.assertFalse(c["passed"])
        self.assertAlmostEqual(c["limits"][0]["change_percent"], 10.0, delta=0.01)
        self.assertIn("over the limit of +5%", c["limits"][0]["message"])
        # ... but within +15%.
        run("check", *self.MODEL, "--baseline", smaller, "--max-increase", "15", check_rc=0)
        # Bad baselines: garbage, another schema, another configuration.
        bad = os.path.join(self.tmp, "bad.json")
        with open(bad, "w") as f:
            f.write("{not json")
        self.assertIn("baseline", run("check", *self.MODEL, "--baseline", bad, check_rc=2).stderr)
        with open(bad, "w") as f:
            json.dump({"schema": "something/1"}, f)
        self.assertIn("not a memplan baseline", run("check", *self.MODEL, "--baseline", bad, check_rc=2).stderr)
        p = run("check", "tests/models/resnet18.onnx", "--batch", "16", "--runtime", "pytorch", "--baseline", base, check_rc=2)
        self.assertIn("written for", p.stderr)
        run("check", *self.MODEL, "--baseline", os.path.join(self.tmp, "missing.json"), check_rc=2)

    def test_markdown_golden(self):
        out = run("check", "tests/models/gpt_tiny.onnx", "--batch", "8", "--dim", "seq=512", "--budget", "64MiB",
                  "--format", "markdown", check_rc=1).stdout
        with open(os.path.join(GOLDEN, "check_gpt_tiny.md")) as f:
            self.assertEqual(out, f.read())


class TimelineTest(unittest.TestCase):
    def test_svg_and_html_are_self_contained(self):
        with tempfile.TemporaryDirectory() as d:
            for ext in ("svg", "html"):
                out = os.path.join(d, f"t.{ext}")
                run("timeline", "tests/models/resnet18_train.onnx", "--batch", "4", "--mode", "train", "-o", out, check_rc=0)
                with open(out) as f:
                    text = f.read()
                self.assertIn("<svg", text)
                self.assertIn("peak:", text)
                self.assertNotIn("http://", text.replace("http://www.w3.org/2000/svg", ""))  # nothing fetched

    def test_never_overwrites_the_model(self):
        with tempfile.TemporaryDirectory() as d:
            model = os.path.join(d, "m.svg")
            shutil.copy(os.path.join(MODELS, "gpt_tiny.onnx"), model)
            with open(model, "rb") as f:
                before = f.read()
            p = run("timeline", model, "--batch", "1", "--dim", "seq=8", "-o", model, check_rc=2)
            self.assertIn("never overwrites", p.stderr)
            with open(model, "rb") as f:
                self.assertEqual(f.read(), before)


class GpuTest(unittest.TestCase):
    """--gpu NAME sets the GPU's architecture; the catalog's figures carry their sources."""
    # SGD: its step allocates no temporaries, so the only workspaces at the peak are cuBLAS's.
    TRAIN = ["estimate", "tests/models/gpt_tiny_train.onnx", "--batch", "2", "--dim", "seq=64", "--mode", "train",
             "--runtime", "pytorch", "--optimizer", "sgd"]
    # aten/src/ATen/cuda/CublasHandlePool.cpp: ":4096:2:16:8" below compute capability 9, ":4096:8" on 9.x.
    SM75_WORKSPACE = 4096 * 1024 * 2 + 16 * 1024 * 8   # 8,519,680
    SM90_WORKSPACE = 4096 * 1024 * 8                   # 33,554,432

    def test_catalog_matches_its_schema_and_cites_every_figure(self):
        with open(os.path.join(SRC, "report", "gpu_catalog.json")) as f:
            catalog = json.load(f)
        jsonschema.validate(catalog, schema("gpus"))
        for g in catalog["gpus"]:
            for key in ("vendor", "memory_kind", "memory_source", "compute_capability_source"):
                self.assertTrue(g.get(key), f"{g['name']}: no {key}")

    def test_gpu_sets_the_cublas_workspace(self):
        # A steady-state training step holds two cuBLAS workspaces (the forward's and the autograd thread's), so the
        # breakdown's workspace is 2 x the architecture's size: 17,039,360 B on a T4 (7.5), 67,108,864 B on an H100.
        t4 = run_json(*self.TRAIN, "--gpu", "T4")
        h100 = run_json(*self.TRAIN, "--gpu", "H100-80GB")
        self.assertEqual(t4["breakdown"]["workspace"], 2 * self.SM75_WORKSPACE)
        self.assertEqual(h100["breakdown"]["workspace"], 2 * self.SM90_WORKSPACE)
        self.assertEqual(h100["allocated_bytes"] - t4["allocated_bytes"], 2 * (self.SM90_WORKSPACE - self.SM75_WORKSPACE))
        self.assertEqual(run_json(*self.TRAIN, "--arch", "sm75")["total_bytes"], t4["total_bytes"])
        self.assertEqual(run_json(*self.TRAIN)["total_bytes"], h100["total_bytes"])  # the default is sm90

    def test_gpu_and_arch_conflict_exits_2(self):
        p = run(*self.TRAIN, "--gpu", "T4", "--arch", "sm90", check_rc=2)
        self.assertIn("--arch sm90 and --gpu T4: give one", p.stderr)
        self.assertIn("unknown GPU", run(*self.TRAIN, "--gpu", "Z80", check_rc=2).stderr)
        p = run("fit", "tests/models/resnet18.onnx", "--arch", "sm80", check_rc=2)
        self.assertIn("the catalog table uses each GPU's own architecture", p.stderr)

    def test_check_gpu_budget_is_the_cards(self):
        c = run_json("check", "tests/models/resnet18.onnx", "--gpu", "T4", "--batch", "1")
        budget = [lim for lim in c["limits"] if lim["kind"] == "budget"]
        self.assertEqual(budget[0]["limit_bytes"], 15094 * 2**20 - 1024 * 2**20)  # catalog T4 - context reserve

    def test_catalog_multiprocessors_checked_and_optional(self):
        # A --catalog GPU's multiprocessors (vLLM's Triton sampler buffer): optional, checked when given.
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "sms.json")
            for sms, rc, says in ((0, 2, "GPU X has multiprocessors 0: expected the GPU's count, 1 or more"),
                                  ("many", 2, "not a GPU catalog"), (82, 0, None)):
                with open(path, "w") as f:
                    json.dump({"schema": "memplan.gpus/2", "context_reserve_mib": 1024,
                               "gpus": [{"name": "X", "memory_mib": 24000, "compute_capability": "8.6",
                                         "multiprocessors": sms}]}, f)
                p = run("fit", "tests/models/resnet18.onnx", "--catalog", path, check_rc=rc)
                if says:
                    self.assertIn(says, p.stderr)
                    self.assertIn(path, p.stderr)
                    self.assertEqual(p.stderr.count("\n"), 1, p.stderr)

    def test_old_catalog_schema_exits_2(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "old.json")
            with open(path, "w") as f:
                json.dump({"schema": "memplan.gpus/1", "context_reserve_mib": 1024,
                           "gpus": [{"name": "X", "memory_mib": 1000}]}, f)
            p = run("fit", "tests/models/resnet18.onnx", "--catalog", path, check_rc=2)
            self.assertIn("lacks each GPU's compute capability", p.stderr)


class ServeEngineVersionTest(unittest.TestCase):
    """serve --engine vllm --engine-version 0.9.2 to 0.10.x: the custom all-reduce's buffers in the non-torch term."""
    KV = os.path.join(MODELS, "serve", "kv_tiny.onnx")
    ARGS = ["--engine", "vllm", "--memory", "1GiB", "--reserve", "0", "--context", "64", "--max-batched-tokens", "64",
            "--max-num-seqs", "64"]

    def test_the_custom_all_reduce_is_charged_from_tp_2(self):
        with open(os.path.join(SCHEMAS, "serve.vllm.schema.json")) as f:
            schema = json.load(f)
        # custom_all_reduce.py CustomAllreduce.__init__: meta_size() + max_size and max_size, max_size 8 MiB,
        # meta_size() = sizeof(vllm::Signal) = 36 x 8 x 4 + 2 x 36 x 8 x 4 = 3,456: 16,780,672 B a rank.
        for tp, charged in (("1", 0), ("2", 3456 + 2 * 8 * 2**20)):
            got = {}
            for version in ("0.10.1", "0.11"):
                j = json.loads(run("serve", self.KV, *self.ARGS, "--tp", tp, "--engine-version", version, "--json",
                                   check_rc=0).stdout)
                jsonschema.validate(j, schema)
                got[version] = j["memory"]
            self.assertEqual(got["0.10.1"]["custom_all_reduce_bytes"], charged)
            self.assertEqual(got["0.11"]["custom_all_reduce_bytes"], 0)
            self.assertEqual(got["0.10.1"]["non_torch_bytes"], charged)
            self.assertEqual(got["0.11"]["available_kv_cache_bytes"] - got["0.10.1"]["available_kv_cache_bytes"],
                             charged)

    def test_the_triton_sampler_from_0_17(self):
        # kv_tiny served in bfloat16 (d = 2): vocabulary 16 in a head 64 wide, hidden 8, 64 dummy requests.
        # The rows in d: 2 x 64 x (64 + 2 x 8) = 10,240 in every case.
        with open(os.path.join(SCHEMAS, "serve.vllm.schema.json")) as f:
            schema = json.load(f)
        def profile(version, *extra):
            j = json.loads(run("serve", self.KV, *self.ARGS, "--engine-version", version, *extra, "--json",
                               check_rc=0).stdout)
            jsonschema.validate(j, schema)
            return j["profile_run"]
        # 0.16: the sort, 26 bytes a logit over [64, 16].
        p = profile("0.16")
        self.assertEqual((p["sampler"], p["sampler_buffer_rows"]), ("sort", None))
        self.assertEqual(p["sampler_peak_bytes"], 10240 + 26 * 64 * 16)
        # 0.17.1 with --memory: the float32 logits, softmax and noise (12 bytes a logit) and the kernel's buffer at its
        # largest, next_power_of_2(64) = 64 rows of 16 float32.
        p = profile("0.17.1")
        self.assertEqual((p["sampler"], p["sampler_buffer_rows"], p["sampler_multiprocessors"]), ("triton", 64, None))
        self.assertEqual(p["sampler_peak_bytes"], 10240 + 12 * 64 * 16 + 4 * 64 * 16)
        # On a T4 (40 multiprocessors): min(next_power_of_2(min(40, 64)), 40) = 40 rows.
        args = list(self.ARGS)
        args[args.index("--memory"):args.index("--memory") + 2] = ["--gpu", "T4"]
        j = json.loads(run("serve", self.KV, *args, "--engine-version", "0.19.1", "--json", check_rc=0).stdout)
        p = j["profile_run"]
        self.assertEqual((p["sampler"], p["sampler_buffer_rows"], p["sampler_multiprocessors"]), ("triton", 40, 40))
        self.assertEqual(p["sampler_peak_bytes"], 10240 + 12 * 64 * 16 + 4 * 40 * 16)
        text = run("serve", self.KV, *args, "--engine-version", "0.19.1", check_rc=0).stdout
        self.assertIn("Triton top-k/top-p, its buffer 40 x the vocabulary", text)
        # Fewer than 8 rows keep the sort (apply_top_k_top_p's `logits.shape[0] >= 8`).
        args = list(self.ARGS)
        args[args.index("--max-num-seqs") + 1] = "4"
        j = json.loads(run("serve", self.KV, *args, "--engine-version", "0.17.1", "--json", check_rc=0).stdout)
        self.assertEqual((j["profile_run"]["requests"], j["profile_run"]["sampler"]), (4, "sort"))

    def test_versions_not_read_exit_2_with_one_message(self):
        for version, phrase in (("0.9", "give the patch (0.9.0 ran 0.8's absolute rule"),
                                ("0.5.4", "V0 engine before 0.6")):
            p = run("serve", self.KV, *self.ARGS, "--engine-version", version, check_rc=2)
            self.assertIn(f"--engine-version {version}: ", p.stderr)
            self.assertIn(phrase, p.stderr)
            self.assertIn("0.9.1 to 0.10.x (the baseline rule, NCCL after the snapshot)", p.stderr)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)


class ConfigGraphDefaultTest(unittest.TestCase):
    """A config.json without --graph: serve takes the decoder with past, a training step the training export; an
    inference estimate must still say which (prefill and decode are both inference graphs)."""
    CONFIG = "tests/models/hf_configs/Llama-3.2-1B.json"

    def test_serve_defaults_to_decode(self):
        args = ["serve", self.CONFIG, "--gpu", "H100-80GB", "--context", "4096"]
        self.assertEqual(run_json(*args), run_json(*args, "--graph", "decode"))
        p = run(*args, "--graph", "prefill", check_rc=2)  # the other graphs have no KV cache to size
        self.assertIn("has no past/present key-value inputs", p.stderr)

    def test_a_training_step_defaults_to_train(self):
        for how in (["--mode", "train"], ["--recipe", "hf-peft"]):
            args = ["estimate", self.CONFIG, "--batch", "1", "--dim", "seq=128", *how]
            self.assertEqual(run_json(*args), run_json(*args, "--graph", "train"), how)

    def test_inference_and_export_still_ask(self):
        for args in (["estimate", self.CONFIG, "--batch", "1", "--dim", "seq=128"],
                     ["export", self.CONFIG, "-o", os.path.join(tempfile.gettempdir(), "memplan-unused.onnx")]):
            p = run(*args, check_rc=2)
            self.assertEqual(p.stderr, f"memplan: error: {self.CONFIG}: a config.json is several graphs: say which "
                                       "with --graph train|decode|prefill\n")


class HelpTest(unittest.TestCase):
    def test_every_document_the_help_names_exists(self):
        import re
        texts = [run("--help", check_rc=0).stdout]
        for command in ("inspect", "estimate", "plan", "fit", "check", "timeline"):
            texts.append(run(command, "--help", check_rc=0).stdout)
        named = set(re.findall(r"(?:docs|report|bench)/[A-Za-z0-9_./-]+\.(?:md|json)", "\n".join(texts)))
        self.assertIn("docs/exit-codes.md", named)
        for path in sorted(named):
            self.assertTrue(os.path.exists(os.path.join(SRC, path)), f"--help names {path}, which does not exist")


class DeepSpeedTest(unittest.TestCase):
    """--deepspeed CONFIG.json: DeepSpeed ZeRO-1/2's own buffers from its config keys (docs/cost-models.md 3.9)."""
    BASE = ["estimate", "tests/models/llama_tiny_train.onnx", "--batch", "2", "--dim", "seq=64", "--mode", "train",
            "--gpus", "2", "--precision", "bf16", "--runtime", "ideal"]

    def config(self, text):
        d = tempfile.mkdtemp(prefix="memplan_deepspeed_")
        self.addCleanup(shutil.rmtree, d)
        path = os.path.join(d, "ds.json")
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_bad_input_exits_2_with_one_message(self):
        cases = [
            ('{"zero_optimization": {"stage": 2,', [], "not valid JSON"),
            ('{"zero_optimization": {"stage": 2}}', ["--shard", "zero1"],
             "zero_optimization.stage 2 contradicts --shard zero1"),
            ('{"zero_optimization": {"stage": 2, "reduce_bucket_size": -5}}', [],
             "zero_optimization.reduce_bucket_size must be >= 0"),
            ('{"zero_optimization": {"stage": 2}, "activation_checkpointing": {}}', [], "activation_checkpointing is not modelled"),
            ('{"fp16": {"enabled": true}, "zero_optimization": {"stage": 2}}', [], "fp16.enabled contradicts --precision bf16"),
            # bf16.check_grad_overflow is read (the step's overflow check); DeepSpeedFP16Config has no such key.
            ('{"bf16": {"check_grad_overflow": "auto"}, "zero_optimization": {"stage": 2}}', [],
             "bf16.check_grad_overflow must be true or false"),
            ('{"fp16": {"check_grad_overflow": true}, "zero_optimization": {"stage": 2}}', [],
             "fp16.check_grad_overflow is not modelled"),
        ]
        for text, extra, message in cases:
            p = run(*self.BASE, "--deepspeed", self.config(text), *extra, check_rc=2)
            self.assertIn(message, p.stderr, text)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        run(*self.BASE, "--deepspeed", self.config('{"bf16": {"check_grad_overflow": false}, "zero_optimization": '
                                                   '{"stage": 2}}'), check_rc=0)
        # "auto" needs the hidden size: resnet18 has no embedding table to read it from.
        p = run("estimate", "tests/models/resnet18_train.onnx", "--batch", "2", "--mode", "train", "--gpus", "2",
                "--deepspeed", self.config('{"zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}}'), check_rc=2)
        self.assertIn('zero_optimization.reduce_bucket_size is "auto"', p.stderr)

    def test_the_buckets_set_the_peak(self):
        # Buckets of 4e6 and 8e6 bf16 elements, two each (overlap_comm), far above the tiny Llama's grads: the peak is in
        # backward with both alive, and moves by 2 x 4e6 x 2 bytes = 16,000,000.
        def peak(bucket):
            cfg = self.config('{"zero_optimization": {"stage": 2, "overlap_comm": true, "reduce_bucket_size": %d}}' % bucket)
            return run_json(*self.BASE, "--deepspeed", cfg)["schedule"]["model_order_peak_bytes"]
        self.assertEqual(peak(8000000) - peak(4000000), 16000000)

    def test_offload_is_its_own_host_line(self):
        cfg = self.config('{"bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 2, '
                          '"offload_optimizer": {"device": "cpu", "pin_memory": true}}}')
        j = run_json(*self.BASE, "--deepspeed", cfg)
        self.assertGreater(j["training"]["deepspeed_offload_host_bytes"], 0)
        jsonschema.validate(j, schema("estimate"))
        self.assertIn("DeepSpeed offloaded optimizer", run(*self.BASE, "--deepspeed", cfg, check_rc=0).stdout)

    def test_stage3_refusals_and_sizes(self):
        # offload_param nvme without nvme_path (DeepSpeed's own assertion, Init._validate_remote_device), and
        # offload_param at stage 2: refused, one line, exit 2.
        for text, message in [
            ('{"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 0, "offload_param": {"device": "nvme"}}}',
             "zero_optimization.offload_param.nvme_path is missing"),
            ('{"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}',
             "zero_optimization.offload_param at stage 2"),
        ]:
            p = run(*self.BASE, "--deepspeed", self.config(text), check_rc=2)
            self.assertIn(message, p.stderr, text)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        # transformers' use_reentrant=False under ZeRO-3: refused (docs/cost-models.md, DeepSpeed ZeRO-3, Checkpointing).
        p = run(*self.BASE, "--deepspeed", self.config('{"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 0}}'),
                "--checkpoint", "layers", "--checkpoint-impl", "non-reentrant", check_rc=2)
        self.assertIn("stage 3 with --checkpoint-impl non-reentrant is not modelled", p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        # Without prefetch: the tiny Llama's 994,432 bf16 elements (every dimension even: 2 GPUs pad nothing) keep
        # 497,216 per GPU: partitions 994,432 bytes, plus "auto" persistence (10 x 128 = 1280 elements) keeping its 9
        # RMSNorm weights whole (9 x 128 x 2 = 2,304): 996,736; gradient partitions 994,432; the float32 partition
        # 1,988,864 and Adam's two states on it: 5,966,592.
        cfg = self.config('{"bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 3, '
                          '"stage3_prefetch_bucket_size": 0, "stage3_param_persistence_threshold": "auto"}}')
        t = run_json(*self.BASE, "--deepspeed", cfg)["training"]
        self.assertEqual(t["param_bytes"], 996736)
        self.assertEqual(t["grad_bytes"], 994432)
        self.assertEqual(t["optimizer_state_bytes"], 5966592)
        # fp16 (HF Trainer's --fp16 with a ZeRO-3 config): the same sizes in float16; the step's overflow check over
        # the gradient partitions (tests/cost_models/deepspeed3_test.cc) is modelled, not refused.
        fp16 = ["fp16" if a == "bf16" else a for a in self.BASE]
        cfg = self.config('{"fp16": {"enabled": "auto"}, "zero_optimization": {"stage": 3, '
                          '"stage3_prefetch_bucket_size": 0, "stage3_param_persistence_threshold": "auto"}}')
        t = run_json(*fp16, "--deepspeed", cfg)["training"]
        self.assertEqual((t["param_bytes"], t["grad_bytes"], t["optimizer_state_bytes"]), (996736, 994432, 5966592))
        # offload_optimizer cpu: the float32 partition (1,988,864), its float32 grad (1,988,864) and Adam's two states
        # (2 x 1,988,864) go to the host with the bf16 gradient partitions (994,432): 8,949,888 on the host line; the
        # GPU keeps the bit16 partitions and the persistent weights (996,736) and no grads or states after the step.
        cfg = self.config('{"bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 3, '
                          '"stage3_prefetch_bucket_size": 0, "stage3_param_persistence_threshold": "auto", '
                          '"offload_optimizer": {"device": "cpu", "pin_memory": true}}}')
        t = run_json(*self.BASE, "--deepspeed", cfg)["training"]
        self.assertEqual(t["deepspeed_offload_host_bytes"], 8949888)
        self.assertEqual(t["param_bytes"], 996736)
        self.assertEqual(t["grad_bytes"], 0)
        self.assertEqual(t["optimizer_state_bytes"], 0)
        # offload_param cpu as well (HF's ZeRO-3 offload config): the bf16 partitions (994,432 bytes, the persistent
        # RMSNorm weights' too) go to pinned host memory, a second host line; the GPU keeps the 9 persistent weights
        # whole (2,304); the optimizer's host line is unchanged.
        cfg = self.config('{"bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 3, '
                          '"stage3_prefetch_bucket_size": 0, "stage3_param_persistence_threshold": "auto", '
                          '"offload_optimizer": {"device": "cpu", "pin_memory": true}, '
                          '"offload_param": {"device": "cpu", "pin_memory": true}}}')
        j = run_json(*self.BASE, "--deepspeed", cfg)
        jsonschema.validate(j, schema("estimate"))
        t = j["training"]
        self.assertEqual(t["deepspeed_param_host_bytes"], 994432)
        self.assertEqual(t["deepspeed_offload_host_bytes"], 8949888)
        self.assertEqual(t["param_bytes"], 2304)
        self.assertIn("DeepSpeed offloaded parameters", run(*self.BASE, "--deepspeed", cfg, check_rc=0).stdout)

    def test_stage3_tied_head(self):
        # Qwen2.5-0.5B ties its head to the embedding (transformers' tie_weights: lm_head.weight is
        # embed_tokens.weight): one parameter two modules fetch, partitioned once. The Hub's count, 494,032,768
        # elements, every dimension even: 2 GPUs keep 247,016,384 each, 494,032,768 bytes in bf16; "auto" persistence
        # (10 x 896 = 8,960 elements) keeps whole, per layer, two RMSNorm weights (896 each) and the q, k, v biases
        # (896, 128, 128), and the final norm: 24 x 2,944 + 896 = 71,552 elements, 143,104 bytes: 494,175,872.
        # Gradient partitions 494,032,768; the float32 partition and Adam's two states 3 x 988,065,536 = 2,964,196,608.
        cfg = self.config('{"bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 3, '
                          '"stage3_prefetch_bucket_size": 0, "stage3_param_persistence_threshold": "auto"}}')
        qwen = ["estimate", "tests/models/hf_configs/Qwen2.5-0.5B.json", "--mode", "train", "--dim", "batch=1", "--dim",
                "seq=256", "--gpus", "2", "--precision", "bf16"]
        t = run_json(*qwen, "--deepspeed", cfg)["training"]
        self.assertEqual((t["param_bytes"], t["grad_bytes"], t["optimizer_state_bytes"]),
                         (494175872, 494032768, 2964196608))
        # F.linear(x, wte.weight) in the model's own forward (the zoo's GPT): the root module reads the embedding,
        # which DeepSpeed would fetch for the root's whole call: refused, naming the parameter, node and modules.
        p = run("estimate", "tests/models/gpt_tiny_train.onnx", "--mode", "train", "--dim", "batch=2", "--dim",
                "seq=64", "--gpus", "2", "--deepspeed", cfg, check_rc=2)
        self.assertIn("'wte.weight' is read by node '/Transpose' in module '(the root)', around its own module 'wte'",
                      p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)

    def test_auto_reads_the_configs_hidden_size(self):
        # Gemma-2-2B: hidden_size 2304, but q_proj is 2304 -> 8 x 256 = 2048 and no weight is square, so the graph alone
        # shows no hidden size; the config's is recorded (metadata memplan.hidden_size) and HF's "auto" reads it:
        # reduce_bucket_size 2304^2 = 5,308,416, stage3_prefetch_bucket_size int(0.9 x 5,308,416) = 4,777,574,
        # stage3_param_persistence_threshold 10 x 2304 = 23,040 (transformers integrations/deepspeed.py).
        import onnx
        cfg = self.config('{"bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", '
                          '"stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto"}}')
        gemma = ["estimate", "tests/models/hf_configs/gemma-2-2b.json", "--mode", "train", "--dim", "batch=1", "--dim",
                 "seq=128", "--gpus", "2", "--precision", "bf16", "--deepspeed", cfg]
        notes = " ".join(run_json(*gemma)["notes"])
        for text in ["stage3_param_persistence_threshold 23040 elements", "stage3_prefetch_bucket_size 4777574",
                     "one bucket of reduce_bucket_size 5308416 elements"]:
            self.assertIn(text, notes)
        # memplan export keeps it; a value that is not a positive integer is ignored with a warning, and "auto" refused.
        with tempfile.TemporaryDirectory() as d:
            good = os.path.join(d, "gemma.onnx")
            run("export", "tests/models/hf_configs/gemma-2-2b.json", "--graph", "train", "-o", good, check_rc=0)
            model = onnx.load(good, load_external_data=False)
            entry = [e for e in model.metadata_props if e.key == "memplan.hidden_size"]
            self.assertEqual([e.value for e in entry], ["2304"])
            entry[0].value = "-2304"
            bad = os.path.join(d, "bad.onnx")
            onnx.save(model, bad)
            args = ["--mode", "train", "--dim", "batch=1", "--dim", "seq=128", "--gpus", "2", "--precision", "bf16",
                    "--deepspeed", cfg]
            self.assertIn("stage3_prefetch_bucket_size 4777574", " ".join(run_json("estimate", good, *args)["notes"]))
            p = run("estimate", bad, *args, check_rc=2)
            self.assertIn('zero_optimization.reduce_bucket_size is "auto"', p.stderr)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
            inspect = run_json("inspect", bad, "--dim", "batch=1", "--dim", "seq=128")
            self.assertIn("metadata memplan.hidden_size '-2304' is not a positive integer: ignored", inspect["warnings"])

    def test_stage3_nvme_offload(self):
        # ZeRO-Infinity's config (offload_param and offload_optimizer on NVMe, DeepSpeed's default buffers) on the tiny
        # Llama, 2 GPUs, bf16: 497,216 elements a GPU, every partition at most 64,000 elements (128,000 B, under
        # MIN_AIO_BYTES 1 MiB): no parameter is swappable, so every partition is host memory.
        # Parameters' host line: the trainable partitions' pinned flat buffer 497,216 x 2 = 994,432 + the swap buffers,
        # buffer_count 5 x aligned(buffer_size 1e8 to 1024 // 2 = 512 elements: 100,000,256) x 2 B = 1,000,002,560:
        # 1,000,996,992.
        # Optimizer: one float32 sub-group of 497,216 (1,988,864 B >= 1 MiB: it swaps). Host: the bf16 gradient
        # partitions 994,432 + 4 pinned float32 buffers of aligned(497,216 to 256) = 497,408: 7,958,528; 8,952,960. NVMe: the float32 copy and Adam's 2 states, 3 x 497,408 x 4 =
        # 5,968,896; no gradient piece reaches 1 MiB, so none goes to NVMe.
        cfg = self.config('{"bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 3, '
                          '"stage3_prefetch_bucket_size": 0, "stage3_param_persistence_threshold": "auto", '
                          '"offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": true}, '
                          '"offload_param": {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": true}}, '
                          '"aio": {"block_size": 1048576, "queue_depth": 8, "single_submit": false, '
                          '"overlap_events": true}}')
        j = run_json(*self.BASE, "--deepspeed", cfg)
        jsonschema.validate(j, schema("estimate"))
        t = j["training"]
        self.assertEqual(t["deepspeed_param_host_bytes"], 1000996992)
        self.assertEqual(t["deepspeed_offload_host_bytes"], 8952960)
        self.assertEqual(t["deepspeed_nvme_bytes"], 5968896)
        # On the GPU offload_param nvme is offload_param cpu: the 9 persistent RMSNorm weights whole (2,304).
        self.assertEqual(t["param_bytes"], 2304)
        out = run(*self.BASE, "--deepspeed", cfg, check_rc=0).stdout
        self.assertIn("DeepSpeed NVMe offload", out)
        # Under offload_optimizer nvme every float32 gradient cast stays on the GPU to the step (each is under 1 MiB:
        # unswapped_gradients): 497,216 x 4 = 1,988,864 B more than under cpu at the step; the peak cannot be lower.
        cpu = json.loads(open(cfg).read())
        cpu["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
        with open(cfg, "w") as f:
            json.dump(cpu, f)
        c = run_json(*self.BASE, "--deepspeed", cfg)
        self.assertGreaterEqual(j["schedule"]["model_order_peak_bytes"], c["schedule"]["model_order_peak_bytes"])
        self.assertNotIn("deepspeed_nvme_bytes", c["training"])
        # A frozen-nothing model swaps nothing at the parameters: max_in_cpu below the 497,216 trainable elements is
        # refused (sub-groups left on NVMe are not modelled), one line, exit 2.
        cpu["zero_optimization"]["offload_param"]["max_in_cpu"] = 1000
        with open(cfg, "w") as f:
            json.dump(cpu, f)
        p = run(*self.BASE, "--deepspeed", cfg, check_rc=2)
        self.assertIn("offload_param.max_in_cpu 1000 is below the 497216 trainable", p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        # Stage 2 runs offload_optimizer nvme as cpu (stage_1_and_2.py: cpu_offload for any device but "none").
        host = [run_json(*self.BASE, "--deepspeed", self.config(
            '{"bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "%s"}}}'
            % d))["training"]["deepspeed_offload_host_bytes"] for d in ("cpu", "nvme")]
        self.assertEqual(host[0], host[1])

    def test_stage3_prefetch_defaults_and_auto(self):
        # The tiny Llama's module calls, read from its node scopes: the model, embed_tokens, per layer (4) the layer,
        # input_layernorm, self_attn, q/k/v/o_proj, post_attention_layernorm, mlp, gate/up/down_proj (12), norm and
        # lm_head: 52 in forward, and each again in backward (every one's output needs grad): 104.
        # DeepSpeed's defaults (no stage-3 key): stage3_prefetch_bucket_size 5e7 and persistence 1e5 elements keep
        # every parameter but embed_tokens and lm_head (128,000 elements each) whole; the model's own pre-forward
        # call pops the whole queue (256,000 < 5e7): one prefetch of those 2 parameters, 256,000 elements.
        defaults = run_json(*self.BASE, "--deepspeed", self.config('{"bf16": {"enabled": true}, '
                                                                  '"zero_optimization": {"stage": 3}}'))
        note = [n for n in defaults["notes"] if n.startswith("DeepSpeed ZeRO-3")]
        self.assertEqual(len(note), 1, defaults["notes"])
        self.assertIn("prefetch (stage3_prefetch_bucket_size 50000000, stage3_max_live_parameters 1000000000 elements) "
                      "over 104 module calls", note[0])
        self.assertIn("1 of them gathered 2 parameters (256000 elements) ahead of use", note[0])
        # HF Trainer's "auto": int(0.9 x 128^2) = 14,745 elements, persistence 10 x 128 = 1,280 (the 9 RMSNorm
        # weights): the prefetch now runs a bucket at a time.
        hf = run_json(*self.BASE, "--deepspeed", self.config(
            '{"bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 3, "overlap_comm": true, '
            '"reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto", '
            '"stage3_param_persistence_threshold": "auto", "stage3_max_live_parameters": 1e9, '
            '"stage3_max_reuse_distance": 1e9}}'))
        note = [n for n in hf["notes"] if n.startswith("DeepSpeed ZeRO-3")]
        self.assertEqual(len(note), 1, hf["notes"])
        self.assertIn("prefetch (stage3_prefetch_bucket_size 14745, stage3_max_live_parameters 1000000000 elements) "
                      "over 104 module calls", note[0])
        # 9 weights persist, so the other 30 parameters (994,432 - 9 x 128 = 993,280 elements) are all gathered ahead
        # (the model's own call pops embed_tokens.weight alone: 128,000 >= 14,745).
        self.assertIn("gathered 30 parameters (993280 elements) ahead of use", note[0])

    def test_stage3_with_checkpoint_layers(self):
        # HF Trainer's gradient_checkpointing: each of the tiny Llama's 4 decoder layers is recomputed in backward by
        # re-running its __call__, so its 12 module calls (the layer, 2 norms, self_attn and 4 projections, mlp and 3
        # projections) fetch again: 104 + 4 x 12 = 152 calls in the trace (test_stage3_prefetch_defaults_and_auto: 104).
        cfg = self.config('{"bf16": {"enabled": true}, "zero_optimization": {"stage": 3}}')
        j = run_json(*self.BASE, "--deepspeed", cfg, "--checkpoint", "layers")
        note = [n for n in j["notes"] if n.startswith("DeepSpeed ZeRO-3")]
        self.assertEqual(len(note), 1, j["notes"])
        self.assertIn("over 152 module calls", note[0])
        self.assertGreater(j["training"]["recompute_percent_of_forward_flops"], 0)
        # The modes that checkpoint op ranges, and torchtitan's non-reentrant selective ones, stay refused: one line.
        for mode, message in [("sqrt", "stage 3 with --checkpoint sqrt, every:K, at: or auto is not modelled"),
                              ("selective", "stage 3 with --checkpoint selective is not modelled")]:
            p = run(*self.BASE, "--deepspeed", cfg, "--checkpoint", mode, check_rc=2)
            self.assertIn(message, p.stderr)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)

    def test_stage3_prefetch_reads_torchvision_scopes(self):
        # torchvision's called Sequentials name their children relative to the enclosing non-container module
        # (/features/features.1/conv/conv.0/conv.0.0/Conv is features.1.conv.0.0). MobileNetV2's module calls: the
        # model, features, features.0 (conv, bn, ReLU6: 4), features.1 (the block, conv, conv.0 with its 3, conv.1,
        # conv.2: 8), features.2-17 (the block, conv, conv.0 and conv.1 with 3 each, conv.2, conv.3: 12 each, 192),
        # features.18 (4), classifier with Dropout and Linear (3): 213 in forward, each again in backward: 426.
        # Persistence 1e5 leaves 8 parameters partitioned: classifier.1.weight 1,280,000, features.18.0.weight
        # 409,600, features.17's 153,600 and 307,200, features.15's and 16's 153,600 twice each: 2,764,800 elements,
        # all popped by the model's own call (bucket 5e7).
        cfg = self.config('{"bf16": {"enabled": true}, "zero_optimization": {"stage": 3}}')
        out = run_json("estimate", "tests/models/mobilenet_v2_train.onnx", "--batch", "2", "--mode", "train",
                       "--gpus", "2", "--precision", "bf16", "--deepspeed", cfg)
        note = [n for n in out["notes"] if n.startswith("DeepSpeed ZeRO-3")]
        self.assertEqual(len(note), 1, out["notes"])
        self.assertIn("over 426 module calls", note[0])
        self.assertIn("1 of them gathered 8 parameters (2764800 elements) ahead of use", note[0])


class ServeSglangMlaTest(unittest.TestCase):
    """serve --engine sglang on DeepSeek-V2-Lite's published config (deepseek_v2, multi-head latent attention), which
    memplan refused before: SGLang's latent pool is 27 layers x (512 + 64) x 2 B = 31,104 B a token on every rank,
    FA3 on the H100 (pages of 1 token); TensorRT-LLM's stays refused with its reason. The pool's figures by hand are
    tests/cli/test_serve_mla_sglang.py's."""

    def test_deepseek_v2_lite_on_h100(self):
        config = os.path.join(MODELS, "hf_configs", "DeepSeek-V2-Lite.json")
        args = ("serve", config, "--graph", "decode", "--gpu", "H100-80GB")
        out = run_json(*args, "--engine", "sglang")
        jsonschema.validate(out, schema("serve.engine"))
        self.assertEqual(out["kv_cache"]["bytes_per_token"], 31104)
        self.assertEqual((out["sglang"]["mla_attention_backend"], out["sglang"]["page_size"]), ("fa3", 1))
        self.assertTrue(out["starts"])
        self.assertGreater(out["kv_cache_tokens"], 0)
        two = run_json(*args, "--engine", "sglang", "--tp", "2")
        self.assertEqual(two["kv_cache"]["bytes_per_token"], 31104)  # replicated, not split by heads
        self.assertGreater(two["kv_cache_tokens"], out["kv_cache_tokens"])
        trt = run(*args, "--engine", "trtllm", check_rc=2)
        self.assertIn("which TensorRT-LLM's PyTorch backend does not load", trt.stderr)  # no DeepseekV2ForCausalLM


class ServeFp8MoeTest(unittest.TestCase):
    """serve --engine vllm on a per-tensor fp8 Mixtral (quantization_config as AutoFP8 writes it: static activations,
    the routers and lm_head in ignored_layers): once refused ("quantized expert weights memplan does not size"), now
    sized as vLLM's Fp8MoEMethod holds it (docs/cost-models.md 3.19; by hand in test_serve_fp8_moe.py)."""

    def config(self, quantization):
        d = tempfile.mkdtemp(prefix="memplan_fp8_moe_")
        self.addCleanup(shutil.rmtree, d)
        path = os.path.join(d, "config.json")
        with open(path, "w") as f:
            json.dump({"model_type": "mixtral", "hidden_size": 256, "intermediate_size": 256, "num_hidden_layers": 2,
                       "num_attention_heads": 2, "num_key_value_heads": 2, "vocab_size": 256,
                       "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 1e6,
                       "tie_word_embeddings": False, "torch_dtype": "bfloat16", "num_local_experts": 4,
                       "num_experts_per_tok": 2, "output_router_logits": False,
                       "quantization_config": quantization}, f)
        return path

    def test_table_and_refusals(self):
        fp8 = {"quant_method": "fp8", "activation_scheme": "static",
               "ignored_layers": ["lm_head", "model.layers.0.block_sparse_moe.gate",
                                  "model.layers.1.block_sparse_moe.gate"]}
        # The catalog table: GPUs of 8.9 and up answered (Triton fused_experts), A100 "not modelled" (FP8 Marlin),
        # MI300X "not modelled" (ROCm's fnuz and AITER layouts).
        table = run_json("serve", self.config(fp8), "--graph", "decode", "--engine", "vllm", "--reserve", "0")
        jsonschema.validate(table, schema("serve.vllm"))
        rows = {r["gpu"]: r for r in table["gpus"]}
        self.assertNotIn("not_answered", rows["H100-80GB"])
        self.assertTrue(rows["H100-80GB"]["starts"])
        self.assertIn("ROCm", rows["MI300X"]["not_answered"])
        self.assertIn("FP8 Marlin", rows["A100-80GB"]["not_answered"])
        one = run_json("serve", self.config(fp8), "--graph", "decode", "--engine", "vllm", "--gpu", "L40S")
        # Two sparse layers of 4 experts of 256: 2 x 4 x 3 x 256 x 256 fp8 bytes; each layer's max_w13_scales [4],
        # w2_weight_scale [4] and its two static input scalars: 2 x (4 + 4 + 2) float32.
        self.assertEqual(one["replaced"]["fp8_per_tensor"]["expert_fp8_bytes"], 2 * 4 * 3 * 256 * 256)
        self.assertEqual(one["replaced"]["fp8_per_tensor"]["expert_scale_bytes"], 2 * 10 * 4)
        # Bad configs: one message, exit 2.
        for quantization, message in (
                ({**fp8, "activation_scheme": "per-token"}, "vLLM reads static or dynamic"),
                ({**fp8, "ignored_layers": ["model.layers.0.block_sparse_moe.experts.0.w1"]},
                 "layers left unquantized"),
                ({**fp8, "weight_block_size": [128, 128]}, "block-wise quantization only supports dynamic")):
            p = run("serve", self.config(quantization), "--graph", "decode", "--engine", "vllm", "--gpu", "H100-80GB",
                    check_rc=2)
            self.assertIn(message, p.stderr, quantization)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)



class ExpertParallelTest(unittest.TestCase):
    """--ep N: torchtitan's ExpertParallel (onnx_import/hf_moe_ep.cc) and its refusals, each naming both flags."""
    MOE = "fuzz/corpus/hf_config/tiny_qwen3_moe.json"
    TRAIN = ["--graph", "train", "--mode", "train", "--batch", "1", "--dim", "seq=64", "--runtime", "ideal"]

    def estimate(self, *extra, rc=0, experts="grouped_mm"):
        return run("estimate", self.MOE, *self.TRAIN, "--experts-implementation", experts, *extra, check_rc=rc)

    def test_estimate(self):
        # tiny_qwen3_moe: 4 experts, layers 1 and 3 sparse. Under FSDP2 on 4 GPUs each rank's persistent shard of an
        # expert parameter is one expert's rows either way: [4, ...] chunked over 4 ranks, or with --ep 2 the
        # [2, ...] slice chunked over 4 / 2 = 2 (torchtitan's efsdp), so the resident shards and states are equal;
        # what differs is the step (2 experts gathered instead of 4, the dispatch buffers, the received rows).
        one = json.loads(self.estimate("--gpus", "4", "--shard", "fsdp2", "--json").stdout)
        two = json.loads(self.estimate("--gpus", "4", "--shard", "fsdp2", "--ep", "2", "--json").stdout)
        jsonschema.validate(two, schema("estimate"))
        self.assertIn("ep 2", two["configuration"])
        self.assertEqual(one["resident_bytes"], two["resident_bytes"])
        self.assertNotEqual(one["total_bytes"], two["total_bytes"])
        worst = json.loads(self.estimate("--gpus", "4", "--shard", "fsdp2", "--ep", "2", "--moe-routing", "worst",
                                         "--json").stdout)
        # worst: all 64 tokens of each of the 2 ranks go to expert 0 (k = 1), rank 0's: more rows than balanced.
        self.assertGreater(worst["total_bytes"], two["total_bytes"])

    def test_refusals(self):
        fsdp = ["--gpus", "4", "--shard", "fsdp2"]
        cases = [
            (["--ep", "2", "--gpus", "3", "--shard", "fsdp2"], ["--ep 2", "--gpus 3"]),
            (["--ep", "2", "--gpus", "4", "--shard", "ddp"], ["--ep 2", "--shard ddp"]),
            (["--ep", "2", "--tp", "2", *fsdp], ["--ep 2", "--tp 2"]),
            (["--ep", "2", "--pp", "2", *fsdp], ["--ep 2", "--pp 2"]),
            (["--ep", "3", "--gpus", "3", "--shard", "fsdp2"], ["--ep 3", "4 experts"]),
            (["--ep", "2", "--gpus", "8", "--shard", "fsdp2"], ["--gpus 8", "--ep 2"]),
        ]
        for extra, words in cases:
            p = self.estimate(*extra, rc=2)
            for w in words:
                self.assertIn(w, p.stderr, extra)
        eager = self.estimate("--ep", "2", *fsdp, rc=2, experts="eager")
        self.assertIn("--ep 2 with --experts-implementation eager", eager.stderr)
        dense = run("estimate", "fuzz/corpus/hf_config/tiny_qwen3.json", "--graph", "train", "--mode", "train",
                    "--batch", "1", "--dim", "seq=64", "--ep", "2", *fsdp, check_rc=2)
        self.assertIn("--ep 2", dense.stderr)
        self.assertIn("no experts", dense.stderr)


class OnnxInferenceGuardsTest(unittest.TestCase):
    def test_maxunpool_indices_of_another_rank_are_refused(self):
        # ONNX 1.12's maxUnpoolShapeInference segfaulted on a scalar I beside a 4-D X (a fuzz finding, kept as a
        # regression input); the spec gives I X's shape, so memplan refuses the node before ONNX's inference.
        p = run("inspect", "fuzz/regressions/import_bytes/onnx-maxunpool11-inference-segv-rank0-indices.onnx",
                check_rc=2)
        self.assertIn("node 'MaxUnpool_0' (MaxUnpool): input 1 (I) has rank 0 but input 0 (X) has rank 4; "
                      "MaxUnpool's indices have X's shape", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
