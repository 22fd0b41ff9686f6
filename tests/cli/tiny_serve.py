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
