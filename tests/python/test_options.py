"""The one option schema (report/option_schema.cc) and what is made from it: docs/options.md, each command's --help, and
the Python module's keywords. The committed docs are the reference a person reads; each front end must offer
exactly the options the docs list for its command, so no list of flags can drift from the others."""
import os
import re
import subprocess

import pytest

import memplan

SRC = os.environ.get("MEMPLAN_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BIN = os.environ.get("MEMPLAN_BIN", os.path.join(SRC, "build", "memplan"))
DOC = os.path.join(SRC, "docs", "options.md")
MODEL = os.path.join(SRC, "tests", "models", "gpt_tiny.onnx")
COMMANDS = ["inspect", "estimate", "plan", "fit", "check", "timeline", "serve", "export"]


def run(*args):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=120)


def doc_rows():
    """(flag, python keyword or None, set of commands) for every row of the docs' option table."""
    rows = []
    with open(DOC, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("| `"):
                continue
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            if len(cells) != 7:
                continue  # the combination tables
            flag = cells[0].strip("`")
            keyword = None if cells[1] == "-" else cells[1].strip("`")
            commands = set(COMMANDS) if cells[5] == "all" else {c.strip() for c in cells[5].split(",")}
            rows.append((flag, keyword, commands))
    return rows


def test_docs_are_the_schema_output():
    p = run("options")
    assert p.returncode == 0, p.stderr
    with open(DOC, encoding="utf-8") as f:
        assert f.read() == p.stdout, "docs/options.md is stale: build/memplan options > docs/options.md"


def test_every_command_appears_and_rows_parse():
    rows = doc_rows()
    assert len(rows) > 50
    for c in COMMANDS:
        assert any(c in cmds for _, _, cmds in rows), c


@pytest.mark.parametrize("command", COMMANDS)
def test_help_lists_exactly_the_documented_flags(command):
    p = run(command, "--help")
    assert p.returncode == 0
    shown = set(re.findall(r"^\s+(?:-\w,)?(--[a-z][a-z0-9-]*)", p.stdout, re.M)) - {"--help"}
    # A row's flag is CLI11's names: a short one first ("-o,--output"), aliases after the long one
    # ("--context,--max-model-len"); --help lists them on one line, the long name first.
    def long_name(flag):
        return next(n for n in flag.split(",") if n.startswith("--"))
    rows = [f for f, _, cmds in doc_rows() if command in cmds and f.startswith(("-", "--"))]
    assert shown == {long_name(f) for f in rows}
    for f in rows:
        aliases = [n for n in f.split(",") if n.startswith("--")][1:]
        for alias in aliases:
            assert re.search(r"^\s+" + re.escape(long_name(f)) + r"," + re.escape(alias) + r"\b", p.stdout, re.M), alias


@pytest.mark.parametrize("command", ["inspect", "estimate", "plan", "fit", "check", "serve", "export"])
def test_python_keywords_are_exactly_the_documented_ones(command):
    function = memplan.export_config if command == "export" else getattr(memplan, command)
    with pytest.raises(memplan.InputError) as e:
        function(MODEL, no_such_option=1)
    listed = re.search(r"expected one of: (.*)\)", str(e.value)).group(1).split(", ")
    documented = {k for f, k, cmds in doc_rows() if command in cmds and k and f != "MODEL"}
    assert set(listed) == documented


def test_an_option_of_another_command_is_refused_by_both_front_ends():
    # --context is serve's: estimate refuses it on the command line and as a keyword.
    assert run("estimate", MODEL, "--context", "8").returncode == 2
    with pytest.raises(memplan.InputError, match="unknown option 'context'"):
        memplan.estimate(MODEL, context=8)


def test_cli_and_python_refuse_a_value_with_one_message():
    p = run("estimate", MODEL, "--batch", "1", "--dim", "seq=8", "--mode", "train", "--gpus", "0")
    assert p.returncode == 2
    with pytest.raises(memplan.InputError) as e:
        memplan.estimate(MODEL, batch=1, dims={"seq": 8}, mode="train", gpus=0)
    assert p.stderr == "memplan: error: " + str(e.value) + "\n"
    assert "--gpus 0: must be at least 1" in p.stderr


@pytest.mark.parametrize("command", ["fit", "serve"])
def test_gpu_and_memory_are_one_rule_for_both_front_ends(command):
    # report/option_checks.cc's command_rules: one rule, one message, for fit and serve on the command line and in
    # Python; the docs list it.
    args = ["--gpu", "T4", "--memory", "1GiB"] + (["--context", "8"] if command == "serve" else [])
    p = run(command, MODEL, *args)
    assert p.returncode == 2
    kwargs = {"gpu": "T4", "memory": "1GiB", **({"context": 8} if command == "serve" else {})}
    with pytest.raises(memplan.InputError) as e:
        getattr(memplan, command)(MODEL, **kwargs)
    assert p.stderr == "memplan: error: " + str(e.value) + "\n"
    assert "--gpu and --memory exclude each other: give one budget" in p.stderr
    with open(DOC, encoding="utf-8") as f:
        assert "| fit, serve | --gpu and --memory exclude each other" in f.read()


@pytest.mark.parametrize("command,args,message", [
    ("fit", ["--headroom", "150"], "--headroom 150: expected a number in [0, 99]"),
    ("serve", ["--context", "8", "--block-size", "0"], "--block-size 0: must be at least 1"),
    ("serve", ["--context", "0"], "--context 0: must be at least 1"),
])
def test_fit_and_serve_ranges_are_the_rows_in_both_front_ends(command, args, message):
    p = run(command, MODEL, *args)
    assert p.returncode == 2
    kwargs = {args[i].lstrip("-").replace("-", "_"): float(args[i + 1]) if args[i] == "--headroom" else int(args[i + 1])
              for i in range(0, len(args), 2)}
    with pytest.raises(memplan.InputError) as e:
        getattr(memplan, command)(MODEL, **kwargs)
    assert p.stderr == "memplan: error: " + str(e.value) + "\n"
    assert message in p.stderr
