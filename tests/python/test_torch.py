"""memplan.torch against the committed zoo: exports of the zoo's modules estimate as the committed exports do, and
measure(device="cpu") reproduces a committed CPU ground-truth measurement (bench/cpu_ground_truth).

Needs Debian's torch 1.13 and torchvision (python3-torch, python3-torchvision); skipped without them.
"""
import json
import os
import sys

import pytest

try:
    import torch
    import torchvision  # noqa: F401  (zoo.py builds the torchvision models)
except ImportError:  # each test is skipped, rather than the file (pytest exits 5 when it collects nothing)
    torch = None

import memplan  # noqa: E402
import memplan.torch  # noqa: E402

SRC = os.environ.get("MEMPLAN_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
MODELS = os.path.join(SRC, "tests", "models")
if torch is not None:
    sys.path.insert(0, MODELS)
    import zoo  # noqa: E402

pytestmark = pytest.mark.skipif(torch is None, reason="needs Debian's python3-torch and python3-torchvision")


@pytest.fixture(autouse=True)
def two_threads():
    if torch is not None:
        torch.set_num_threads(2)  # the protocol's setting, and the machine's cores


def close(a, b, rel=1e-3):
    return abs(a - b) <= rel * max(a, b)


@pytest.mark.parametrize("name,options", [
    ("resnet18", {"mode": "train", "batch": 4, "precision": "amp-bf16", "optimizer": "adamw"}),
    ("resnet18", {"batch": 4}),
    ("gpt_tiny", {"mode": "train", "batch": 4, "dims": {"seq": 128}, "optimizer": "adamw"}),
    ("gpt_tiny", {"batch": 4, "dims": {"seq": 128}}),
    # GPT-2 small (124 M parameters): about a minute to build and export on 2 cores.
    ("gpt", {"mode": "train", "batch": 2, "dims": {"seq": 128}, "precision": "amp-bf16"}),
])
def test_export_estimates_as_the_committed_export(name, options, tmp_path):
    built = zoo.build_model(name)
    train = options.get("mode") == "train"
    committed = os.path.join(MODELS, f"{name}_train.onnx" if train else f"{name}.onnx")
    expected = memplan.estimate(committed, **options)
    got = memplan.torch.estimate(built.module, built.example_inputs, **options)
    assert close(got["total_bytes"], expected["total_bytes"]), (got["total_bytes"], expected["total_bytes"])
    assert got["breakdown"]["weights"] == expected["breakdown"]["weights"]
    if name == "gpt":
        return  # export() itself is checked on the small models below: GPT-2's second export is a minute more
    # export() writes the graph without the weights' bytes; the parameters are all there.
    path = memplan.torch.export(built.module, built.example_inputs, tmp_path / f"{name}.onnx", train=train)
    assert not os.path.exists(str(path) + ".data")
    assert os.path.getsize(path) < 1 << 20
    assert memplan.estimate(path, **options)["total_bytes"] == got["total_bytes"]
    dims = options.get("dims", {})
    assert memplan.inspect(path, batch=1, dims=dims)["parameters"] == \
        memplan.inspect(committed, batch=1, dims=dims)["parameters"]


def test_estimate_defaults_to_the_example_shape():
    built = zoo.build_model("gpt_tiny")  # example inputs: batch 2, seq 16
    got = memplan.torch.estimate(built.module, built.example_inputs)
    expected = memplan.estimate(os.path.join(MODELS, "gpt_tiny.onnx"), batch=2, dims={"seq": 16})
    assert close(got["total_bytes"], expected["total_bytes"]), (got["total_bytes"], expected["total_bytes"])
    assert got["configuration"].endswith("batch=2, seq=16"), got["configuration"]


def test_export_refuses_clearly(tmp_path):
    class NotExportable(torch.nn.Module):
        def forward(self, x):
            return torch.fft.fft(x).real  # aten::fft_fft has no ONNX symbolic in torch 1.13

    path = tmp_path / "never-written.onnx"
    with pytest.raises(memplan.InputError, match="memplan.torch.export: torch.onnx.export .* cannot export "
                                                 "NotExportable: UnsupportedOperatorError: .*fft_fft"):
        memplan.torch.export(NotExportable(), (torch.ones(2, 3),), path)
    assert not path.exists()
    with pytest.raises(memplan.InputError, match="example_inputs: expected a tensor or a tuple of tensors, got str"):
        memplan.torch.export(NotExportable(), "x", path)
    with pytest.raises(memplan.InputError, match="expected a torch.nn.Module, got function"):
        memplan.torch.export(lambda x: x, (torch.ones(1),), path)


def test_measure_cpu_reproduces_the_committed_ground_truth():
    with open(os.path.join(SRC, "bench", "cpu_ground_truth", "measurements.json")) as f:
        committed = [m for m in json.load(f)["measurements"]
                     if m["model"] == "resnet18" and m["batch"] == 2 and m["optimizer"] == "momentum" and not m["checkpoint"]]
    assert len(committed) == 1
    m = committed[0]
    built = zoo.build_model("resnet18")
    inputs = zoo.make_inputs("resnet18", batch=2)
    r = memplan.torch.measure(built.module, inputs, optimizer="momentum", steps=2, device="cpu")
    for key in ("parameter_bytes", "buffer_bytes", "optimizer_state_bytes", "input_bytes", "baseline_bytes"):
        assert r["measured"][key] == m[key], key
    # Allocation events come from the same ops in the same order; allow 0.5 % for kernel choices that depend on
    # the machine (thread count, vector width).
    assert close(r["measured"]["peak_bytes"], m["peak_bytes"], 5e-3), (r["measured"]["peak_bytes"], m["peak_bytes"])
    assert r["measured"]["end_increment_bytes"] == m["parameter_bytes"]  # every allocation seen: the grads remain
    # The prediction is memplan's on the committed export with the configuration tests/accuracy uses.
    e = memplan.estimate(os.path.join(MODELS, "resnet18_train.onnx"), batch=2, mode="train", runtime="ideal",
                         optimizer="momentum", precision="fp32", loss="cross-entropy")
    live = e["resident_bytes"] + e["lower_bound_bytes"]
    assert close(r["predicted"]["peak_bytes"], live)
    want = 100.0 * (r["predicted"]["peak_bytes"] - r["measured"]["peak_bytes"]) / r["measured"]["peak_bytes"]
    assert abs(r["error_percent"]["peak_bytes"] - want) < 1e-9


def test_snapshot_reads_in_torchs_memory_viz(tmp_path):
    """torch's own reader of allocator snapshots (torch/cuda/_memory_viz.py in torch 1.13: stats() and the
    flame-graph lines of segments()) accepts the predicted snapshot."""
    from torch.cuda import _memory_viz

    snap = memplan.torch.snapshot(os.path.join(MODELS, "resnet18_train.onnx"), tmp_path / "s.pickle", batch=2,
                                  mode="train")
    stats = _memory_viz.stats(snap["segments"])  # asserts every segment's blocks sum to its total_size
    assert stats["segments"] == len(snap["segments"]) > 0
    assert stats["total_size"].value == sum(s["total_size"] for s in snap["segments"])
    lines = _memory_viz.segments(snap["segments"], format_flamegraph=lambda text: text).splitlines()
    assert any("memplan:weights" in line for line in lines), lines[:5]
