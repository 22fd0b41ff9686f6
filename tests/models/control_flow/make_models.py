"""Small ONNX models for memplan's control-flow, --value, Optional and Sequence tests, built with onnx.helper.

    /usr/bin/python3 tests/models/control_flow/make_models.py OUT_DIR

writes into OUT_DIR (the tests call it into a temporary folder; nothing is committed but this script):

vad_if.onnx: nested Ifs over a scalar int64 input `sr` (sample rate), the shape of Silero VAD's graph, where the
  whole model sits inside If branches selected by `sr`:

      If(sr == 16000)
        then: frames = Reshape(x, [1, -1, 512]) -> LSTM(hidden 64) -> Squeeze -> MatMul[64, 1]
        else: If(sr == 8000)
          then: frames = Reshape(x, [1, 1, 256]) -> LSTM(hidden 32) -> Squeeze -> MatMul[32, 1]
          else: LSTM fed Unsqueeze(x, [0, 1, 2]) (rank 5: an unsupported sample rate, which never runs)

  x is float32 [1, samples]. At samples=512 only the 16 kHz branch can be shaped (the 8 kHz Reshape needs 256
  elements, the innermost LSTM a rank-3 input); at samples=256 only the 8 kHz one (512 does not divide 256).
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def const(name, array):
    return helper.make_node("Constant", [], [name], name=name + "_const", value=numpy_helper.from_array(array, name))


def make_vad():
    rng = np.random.default_rng(0)

    def branch(name, target, frame, hidden):
        nodes = [
            const(name + "_shape", np.array(target, dtype=np.int64)),
            helper.make_node("Reshape", ["x", name + "_shape"], [name + "_frames"], name=name + "_reshape"),
            helper.make_node("LSTM", [name + "_frames", name + "_W", name + "_R"], [name + "_Y"], name=name + "_lstm",
                             hidden_size=hidden),
            helper.make_node("Squeeze", [name + "_Y", name + "_axes"], [name + "_h"], name=name + "_squeeze"),
            helper.make_node("MatMul", [name + "_h", name + "_head"], [name + "_out"], name=name + "_head_matmul"),
        ]
        inits = [
            numpy_helper.from_array(rng.standard_normal((1, 4 * hidden, frame)).astype(np.float32), name + "_W"),
            numpy_helper.from_array(rng.standard_normal((1, 4 * hidden, hidden)).astype(np.float32), name + "_R"),
            numpy_helper.from_array(np.array([0, 1], dtype=np.int64), name + "_axes"),
            numpy_helper.from_array(rng.standard_normal((hidden, 1)).astype(np.float32), name + "_head"),
        ]
        out = helper.make_tensor_value_info(name + "_out", TensorProto.FLOAT, None)
        return helper.make_graph(nodes, name, [], [out], initializer=inits)

    b16 = branch("sr16k", [1, -1, 512], 512, 64)
    b8 = branch("sr8k", [1, 1, 256], 256, 32)
    bad_nodes = [
        const("bad_axes", np.array([0, 1, 2], dtype=np.int64)),
        helper.make_node("Unsqueeze", ["x", "bad_axes"], ["bad_frames"], name="bad_unsqueeze"),
        helper.make_node("LSTM", ["bad_frames", "bad_W", "bad_R"], ["bad_Y"], name="bad_lstm", hidden_size=8),
        helper.make_node("ReduceMean", ["bad_Y"], ["bad_out"], name="bad_reduce", keepdims=0),
    ]
    bad_inits = [
        numpy_helper.from_array(np.zeros((1, 32, 512), dtype=np.float32), "bad_W"),
        numpy_helper.from_array(np.zeros((1, 32, 8), dtype=np.float32), "bad_R"),
    ]
    bad = helper.make_graph(bad_nodes, "unsupported_sr", [], [helper.make_tensor_value_info("bad_out", TensorProto.FLOAT, None)],
                            initializer=bad_inits)
    inner = helper.make_graph(
        [
            const("c8000", np.array(8000, dtype=np.int64)),
            helper.make_node("Equal", ["sr", "c8000"], ["is8k"], name="is8k"),
            helper.make_node("If", ["is8k"], ["inner_out"], name="if_8k", then_branch=b8, else_branch=bad),
        ],
        "not16k", [], [helper.make_tensor_value_info("inner_out", TensorProto.FLOAT, None)])
    graph = helper.make_graph(
        [
            const("c16000", np.array(16000, dtype=np.int64)),
            helper.make_node("Equal", ["sr", "c16000"], ["is16k"], name="is16k"),
            helper.make_node("If", ["is16k"], ["prob"], name="if_16k", then_branch=b16, else_branch=inner),
        ],
        "vad_if",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "samples"]),
         helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], producer_name="memplan-tests")
    model.ir_version = 8
    return model


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    onnx.save(make_vad(), os.path.join(out, "vad_if.onnx"))


if __name__ == "__main__":
    main()
