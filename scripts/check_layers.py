#!/usr/bin/python3
"""Fails when an #include runs from a lower stage of memplan to a higher one.

    /usr/bin/python3 scripts/check_layers.py [ROOT]      (ctest: layers_include_order)

Stages, by what may include what (an include goes to a strictly lower stage, or stays in its own directory):

    0 onnx_import   1 planner   2 cost_models   3 report   4 cli, python, validate   5 fuzz

The planner sits below the cost models here although data flows cost model -> planner at run time: the cost
models write the planner's `Program` (planner/program.h), so they include it; the planner never includes them.
cli, python and validate are siblings: none includes another. fuzz/ drives every stage.

Inside report/ the files are layered too (REPORT_LAYERS below): a module (foo.h and foo.cc) includes only
modules of a lower layer. A new file in report/ must be given a layer there, or the check fails naming it.

Known arrows that run back up are listed in ALLOWED, each with why it is there: the check passes over them,
and fails when one no longer occurs, so the list shrinks as they are fixed and never hides a new one.
"""
from __future__ import annotations

import os
import re
import sys
from typing import Dict, List, Optional, Tuple

STAGES: Dict[str, int] = {
    "onnx_import": 0,
    "planner": 1,
    "cost_models": 2,
    "report": 3,
    "cli": 4,
    "python": 4,
    "validate": 4,
    "fuzz": 5,
}

# report/'s modules, lowest layer first. A module is a file name without its extension (estimate.h and
# estimate.cc are the module "estimate"; gpu_catalog_data.h is generated from gpu_catalog_data.h.in).
REPORT_LAYERS: List[Tuple[str, ...]] = [
    ("cudnn_workspace", "device_memory", "files", "gpu_catalog_data", "json_text", "sizes"),  # no report/ include
    ("estimate",),                                         # a graph through a cost model and the planner
    ("estimate_format", "gpu_catalog", "kv_cache", "option_choices", "timeline", "trace"),  # read an Estimate; choice names
    ("deepspeed_config",),                                 # --deepspeed: a DeepSpeed config file into ZeRO's settings
    ("estimate_config", "deepspeed_config_apply"),         # command-line strings into estimate options; --deepspeed's
                                                           # settings against the command line
    ("fit", "serve_probe"),                                # searches over estimates; a decoder's serving steps
    ("fit_format",),                                       # fit's answers as text, JSON and Markdown
    ("serve_vllm",),                                       # vLLM's start-up answer over the probe
    ("serve_vllm_format", "serve_vllm_moe", "serve_vllm_mla", "serve_vllm_fp8", "serve_vllm_modelopt", "serve_vllm_v0",
     "serve_vllm_quantization"),
    # that answer as text, JSON and Markdown; its fused MoE kernel; MLA; block-wise fp8 checkpoints; what V0 refuses;
    # the quantization it serves with
    ("serve_engine_answer",),                              # what every engine answers, its vLLM-analysis terms
    ("serve_sglang",),                                     # SGLang's answer over vLLM's analysis
    ("serve_engines",),                                    # SGLang's and TensorRT-LLM's answers over vLLM's analysis
    ("serve_engines_format", "serve_engines_ortgenai"),    # those answers as text, JSON and Markdown; ORT GenAI's
    ("check", "export", "inspect", "plan", "serve"),       # the commands
    ("options",),                                          # the option schema's types: every command's arguments
    ("recipes",),                                          # --recipe: a framework's option values, set before the checks
    ("recipes_torchtune", "recipes_litgpt", "recipes_torchtitan"),  # one framework's recipes each, which recipes.cc lists
    ("option_rows",),                                      # what the rows are written with
    ("option_rows_loss", "option_rows_finetune", "option_rows_parallel", "option_rows_serve", "option_rows_output", "option_schema"),  # the rows: the loss's, fine-tuning's, --ep's, serve's, check's and output's, the schema
    ("combination_matrix",),                               # which pairs of features are modelled
    ("command_rules",),                                    # a command's own rules: options that exclude or need another
    ("option_checks_ep",),                                 # --ep's requirements, which option_checks runs
    ("option_checks",),                                    # every check that needs no model, once
    ("options_doc",),                                      # docs/options.md, from the rows and the matrix
]
SUBLAYERS: Dict[str, List[Tuple[str, ...]]] = {"report": REPORT_LAYERS}

# Known arrows that run back up: (including file, included file) -> why it is tolerated. Empty it as they are
# fixed; an entry that no longer occurs fails the check.
ALLOWED: Dict[Tuple[str, str], str] = {
}

SOURCE_SUFFIXES = (".h", ".hh", ".hpp", ".cc", ".cpp", ".cu", ".cuh", ".h.in")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]')


def module_of(path: str) -> str:
    name = os.path.basename(path)
    for suffix in sorted(SOURCE_SUFFIXES, key=len, reverse=True):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def sublayer(directory: str, path: str) -> Optional[int]:
    for index, modules in enumerate(SUBLAYERS[directory]):
        if module_of(path) in modules:
            return index
    return None


def includes(root: str):
    """(file, line number, included path) for every project include in the stages' sources, in a fixed order."""
    for directory in sorted(STAGES):
        top = os.path.join(root, directory)
        for base, dirs, files in os.walk(top):
            dirs.sort()
            for name in sorted(files):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.join(base, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = m.group(1)
                        if "/" not in target:  # "foo.h": beside the including file
                            target = os.path.dirname(rel) + "/" + target
                        if target.split("/")[0] in STAGES:
                            yield rel, number, target


def violations(root: str, allowed: Dict[Tuple[str, str], str]) -> List[str]:
    """Every include that runs the wrong way and is not in `allowed`, every allowed arrow that no longer occurs,
    and every file of a layered directory without a layer; empty when the tree is clean."""
    errors = []
    seen = set()
    for source, number, target in includes(root):
        src_dir, dst_dir = source.split("/")[0], target.split("/")[0]
        where = f"{source}:{number}: #include \"{target}\""
        if src_dir != dst_dir:
            if STAGES[dst_dir] < STAGES[src_dir]:
                continue
            problem = (f"{src_dir}/ (stage {STAGES[src_dir]}) includes {dst_dir}/ (stage {STAGES[dst_dir]}): "
                       "an include goes only to a lower stage")
        elif src_dir in SUBLAYERS:
            src_layer, dst_layer = sublayer(src_dir, source), sublayer(src_dir, target)
            if src_layer is None or dst_layer is None:
                continue  # reported once per file below
            if module_of(source) == module_of(target) or dst_layer < src_layer:
                continue
            problem = (f"{src_dir}/ layer {src_layer} ({module_of(source)}) includes layer {dst_layer} "
                       f"({module_of(target)}): a module includes only lower layers")
        else:
            continue
        if (source, target) in allowed:
            seen.add((source, target))
            continue
        errors.append(f"{where}: {problem}")
    for directory in sorted(SUBLAYERS):
        for base, dirs, files in os.walk(os.path.join(root, directory)):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(SOURCE_SUFFIXES) and sublayer(directory, name) is None:
                    rel = os.path.relpath(os.path.join(base, name), root).replace(os.sep, "/")
                    errors.append(f"{rel}: module '{module_of(name)}' has no layer: add it to "
                                  f"{directory.upper()}_LAYERS in scripts/check_layers.py")
    for source, target in sorted(set(allowed) - seen):
        errors.append(f"{source}: the allowed arrow to {target} no longer occurs: remove it from ALLOWED in "
                      "scripts/check_layers.py")
    return errors


def main(argv: List[str]) -> int:
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    missing = [d for d in STAGES if not os.path.isdir(os.path.join(root, d))]
    if missing:
        print(f"check_layers: {root} has no {', '.join(missing)}/: not memplan's source tree", file=sys.stderr)
        return 2
    errors = violations(root, ALLOWED)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"check_layers: {len(errors)} problem(s) with the stage order (docs/architecture.md, Contracts)",
              file=sys.stderr)
        return 1
    print(f"check_layers: every include runs down the stages; {len(ALLOWED)} known exception(s) allowed:")
    for (source, target), why in sorted(ALLOWED.items()):
        print(f"  {source} -> {target}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
