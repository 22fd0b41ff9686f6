"""The module and the command as `pip install --no-build-isolation --no-index .` put them into a venv
(scripts/test.sh makes a fresh one and runs this file with its python): both are the installed ones, they print
the same version, and give the same JSON.
"""
import json
import os
import subprocess
import sys

import memplan

SRC = os.environ["MEMPLAN_SOURCE_DIR"]
GPT_TINY = os.path.join(SRC, "tests", "models", "gpt_tiny.onnx")
COMMAND = os.path.join(sys.prefix, "bin", "memplan")


def test_installed_into_the_venv():
    assert sys.prefix != sys.base_prefix, "not run from a virtual environment"
    assert os.path.realpath(memplan.__file__).startswith(os.path.realpath(sys.prefix)), memplan.__file__
    assert os.access(COMMAND, os.X_OK), COMMAND


def test_command_and_module_agree():
    assert subprocess.run([COMMAND, "--version"], capture_output=True, text=True).stdout.strip() == \
        f"memplan {memplan.__version__}"
    args = ["estimate", GPT_TINY, "--batch", "2", "--dim", "seq=64", "--mode", "train", "--precision", "amp-bf16"]
    p = subprocess.run([COMMAND, *args, "--json"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == memplan.estimate(GPT_TINY, batch=2, dims={"seq": 64}, mode="train",
                                                   precision="amp-bf16")


def test_torch_helpers_import():
    import memplan.torch  # noqa: F401  (torch itself is imported only when a function runs)
