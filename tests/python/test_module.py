"""The `memplan` Python module against the `memplan` command: same dictionaries, same errors, same version.

Run by ctest (python_module) with the build tree's package on PYTHONPATH (build/python), MEMPLAN_BIN and
MEMPLAN_SOURCE_DIR set; by hand:

    PYTHONPATH=build/python MEMPLAN_BIN=build/memplan /usr/bin/python3 -m pytest -q tests/python

Expected values come from the CLI run as a separate process (its --json, its stderr, its exit code), from
Python's own UTF-8 decoder, and from the committed exports and measurements; never from the module itself.
"""
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

import memplan

SRC = os.environ.get("MEMPLAN_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BIN = os.environ.get("MEMPLAN_BIN", os.path.join(SRC, "build", "memplan"))
MODELS = os.path.join(SRC, "tests", "models")


def cli(*args):
    return subprocess.run([BIN, *args], cwd=SRC, capture_output=True, timeout=900)


def _snapshot_cases():
    spec = importlib.util.spec_from_file_location("behaviour_snapshot", os.path.join(SRC, "tests", "cli", "behaviour_snapshot.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.cases()


INT_FLAGS = {"batch", "grad_accum", "gpus", "top", "global_batch", "max", "alignment", "context", "max_batched_tokens",
             "block_size", "pp", "micro_batches", "max_num_seqs", "tp",
             "data_parallel_size"}
FLOAT_FLAGS = {"headroom", "max_increase", "weight_decay", "gpu_memory_utilization"}
BOOL_FLAGS = {"gradient_as_bucket_view", "amsgrad", "maximize"}


def to_call(args):
    """A CLI invocation as (command, model, keywords): the documented mapping (flag names in snake_case,
    --dim NAME=V into dims, --input NAME=AxB into inputs)."""
    command, model, rest = args[0], args[1], list(args[2:])
    kw = {}
    i = 0
    while i < len(rest):
        flag = rest[i]
        assert flag.startswith("--"), args
        name = flag[2:].replace("-", "_")
        i += 1
        if name == "json":
            continue
        if name in BOOL_FLAGS:
            kw[name] = True
            continue
        value = rest[i]
        i += 1
        if name == "dim":
            k, v = value.split("=")
            kw.setdefault("dims", {})[k] = int(v)
        elif name == "input":
            k, v = value.rsplit("=", 1)
            kw.setdefault("inputs", {})[k] = [int(d) for d in v.split("x")]
        elif name in INT_FLAGS:
            kw[name] = int(value)
        elif name in FLOAT_FLAGS:
            kw[name] = float(value)
        else:
            kw[name] = value
    return command, model, kw


# Every invocation the behaviour snapshot pins (tests/cli/behaviour_snapshot.py): every command on every zoo model.
CASES = _snapshot_cases()


@pytest.mark.parametrize("args", CASES, ids=[" ".join(c[:2]) + " " + " ".join(c[2:])[:60] for c in CASES])
def test_module_returns_the_cli_json(args):
    args = [args[0], os.path.join(SRC, args[1])] + list(args[2:])
    p = cli(*args)
    command, model, kw = to_call(args)
    if command == "plan":
        assert p.returncode == 0, p.stderr
    if p.returncode == 0:
        assert getattr(memplan, command)(model, **kw) == json.loads(p.stdout)
    else:
        assert p.returncode == 1, p.stderr
        with pytest.raises(memplan.LimitError) as e:
            getattr(memplan, command)(model, **kw)
        assert e.value.result == json.loads(p.stdout)


@pytest.mark.parametrize("command", ["inspect", "estimate", "plan", "fit", "check", "serve"])
def test_every_flag_is_a_keyword(command):
    """Each flag `memplan COMMAND --help` lists is a keyword of memplan.COMMAND (it gets past the keyword table to
    the value's type check), and an unknown keyword is refused."""
    help_text = cli(command, "--help").stdout.decode()
    flags = sorted({"--" + f for f in re.findall(r"^\s+(?:-\w,)?--([a-z][a-z0-9-]*)", help_text, re.M)}
                   - {"--help", "--json", "--format", "--dim", "--input", "--value"})
    assert ("--batch" in flags) == (command != "serve"), flags  # serve binds the batch itself
    for flag in flags:
        name = flag[2:].replace("-", "_")
        with pytest.raises(memplan.InputError) as e:
            getattr(memplan, command)(os.path.join(MODELS, "missing.onnx"), **{name: object()})
        assert "unknown option" not in str(e.value), flag
    with pytest.raises(memplan.InputError, match="unknown option 'bogus'"):
        getattr(memplan, command)(GPT_TINY, bogus=1)


def test_serve_refuses_the_flags_its_cli_drops():
    """memplan.serve's keywords are the CLI's: every estimate flag `memplan serve --help` leaves out (the training
    flags, --mode, --batch, --top) is an unknown keyword, as it is an unknown option on the command line."""
    def flags(command):
        text = cli(command, "--help").stdout.decode()
        return set(re.findall(r"^\s+(?:-\w,)?--([a-z][a-z0-9-]*)", text, re.M))
    dropped = sorted(flags("estimate") - flags("serve"))
    assert "pp" in dropped and "batch" in dropped, dropped
    for flag in dropped:
        name = flag.replace("-", "_")
        with pytest.raises(memplan.InputError, match=f"unknown option '{name}'"):
            memplan.serve(GPT_TINY, **{name: 1})


def test_serve_nothing_fits_is_a_limit_error():
    kv = os.path.join(MODELS, "serve", "kv_tiny.onnx")
    p = cli("serve", kv, "--engine", "eager", "--context", "10", "--memory", "2048B", "--json")
    assert p.returncode == 1, p.stderr
    with pytest.raises(memplan.LimitError, match="nothing fits: the weights alone need") as e:
        memplan.serve(kv, engine="eager", context=10, memory="2048B")
    assert e.value.result == json.loads(p.stdout)
    with pytest.raises(memplan.InputError, match="has no past/present key-value inputs"):
        memplan.serve(os.path.join(MODELS, "serve", "no_kv_tiny.onnx"), context=10)


def test_serve_vllm_that_would_not_start_is_a_limit_error():
    # vLLM's default engine: 0.9 x 1 GiB less 1 GiB of non-torch memory leaves nothing for the cache.
    kv = os.path.join(MODELS, "serve", "kv_tiny.onnx")
    p = cli("serve", kv, "--context", "64", "--memory", "1GiB", "--reserve", "1GiB", "--json")
    assert p.returncode == 1, p.stderr
    with pytest.raises(memplan.LimitError, match="vLLM would not start: No available memory") as e:
        memplan.serve(kv, context=64, memory="1GiB", reserve="1GiB")
    assert e.value.result == json.loads(p.stdout)
    assert e.value.result["schema"] == "memplan.serve.vllm/1"


def test_a_config_json_graph_defaults_as_the_cli_does():
    # serve reads a config.json's decoder with past, a training step its training export, without graph=...
    config = os.path.join(MODELS, "hf_configs", "Llama-3.2-1B.json")
    p = cli("serve", config, "--graph", "decode", "--gpu", "H100-80GB", "--context", "4096", "--json")
    assert p.returncode == 0, p.stderr
    assert memplan.serve(config, gpu="H100-80GB", context=4096) == json.loads(p.stdout)
    p = cli("estimate", config, "--graph", "train", "--mode", "train", "--batch", "1", "--dim", "seq=128", "--json")
    assert p.returncode == 0, p.stderr
    assert memplan.estimate(config, mode="train", batch=1, dims={"seq": 128}) == json.loads(p.stdout)
    with pytest.raises(memplan.InputError, match="say which with --graph"):
        memplan.estimate(config, batch=1, dims={"seq": 128})


def test_serve_other_engines_return_the_cli_json():
    # SGLang's and TensorRT-LLM's answers and --engine all's table: the CLI's JSON, key for key.
    kv = os.path.join(MODELS, "serve", "kv_tiny.onnx")
    base = ["--memory", "64MiB", "--reserve", "0", "--context", "64"]
    for engine, extra, kw in (("sglang", ["--mem-fraction-static", "0.8"], {"mem_fraction_static": 0.8}),
                              ("trtllm", ["--max-num-tokens", "64"], {"max_num_tokens": 64}),
                              ("all", [], {})):
        p = cli("serve", kv, "--engine", engine, *base, *extra, "--json")
        assert p.returncode == 0, p.stderr
        d = memplan.serve(kv, engine=engine, memory="64MiB", reserve="0", context=64, **kw)
        assert d == json.loads(p.stdout)
    p = cli("serve", kv, "--engine", "ortgenai", "--memory", "64MiB", "--context", "100", "--json")
    assert p.returncode == 0, p.stderr
    assert memplan.serve(kv, engine="ortgenai", memory="64MiB", context=100) == json.loads(p.stdout)
    with pytest.raises(memplan.LimitError, match="sglang would not start: Not enough memory"):
        memplan.serve(kv, engine="sglang", memory="4KiB", reserve="0", context=64, mem_fraction_static=0.1)
    with pytest.raises(memplan.InputError, match="--page-size applies to --engine sglang"):
        memplan.serve(kv, engine="trtllm", memory="64MiB", context=64, page_size=16)


def test_serve_vllm_usage_context_and_release_as_the_cli_says():
    # How vLLM is started (LLM(...): 8,192 tokens below 70 GiB, clamped from 0.11.1 to 256 x 16) and whether the
    # release was given: the CLI's JSON, key for key.
    kv = os.path.join(MODELS, "serve", "kv_tiny.onnx")
    for flags, kw in ((["--usage-context", "llm", "--engine-version", "0.11.2"],
                       {"usage_context": "llm", "engine_version": "0.11.2"}),
                      (["--engine-version", "0.18", "--performance-mode", "throughput"],
                       {"engine_version": "0.18", "performance_mode": "throughput"}),
                      ([], {})):
        p = cli("serve", kv, "--memory", "64MiB", "--reserve", "0", "--context", "16", *flags, "--json")
        assert p.returncode == 0, p.stderr
        d = memplan.serve(kv, memory="64MiB", reserve="0", context=16, **kw)
        assert d == json.loads(p.stdout)
        assert d["settings"]["engine_version_default"] == ("engine_version" not in kw)
    assert memplan.serve(kv, memory="64MiB", reserve="0", context=16, usage_context="llm",
                         engine_version="0.11.2")["settings"]["max_num_batched_tokens"] == 4096


def test_plan_output_writes_the_cli_file(tmp_path):
    cli("plan", GPT_TINY, "--batch", "2", "--dim", "seq=32", "-o", str(tmp_path / "cli.json"))
    d = memplan.plan(GPT_TINY, batch=2, dims={"seq": 32}, output=tmp_path / "py.json")
    assert (tmp_path / "py.json").read_bytes() == (tmp_path / "cli.json").read_bytes()
    assert d == json.loads((tmp_path / "cli.json").read_text())
    with pytest.raises(memplan.InputError, match="is the model itself"):
        memplan.plan(GPT_TINY, batch=2, dims={"seq": 32}, output=GPT_TINY)


def cli_error(*args):
    p = cli(*args)
    err = p.stderr.decode("utf-8")  # fails the test if the CLI printed invalid UTF-8
    assert p.returncode == 2, (args, p.returncode, err)
    assert err.startswith("memplan: error: "), err
    return err[len("memplan: error: "):].rstrip("\n")


GPT_TINY = os.path.join(MODELS, "gpt_tiny.onnx")


@pytest.mark.parametrize("command,model,kw,args", [
    ("estimate", GPT_TINY, {"batch": 2}, []),  # seq left unbound
    ("estimate", os.path.join(MODELS, "no_such_model.onnx"), {}, []),
    ("estimate", GPT_TINY, {"batch": 2, "dims": {"seq": 64}, "mode": "train", "checkpoint": "every:0"},
     ["--dim", "seq=64", "--mode", "train", "--checkpoint", "every:0"]),
    ("estimate", GPT_TINY, {"batch": 2, "dims": {"seq": 64}, "mode": "train", "shard": "zero3"},
     ["--dim", "seq=64", "--mode", "train", "--shard", "zero3"]),
    ("estimate", GPT_TINY, {"batch": 2, "dims": {"seq": 64}, "torch": "3"}, ["--dim", "seq=64", "--torch", "3"]),
    ("estimate", GPT_TINY, {"batch": 2, "dims": {"seq": "x"}}, ["--dim", "seq=x"]),
    ("check", GPT_TINY, {"batch": 2, "dims": {"seq": 64}, "budget": "12XB"}, ["--dim", "seq=64", "--budget", "12XB"]),
    ("fit", GPT_TINY, {"dims": {"seq": 64}, "gpu": "NoSuchGPU"}, ["--dim", "seq=64", "--gpu", "NoSuchGPU"]),
    ("inspect", GPT_TINY, {"inputs": {"nope": [1, 2]}, "batch": 1, "dims": {"seq": 8}},
     ["--input", "nope=1x2", "--dim", "seq=8"]),
])
def test_input_errors_raise_input_error_with_the_cli_message(command, model, kw, args):
    cli_args = [command, model] + (["--batch", str(kw["batch"])] if "batch" in kw else []) + args
    message = cli_error(*cli_args)
    with pytest.raises(memplan.InputError) as e:
        getattr(memplan, command)(model, **kw)
    assert str(e.value) == message
    assert isinstance(e.value, memplan.Error)


def test_python_only_misuse_is_an_input_error():
    with pytest.raises(memplan.InputError, match="batch: expected an integer, got str"):
        memplan.estimate(GPT_TINY, batch="8", dims={"seq": 8})
    # batch=-1 is the "not given" default inside, and refused as given, as `--batch -1` is.
    with pytest.raises(memplan.InputError, match=re.escape("--batch -1: must be at least 0")):
        memplan.estimate(GPT_TINY, batch=-1, dims={"seq": 8})
    with pytest.raises(memplan.InputError, match=re.escape("--mode fly: expected one of inference|train")):
        memplan.estimate(GPT_TINY, batch=1, dims={"seq": 8}, mode="fly")


def test_limits_raise_limit_error_with_the_cli_message_and_result():
    # check over budget: exit 1; the CLI's table says "FAIL  <message>".
    args = ["check", GPT_TINY, "--batch", "8", "--dim", "seq=128", "--budget", "1MiB"]
    p = cli(*args)
    assert p.returncode == 1
    fail_lines = [line.strip()[len("FAIL"):].strip() for line in p.stdout.decode().splitlines() if line.strip().startswith("FAIL")]
    assert len(fail_lines) == 1, p.stdout
    with pytest.raises(memplan.LimitError) as e:
        memplan.check(GPT_TINY, batch=8, dims={"seq": 128}, budget="1MiB")
    assert str(e.value) == fail_lines[0]
    assert e.value.result == json.loads(cli(*args, "--json").stdout)
    assert e.value.result["passed"] is False
    # fit with nothing fitting: exit 1, "nothing fits: ..."
    args = ["fit", GPT_TINY, "--dim", "seq=128", "--memory", "1KiB"]
    p = cli(*args)
    assert p.returncode == 1
    with pytest.raises(memplan.LimitError) as e:
        memplan.fit(GPT_TINY, dims={"seq": 128}, memory="1KiB")
    assert str(e.value) == p.stdout.decode().splitlines()[0]
    assert e.value.result["value"] is None
    # Within the budget: a dictionary, no exception.
    assert memplan.check(GPT_TINY, batch=1, dims={"seq": 8}, budget="80GB")["passed"] is True


def _model_with_invalid_utf8_name(path):
    """relu(relu(x)) whose second node reads a tensor named b"t\\xff\\xfe_name" that nothing produces. Python's
    protobuf refuses such strings, so the name is patched into the serialized bytes (same length)."""
    from onnx import TensorProto, helper

    marker = "MARKER_1"
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", [marker], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    data = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    bad = b"t\xff\xfe_name"
    assert len(bad) == len(marker) and data.count(marker.encode()) == 1
    with open(path, "wb") as f:
        f.write(data.replace(marker.encode(), bad))


def test_invalid_utf8_names_are_escaped_in_cli_and_python_messages(tmp_path):
    model = str(tmp_path / "bad_name.onnx")
    _model_with_invalid_utf8_name(model)
    message = cli_error("estimate", model)  # decoding as UTF-8 inside cli_error is the check
    assert "t\\xff\\xfe_name" in message, message
    with pytest.raises(memplan.InputError) as e:
        memplan.estimate(model)
    assert str(e.value) == message
    # The table and the JSON stay valid UTF-8 too where the model is fine but a name is not.
    p = cli("inspect", model)
    p.stdout.decode("utf-8"), p.stderr.decode("utf-8")


def test_same_version_string():
    out = cli("--version").stdout.decode().strip()
    assert out == f"memplan {memplan.__version__}"
    with open(os.path.join(SRC, "CMakeLists.txt")) as f:
        assert f"project(memplan VERSION {memplan.__version__}" in f.read()


def test_imports_without_torch():
    """With torch made unimportable, `import memplan` and `import memplan.torch` work and estimate runs."""
    code = (
        "import sys\n"
        "class NoTorch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch' or name.startswith('torch.'):\n"
        "            raise ImportError('torch is blocked by this test')\n"
        "sys.meta_path.insert(0, NoTorch())\n"
        "import memplan, memplan.torch\n"
        f"e = memplan.estimate({GPT_TINY!r}, batch=1, dims={{'seq': 8}})\n"
        "assert e['total_bytes'] > 0\n"
        "assert 'torch' not in sys.modules\n"
        "try:\n"
        "    memplan.torch.export(None, None, 'x.onnx')\n"
        "except ImportError as e:\n"
        "    print('refused:', e)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=os.environ)
    assert p.returncode == 0, p.stderr
    assert "refused: torch is blocked" in p.stdout


def test_snapshot_replays_to_the_estimates_peaks(tmp_path):
    """The predicted snapshot's events, replayed here, reach the estimate's max_memory_allocated and
    max_memory_reserved (from memplan.estimate, computed by the estimate's own allocator replay); its
    segments are tiled by their blocks, as torch's snapshots are."""
    import pickle

    import memplan.torch

    model = os.path.join(MODELS, "gpt_tiny_train.onnx")
    options = {"batch": 2, "dims": {"seq": 64}, "mode": "train", "precision": "amp-bf16"}
    out = tmp_path / "predicted.pickle"
    returned = memplan.torch.snapshot(model, out, **options)
    with open(out, "rb") as f:
        snap = pickle.load(f)
    assert snap == returned
    e = memplan.estimate(model, **options)
    live = peak = reserved = 0
    actions = set()
    for ev in snap["device_traces"][0]:
        actions.add(ev["action"])
        if ev["action"] == "alloc":
            live += ev["size"]
            peak = max(peak, live)
        elif ev["action"] == "free_completed":
            live -= ev["size"]
        elif ev["action"] == "segment_alloc":
            reserved += ev["size"]
        if ev["action"] != "segment_alloc":
            (frame,) = ev["frames"]
            assert frame["filename"].startswith("memplan:") and " @ " in frame["name"]
    assert actions == {"segment_alloc", "alloc", "free_requested", "free_completed"}
    assert peak == e["allocated_bytes"]
    assert reserved == e["reserved_bytes"]
    assert sum(s["total_size"] for s in snap["segments"]) == reserved
    end_live = 0
    for s in snap["segments"]:
        at = s["address"]
        for b in s["blocks"]:
            assert b["address"] == at
            at += b["size"]
            end_live += b["size"] if b["state"] == "active_allocated" else 0
        assert at == s["address"] + s["total_size"]
    assert end_live == live
    with pytest.raises(memplan.InputError, match="runtime"):
        memplan.torch.snapshot(model, tmp_path / "x.pickle", runtime="ideal", **options)


def test_values_keyword_is_the_value_flag(tmp_path):
    """values={"sr": 16000} is --value sr=16000: the same dictionary as the CLI; a bad value the same error."""
    subprocess.run([sys.executable, os.path.join(SRC, "tests", "models", "control_flow", "make_models.py"), str(tmp_path)],
                   check=True)
    vad = str(tmp_path / "vad_if.onnx")
    p = cli("estimate", vad, "--input", "x=1x512", "--value", "sr=16000", "--json")
    assert p.returncode == 0, p.stderr
    d = memplan.estimate(vad, inputs={"x": [1, 512]}, values={"sr": 16000})
    assert d == json.loads(p.stdout)
    assert d["values"] == {"sr": 16000}
    err = cli_error("estimate", vad, "--input", "x=1x512", "--value", "sr=1.5")
    with pytest.raises(memplan.InputError) as e:
        memplan.estimate(vad, inputs={"x": [1, 512]}, values={"sr": 1.5})
    assert str(e.value) == err
    with pytest.raises(memplan.InputError, match="values: expected a mapping"):
        memplan.estimate(vad, values=[1])


def test_export_config_writes_the_file_the_cli_writes(tmp_path):
    # memplan.export_config is `memplan export`: the same file, byte for byte, and what it wrote.
    config = os.path.join(MODELS, "hf_configs", "Llama-3.2-1B.json")
    from_python = str(tmp_path / "pyth.onnx")  # names of one length, so that protobuf's length prefixes agree
    from_cli = str(tmp_path / "clii.onnx")
    written = memplan.export_config(config, graph="train", output=from_python)
    p = subprocess.run([BIN, "export", config, "--graph", "train", "-o", from_cli], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    with open(from_python, "rb") as a, open(from_cli, "rb") as b:
        data = a.read()
        # The external-data location names the output file: the only bytes that may differ.
        assert data.replace(b"pyth.onnx.data", b"clii.onnx.data") == b.read()
    assert written["output"] == from_python
    assert written["bytes"] == len(data)
    assert written["nodes"] > 0 and written["initializers"] > 0
    assert f"wrote {from_cli}: {written['nodes']} nodes, {written['initializers']} initializers" in p.stderr
    with pytest.raises(memplan.InputError, match="export converts a Hugging Face config.json"):
        memplan.export_config(os.path.join(MODELS, "gpt_tiny.onnx"), graph="train", output=str(tmp_path / "x.onnx"))
