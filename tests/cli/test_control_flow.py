"""memplan on models whose shapes depend on an input's value: nested Ifs over a scalar sample-rate input, the way
Silero VAD is exported (tests/models/control_flow/make_models.py builds them with onnx.helper), and --value.

Run by ctest with MEMPLAN_BIN and MEMPLAN_SOURCE_DIR set; Debian's python3 with onnx and numpy.
Expected byte counts are worked out by hand from the generator's tensor shapes, in the comments.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import jsonschema

BIN = os.environ["MEMPLAN_BIN"]
SRC = os.environ["MEMPLAN_SOURCE_DIR"]
TMP = tempfile.mkdtemp(prefix="memplan-control-flow-")
subprocess.run([sys.executable, os.path.join(SRC, "tests", "models", "control_flow", "make_models.py"), TMP], check=True)
VAD = os.path.join(TMP, "vad_if.onnx")

# Weights when each branch is costed (--runtime ideal: every initializer and Constant output is a weight):
# top level: Constant 16000 (int64, 8 B).
# 16 kHz branch: W float[1, 256, 512] 524,288 B; R float[1, 256, 64] 65,536 B; head float[64, 1] 256 B;
#   Squeeze axes int64[2] 16 B; Reshape target int64[3] 24 B  -> 590,120 B; with the top level 590,128 B.
# 8 kHz path (outer else, then inner then): Constant 8000 8 B; W float[1, 128, 256] 131,072 B;
#   R float[1, 128, 32] 16,384 B; head float[32, 1] 128 B; axes 16 B; target 24 B -> 147,632 B; total 147,640 B.
WEIGHTS_16K = 8 + 524288 + 65536 + 256 + 16 + 24
WEIGHTS_8K = 8 + 8 + 131072 + 16384 + 128 + 16 + 24


def run(*args):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=600)


def estimate(*args):
    p = run("estimate", VAD, "--runtime", "ideal", "--json", *args)
    if p.returncode != 0:
        raise AssertionError(f"estimate {args} exited {p.returncode}: {p.stderr}")
    return json.loads(p.stdout)


class VadIfTest(unittest.TestCase):
    def test_without_value_the_shapeable_branch_is_assumed_and_named(self):
        # samples = 512: only the 16 kHz branch shapes (the 8 kHz Reshape needs 256 elements, the unsupported
        # rate's LSTM a 3-D input), so the outer If assumes its then branch; the message says why else failed.
        d = estimate("--input", "x=1x512")
        warns = [w for w in d["warnings"] if "if_16k" in w]
        self.assertEqual(len(warns), 1, d["warnings"])
        self.assertIn("node 'if_16k' (If)", warns[0])
        self.assertIn("the else branch cannot be shaped at these inputs", warns[0])
        self.assertIn("neither branch can be shaped", warns[0])  # the inner If's reason
        self.assertIn("LSTM takes a 3-D X", warns[0])
        self.assertIn("so the then branch is assumed", warns[0])
        self.assertEqual(d["breakdown"]["weights"], WEIGHTS_16K)

    def test_value_picks_the_branch_without_warning(self):
        d = estimate("--input", "x=1x512", "--value", "sr=16000")
        self.assertEqual(d["warnings"], [])
        self.assertEqual(d["values"], {"sr": 16000})
        self.assertIn("value sr=16000", d["configuration"])
        self.assertEqual(d["breakdown"]["weights"], WEIGHTS_16K)
        with open(os.path.join(SRC, "docs", "schemas", "estimate.schema.json")) as f:
            jsonschema.validate(d, json.load(f))

    def test_nested_if_at_8k(self):
        # samples = 256 unbound rate: the 16 kHz branch cannot reshape 256 samples into 512-frames; the inner If
        # assumes its 8 kHz branch; with --value sr=8000 the same branch is taken without a warning.
        d = estimate("--input", "x=1x256")
        self.assertEqual(d["breakdown"]["weights"], WEIGHTS_8K)
        self.assertTrue(any("node 'if_16k/else_branch/if_8k' (If)" in w and "then branch is assumed" in w
                            for w in d["warnings"]), d["warnings"])
        d = estimate("--input", "x=1x256", "--value", "sr=8000")
        self.assertEqual(d["warnings"], [])
        self.assertEqual(d["breakdown"]["weights"], WEIGHTS_8K)

    def test_a_value_whose_branch_cannot_be_shaped_is_an_error_naming_the_node(self):
        # sr = 8000 with 512 samples: the 8 kHz branch runs and its Reshape to [1, 1, 256] cannot hold 512.
        p = run("estimate", VAD, "--input", "x=1x512", "--value", "sr=8000")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("if_16k/else_branch/if_8k/then_branch/sr8k_reshape", p.stderr)
        # sr = 44100: neither the 8 kHz nor the unsupported-rate branch shapes at 512 samples.
        p = run("estimate", VAD, "--input", "x=1x512", "--value", "sr=44100")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("bad_lstm", p.stderr)

    def test_bad_values_exit_2(self):
        for args, message in [
            (["--value", "rate=16000"], "--value rate: the model has no graph input named 'rate'"),
            (["--value", "sr=16000.5"], "is int64, but '16000.5' is not an integer"),
            (["--value", "sr=1,2"], "'sr' is a scalar, but 2 values are given"),
            (["--value", "x=1"], "graph input 'x' has rank 2; --value binds scalars and 1-D tensors"),
        ]:
            p = run("estimate", VAD, "--dim", "samples=512", *args)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertIn(message, p.stderr, args)

    def test_every_model_command_takes_value(self):
        for command in ("inspect", "plan"):
            p = run(command, VAD, "--input", "x=1x512", "--value", "sr=16000", "--json")
            self.assertEqual(p.returncode, 0, (command, p.stderr))
            self.assertNotIn("if_16k' (If)", p.stdout, command)  # no unknown-condition warning


if __name__ == "__main__":
    unittest.main()
