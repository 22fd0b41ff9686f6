"""scripts/check_layers.py catches what it is for: each case builds a small source tree with one known fault and
expects exactly that fault, named by file and line; and on memplan's own tree, without its allow-list, it finds
exactly the known arrows back up (so the allow-list is what lets the tree pass, and hides nothing else)."""
import importlib.util
import os
import subprocess
import sys

SRC = os.environ.get("MEMPLAN_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SCRIPT = os.path.join(SRC, "scripts", "check_layers.py")

spec = importlib.util.spec_from_file_location("check_layers", SCRIPT)
check_layers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_layers)


def tree(tmp_path, files):
    """A tree with every stage directory, every report/ module a file with no include, and `files` on top."""
    for directory in check_layers.STAGES:
        (tmp_path / directory).mkdir()
    for layer in check_layers.REPORT_LAYERS:
        for module in layer:
            (tmp_path / "report" / f"{module}.h").write_text("#pragma once\n")
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    return str(tmp_path)


def test_includes_down_the_stages_pass(tmp_path):
    root = tree(tmp_path, {
        "planner/program.h": '#include "onnx_import/graph.h"\n',
        "cost_models/inference.cc": '#include "planner/program.h"\n#include "onnx_import/graph.h"\n',
        "report/estimate.h": '#include "cost_models/cost_model.h"\n#include "report/cudnn_workspace.h"\n',
        "report/kv_cache.h": '#include "cost_models/kv_cache.h"\n#include "report/estimate.h"\n',
        "report/fit.cc": '#include "report/fit.h"\n#include "report/estimate_config.h"\n',
        "cli/main.cc": '#include "report/fit.h"\n#include <onnx/onnx_pb.h>\n',
        "fuzz/targets/t.cc": '#include "cli/main.h"\n',
    })
    assert check_layers.violations(root, {}) == []


def test_an_include_up_a_stage_fails_naming_file_line_and_stages(tmp_path):
    root = tree(tmp_path, {"planner/liveness.cc": '#include <vector>\n\n#include "cost_models/cost_model.h"\n'})
    assert check_layers.violations(root, {}) == [
        'planner/liveness.cc:3: #include "cost_models/cost_model.h": planner/ (stage 1) includes cost_models/ '
        "(stage 2): an include goes only to a lower stage"]


def test_siblings_do_not_include_each_other(tmp_path):
    root = tree(tmp_path, {"python/bindings.cc": '#include "cli/commands.h"\n'})
    assert len(check_layers.violations(root, {})) == 1


def test_an_include_up_a_layer_inside_report_fails(tmp_path):
    root = tree(tmp_path, {"report/estimate.cc": '#include "report/estimate.h"\n#include "report/fit.h"\n'})
    assert check_layers.violations(root, {}) == [
        'report/estimate.cc:2: #include "report/fit.h": report/ layer 1 (estimate) includes layer 5 (fit): '
        "a module includes only lower layers"]


def test_an_allowed_arrow_passes_and_a_stale_one_fails(tmp_path):
    root = tree(tmp_path, {"report/estimate_config.cc": '#include "report/fit.h"\n'})
    allowed = {("report/estimate_config.cc", "report/fit.h"): "why", ("report/kv_cache.cc", "report/estimate.h"): "why"}
    assert check_layers.violations(root, allowed) == [
        "report/kv_cache.cc: the allowed arrow to report/estimate.h no longer occurs: remove it from ALLOWED in "
        "scripts/check_layers.py"]


def test_a_report_file_without_a_layer_fails(tmp_path):
    root = tree(tmp_path, {"report/options_schema.h": "#pragma once\n"})
    assert check_layers.violations(root, {}) == [
        "report/options_schema.h: module 'options_schema' has no layer: add it to REPORT_LAYERS in "
        "scripts/check_layers.py"]


def test_a_bare_include_is_read_beside_its_file(tmp_path):
    root = tree(tmp_path, {"onnx_import/graph.cc": '#include "graph.h"\n',
                           "report/estimate.cc": '#include "fit.h"\n'})
    assert [e.split(":")[0] for e in check_layers.violations(root, {})] == ["report/estimate.cc"]


def test_memplans_tree_without_the_allow_list_has_exactly_the_known_arrows():
    errors = check_layers.violations(SRC, {})
    arrows = sorted((e.split(":")[0], e.split('"')[1]) for e in errors)
    assert arrows == sorted(check_layers.ALLOWED), errors


def test_the_command_fails_with_exit_1_and_passes_with_0(tmp_path):
    bad = tree(tmp_path, {"onnx_import/graph.cc": '#include "report/estimate.h"\n'})
    run = subprocess.run([sys.executable, SCRIPT, bad], capture_output=True, text=True)
    # The tree has none of the allowed arrows: the wrong include and one stale entry per allowed arrow.
    problems = 1 + len(check_layers.ALLOWED)
    assert run.returncode == 1 and "onnx_import/graph.cc:1:" in run.stderr and f"{problems} problem(s)" in run.stderr
    ok = subprocess.run([sys.executable, SCRIPT, SRC], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
