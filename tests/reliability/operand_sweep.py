"""Every op type the cost models name, with operands missing, through the whole analysis.

The cost models match ops by type alone, so a custom-domain node called BatchNormalization, MaxPool or
Sigmoid reaches their rules with whatever inputs and outputs the model gave it: none, an omitted first one
('' in ONNX), or more than the ONNX op takes. The fuzzers found three such rules reading tensor -1; this
sweep asks every rule the same question. It writes one small model per (op type, inputs, outputs, consumer)
into a temp dir and replays them all through the analysis fuzz target's entry point (fuzz_replay_analysis_mutate:
import, estimate for ideal/pytorch/onnxruntime inference and pytorch training), so under the ASan+UBSan
build an out-of-bounds read fails this test. Op types come from the string literals in cost_models/*.cc, so
a new rule is swept without editing this file.

Usage: operand_sweep.py REPLAY_BINARY SOURCE_DIR
"""
import glob
import itertools
import os
import re
import subprocess
import sys
import tempfile

import onnx
from onnx import TensorProto, helper

DOMAIN = "sweep.custom"
SHAPE = [2, 3, 4, 5]

INPUTS = [[], [""], ["", "x"], ["x"], ["x", "w"], ["w", "x"], ["x", "x", "x"]]
OUTPUTS = [[], [""], ["y"], ["y", ""], ["", "y"], ["y", "z"]]


def op_types(source_dir):
    names = set()
    for path in glob.glob(os.path.join(source_dir, "cost_models", "*.cc")):
        with open(path) as f:
            names.update(re.findall(r'"([A-Z][A-Za-z0-9]+)"', f.read()))
    return sorted(names)


def model(op, inputs, outputs, consumed):
    value = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, SHAPE)
    nodes = [helper.make_node(op, inputs, outputs, domain=DOMAIN, name="n")]
    produced = [o for o in outputs if o]
    graph_outputs = []
    for o in produced:
        if consumed:
            nodes.append(helper.make_node("Relu", [o], [o + "_relu"], name=o + "_relu"))
            graph_outputs.append(value(o + "_relu"))
        else:
            graph_outputs.append(value(o))
    if not graph_outputs:
        graph_outputs = [value("x")]
    graph = helper.make_graph(nodes, "operand_sweep", [value("x"), value("w")], graph_outputs,
                              value_info=[value(o) for o in produced] if consumed else [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)],
                             ir_version=8)


def main():
    replay, source_dir = sys.argv[1], sys.argv[2]
    ops = op_types(source_dir)
    if len(ops) < 50:
        sys.exit(f"operand_sweep: only {len(ops)} op types found in {source_dir}/cost_models; wrong source dir?")
    with tempfile.TemporaryDirectory() as d:
        count = 0
        for op, ins, outs, consumed in itertools.product(ops, INPUTS, OUTPUTS, (False, True)):
            m = model(op, ins, outs, consumed)
            name = f"{op}-in{'_'.join(i or 'omitted' for i in ins) or 'none'}-out{'_'.join(o or 'omitted' for o in outs) or 'none'}"
            with open(os.path.join(d, f"{name}{'-consumed' if consumed else ''}.onnx"), "wb") as f:
                f.write(m.SerializeToString())
            count += 1
        print(f"operand_sweep: {len(ops)} op types, {count} models", flush=True)
        p = subprocess.run([replay, d], capture_output=True, text=True, timeout=1800)
        if p.returncode != 0:
            last = [line for line in p.stderr.splitlines() if line.startswith("replay: ")][-1:]
            print(f"operand_sweep: the analysis failed on {last[0][8:] if last else '?'} (exit {p.returncode})")
            print(p.stderr[-4000:])
            sys.exit(1)
        print(p.stdout.strip())


if __name__ == "__main__":
    main()
