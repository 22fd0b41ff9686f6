#!/usr/bin/python3
"""Writes the quantized-weight test models of tests/models/quant/ (one per storage format), with onnx.helper
and numpy only (Debian's ONNX 1.12; run with /usr/bin/python3). Deterministic: fixed seeds, so the files are
byte-identical on every run. tests/cost_models/quantized_test.cc counts each model's weight bytes by hand
from the shapes below.

Formats (K = 64 or 80 inputs, N = 32 or 48 outputs, batch symbolic "batch"):
  matmulnbits_4bit_zp     com.microsoft MatMulNBits, 4 bits, block 32, K = 80 (padded to 96), uint8 zero points
  matmulnbits_4bit_nozp   com.microsoft MatMulNBits, 4 bits, block 16, K = 64, no zero points (symmetric, 8)
  qdq_blocked_int4        DequantizeLinear-21 blocked (int4 weight, block 32 along K) + MatMul (QDQ)
  qdq_per_axis_int8       QuantizeLinear/DequantizeLinear-13 on the activation, per-axis int8 weight + MatMul
  qlinear_matmul          QLinearMatMul-10, uint8, per-column weight scale and zero point
  qlinear_conv            QLinearConv-10, uint8 weight [16, 3, 3, 3], per-channel scale/zero point, int32 bias
  matmul_integer          DynamicQuantizeLinear + MatMulInteger-10 (int8 weight, per-column zero point)
  fp16_weight_fp32        a float16 weight Cast to float32 before a float32 MatMul
  bad_matmulnbits_bits3   MatMulNBits with bits = 3: an input error (exit 2) naming the node
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
INT4 = 22  # TensorProto.INT4 (onnx.proto, IR 10); Debian's ONNX 1.12 has no name for it
rng = np.random.default_rng(14)


def init(name, array, onnx_type=None):
    return helper.make_tensor(name, onnx_type or onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[array.dtype], array.shape,
                              array.tobytes(), raw=True)


def int4_init(name, shape):
    """An int4 initializer: values packed two per byte, low nibble first (onnx.proto, INT4)."""
    n = int(np.prod(shape))
    t = TensorProto()
    t.name = name
    t.data_type = INT4
    t.dims.extend(shape)
    t.raw_data = rng.integers(0, 256, size=(n + 1) // 2, dtype=np.uint8).tobytes()
    return t


def u8(shape):
    return rng.integers(0, 256, size=shape, dtype=np.uint8)


def i8(shape):
    return rng.integers(-128, 128, size=shape, dtype=np.int8)


def f32(shape):
    return rng.standard_normal(shape).astype(np.float32)


def f16(shape):
    return rng.standard_normal(shape).astype(np.float16)


def save(stem, nodes, inputs, outputs, inits, opsets, ir_version=8):
    graph = helper.make_graph(nodes, stem, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets],
                              producer_name="memplan-tests", producer_version="1")
    model.ir_version = ir_version
    onnx.save(model, os.path.join(HERE, stem + ".onnx"))


def matmulnbits(stem, k, n, block, zero_points, bits_attr=4):
    blocks = -(-k // block)
    blob = block * 4 // 8
    inits = [init("w_q", u8((n, blocks, blob))), init("w_scales", f16((n * blocks,)))]
    ins = ["a", "w_q", "w_scales"]
    if zero_points:
        inits.append(init("w_zp", u8((n * -(-blocks * 4 // 8),))))
        ins.append("w_zp")
    node = helper.make_node("MatMulNBits", ins, ["y"], domain="com.microsoft", K=k, N=n, bits=bits_attr, block_size=block,
                            accuracy_level=0)
    save(stem, [node], [helper.make_tensor_value_info("a", TensorProto.FLOAT16, ["batch", "seq", k])],
         [helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)], inits, [("", 17), ("com.microsoft", 1)])


def main():
    matmulnbits("matmulnbits_4bit_zp", k=80, n=32, block=32, zero_points=True)
    matmulnbits("matmulnbits_4bit_nozp", k=64, n=48, block=16, zero_points=False)
    # Invalid on purpose: bits = 3 (MatMulNBits takes 2, 4 or 8), for the exit-code test.
    matmulnbits("bad_matmulnbits_bits3", k=64, n=32, block=32, zero_points=False, bits_attr=3)

    # Blocked int4 QDQ weight (opset 21): w [K=64, N=32] int4, scales [2, 32] float32 and int4 zero points.
    save("qdq_blocked_int4",
         [helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zp"], ["w"], axis=0, block_size=32),
          helper.make_node("MatMul", ["x", "w"], ["y"])],
         [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
         [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
         [int4_init("w_q", [64, 32]), init("w_scale", f32((2, 32))), int4_init("w_zp", [2, 32])],
         [("", 21)], ir_version=10)

    # Per-axis int8 weight [64, 32] (axis 1: one scale per output column), per-tensor uint8 activation QDQ.
    save("qdq_per_axis_int8",
         [helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["x_q"]),
          helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zp"], ["x_dq"]),
          helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zp"], ["w"], axis=1),
          helper.make_node("MatMul", ["x_dq", "w"], ["y"])],
         [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
         [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
         [init("x_scale", np.array(0.05, np.float32)), init("x_zp", np.array(128, np.uint8)),
          init("w_q", i8((64, 32))), init("w_scale", np.abs(f32((32,)))), init("w_zp", np.zeros(32, np.int8))],
         [("", 13)])

    save("qlinear_matmul",
         [helper.make_node("QLinearMatMul", ["a", "a_scale", "a_zp", "b", "b_scale", "b_zp", "y_scale", "y_zp"], ["y"])],
         [helper.make_tensor_value_info("a", TensorProto.UINT8, ["batch", 64])],
         [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
         [init("a_scale", np.array(0.02, np.float32)), init("a_zp", np.array(128, np.uint8)), init("b", u8((64, 32))),
          init("b_scale", np.abs(f32((32,)))), init("b_zp", u8((32,))), init("y_scale", np.array(0.1, np.float32)),
          init("y_zp", np.array(128, np.uint8))],
         [("", 10)])

    save("qlinear_conv",
         [helper.make_node("QLinearConv", ["x", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp", "bias"],
                           ["y"], pads=[1, 1, 1, 1], kernel_shape=[3, 3])],
         [helper.make_tensor_value_info("x", TensorProto.UINT8, ["batch", 3, 8, 8])],
         [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
         [init("x_scale", np.array(0.02, np.float32)), init("x_zp", np.array(128, np.uint8)), init("w", u8((16, 3, 3, 3))),
          init("w_scale", np.abs(f32((16,)))), init("w_zp", u8((16,))), init("y_scale", np.array(0.1, np.float32)),
          init("y_zp", np.array(128, np.uint8)), init("bias", rng.integers(-1000, 1000, size=16, dtype=np.int32))],
         [("", 10)])

    save("matmul_integer",
         [helper.make_node("DynamicQuantizeLinear", ["x"], ["x_q", "x_scale", "x_zp"]),
          helper.make_node("MatMulInteger", ["x_q", "w", "x_zp", "w_zp"], ["acc"]),
          helper.make_node("Cast", ["acc"], ["y"], to=TensorProto.FLOAT)],
         [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
         [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
         [init("w", u8((64, 32))), init("w_zp", u8((32,)))],
         [("", 11)])

    save("fp16_weight_fp32",
         [helper.make_node("Cast", ["w16"], ["w"], to=TensorProto.FLOAT), helper.make_node("MatMul", ["x", "w"], ["y"])],
         [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
         [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
         [init("w16", f16((64, 32)))],
         [("", 17)])


if __name__ == "__main__":
    main()
