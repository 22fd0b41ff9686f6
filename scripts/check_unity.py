#!/usr/bin/python3
"""Fails when two source files of one target define a file-local function, constant or type of the same name.

    /usr/bin/python3 scripts/check_unity.py [ROOT]      (ctest: unity_file_local_names)

memplan builds each target as a unity build (CMakeLists.txt, MEMPLAN_UNITY): CMake compiles its sources 8 at a
time as one translation unit, so the anonymous namespaces of the files in a batch become one namespace. Two
definitions with the same signature, two constants or two types of one name then fail to compile, which is
loud but shows only once a later file shifts the batches; two with different signatures become
overloads of each other, which is silent: a call that meant its own file's `run(const std::string&)` can bind to
another file's `run(bool)` (a string literal converts to bool before std::string) and the build passes with a
changed program. Which files share a batch changes whenever a file is added, so any two files of a target may
share one; this check refuses the name itself.

A target is a directory here (each CMakeLists.txt globs its own directory; onnx_import's also globs rules/,
values/ and inference/). File-local means defined at namespace scope inside `namespace {` ... `}  // namespace`, or
declared `static` at file scope. Exit 0 when no name repeats, 1 naming each name and its files.
"""
from __future__ import annotations

import os
import re
import sys
from collections import defaultdict
from typing import Dict, List, Set

SOURCE_DIRS = ["onnx_import", "planner", "cost_models", "report", "cli", "validate", "python", "fuzz", "tests",
               "bench"]
# Subdirectories compiled into their parent's target.
MERGED = {"onnx_import/rules": "onnx_import", "onnx_import/values": "onnx_import",
          "onnx_import/inference": "onnx_import"}

# Directories whose every file is a target of its own (one executable a file): no two share a batch.
ONE_TARGET_PER_FILE = {"bench/planner", "fuzz/targets", "tests/import"}

# A function definition or declaration starting at column 0: return type words, then NAME(.
FUNCTION = re.compile(r"^(?:static\s+|inline\s+|constexpr\s+|template\s*<[^>]*>\s*)*"
                      r"(?:[A-Za-z_][\w:]*(?:<[^()]*>)?[\s*&]+)+([A-Za-z_]\w*)\s*\(")
# A constant or variable at column 0 (`constexpr int64_t kMax = 4096;`, `const char* const kWhat = "...";`), or a
# type: two of these in one batch are a redefinition, an error that appears only once a later file shifts the
# batches, so they are refused by name too.
VARIABLE = re.compile(r"^(?:static\s+|inline\s+)*(?:constexpr|const)\b[^=(;]*?\b([A-Za-z_]\w*)\s*(?:\[[^]]*\]\s*)?(?:=|\{)")
TYPE = re.compile(r"^(?:struct|class|enum class|enum|union)\s+([A-Za-z_]\w*)\b(?!\s*;)")
NOT_A_FUNCTION = re.compile(r"^(?:return|using|typedef|namespace|struct|class|enum|union|if|for|while|switch|case|"
                            r"else|do|TEST|TEST_F|TEST_P|INSTANTIATE_|MATCHER|#|//|\})\b")


def target_of(rel: str) -> str:
    d = os.path.dirname(rel)
    return rel if d in ONE_TARGET_PER_FILE else MERGED.get(d, d)


def file_local_names(text: str) -> Set[str]:
    names: Set[str] = set()
    depth_anon = 0  # open anonymous namespaces (never indented in this code base)
    for line in text.splitlines():
        if line.startswith("namespace {"):
            depth_anon += 1
            continue
        if line.startswith("}  // namespace") and depth_anon and not re.search(r"namespace \w", line):
            depth_anon -= 1
            continue
        if not line or line[0].isspace():
            continue
        local = depth_anon or line.startswith("static ")
        m = TYPE.match(line) or VARIABLE.match(line)
        if m and local:
            names.add(m.group(1))
            continue
        if NOT_A_FUNCTION.match(line):
            continue
        m = FUNCTION.match(line)
        if not m or m.group(1) in ("operator",):
            continue
        if depth_anon or line.startswith("static "):
            names.add(m.group(1))
    return names


def find_repeats(root: str) -> Dict[str, Dict[str, List[str]]]:
    by_target: Dict[str, Dict[str, List[str]]] = defaultdict(lambda: defaultdict(list))
    for top in SOURCE_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for name in sorted(filenames):
                if not name.endswith((".cc", ".cpp")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8") as f:
                    for fn in file_local_names(f.read()):
                        by_target[target_of(rel)][fn].append(rel)
    return {t: {n: files for n, files in names.items() if len(files) > 1} for t, names in by_target.items()}


def main() -> int:
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    repeats = {t: n for t, n in find_repeats(root).items() if n}
    if not repeats:
        print("check_unity: no file-local name repeats within a target")
        return 0
    for target in sorted(repeats):
        for name in sorted(repeats[target]):
            print(f"{target}: `{name}` is file-local in {', '.join(repeats[target][name])}: in one unity batch "
                  "they overload or redefine each other; give each its own name, or share one in a header")
    return 1


if __name__ == "__main__":
    sys.exit(main())
