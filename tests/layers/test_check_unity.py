"""scripts/check_unity.py catches what it is for: each case writes a small tree whose files would share a unity
batch and expects exactly the repeated file-local names, or none."""
import importlib.util
import os

SRC = os.environ.get("MEMPLAN_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SCRIPT = os.path.join(SRC, "scripts", "check_unity.py")

spec = importlib.util.spec_from_file_location("check_unity", SCRIPT)
check_unity = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_unity)


def repeats(tmp_path, files):
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    return {t: dict(n) for t, n in check_unity.find_repeats(str(tmp_path)).items() if n}


# The case that made the check: two test files' own `run`, one taking a string and one a bool. In one batch a
# string literal binds to run(bool), silently.
RUN_STRING = 'namespace memplan {\nnamespace {\n\nTrainingRun run(const std::string& wrap) {\n  return {};\n}\n\n' \
             '}  // namespace\n}  // namespace memplan\n'
RUN_BOOL = 'namespace memplan {\nnamespace {\n\nTrainingRun run(bool offload, bool mp = false) {\n  return {};\n}\n\n' \
           '}  // namespace\n}  // namespace memplan\n'


def test_an_overload_across_two_files_of_a_target_is_found(tmp_path):
    found = repeats(tmp_path, {"tests/cost_models/a_test.cc": RUN_STRING, "tests/cost_models/b_test.cc": RUN_BOOL})
    assert found == {"tests/cost_models": {"run": ["tests/cost_models/a_test.cc", "tests/cost_models/b_test.cc"]}}


def test_constants_types_and_statics_are_found_too(tmp_path):
    a = ('namespace {\nconstexpr int64_t kMaxExperts = 4096;\nstruct Slots {\n  int a;\n};\n}  // namespace\n'
         'static int helper(int x) { return x; }\n')
    found = repeats(tmp_path, {"cost_models/a.cc": a, "cost_models/b.cc": a})
    assert set(found["cost_models"]) == {"kMaxExperts", "Slots", "helper"}


def test_subdirectories_of_the_importer_are_one_target(tmp_path):
    f = 'namespace memplan::shape {\nnamespace {\n\nbool same_as_first(NodeContext& ctx) {\n  return true;\n}\n\n' \
        '}  // namespace\n}  // namespace memplan::shape\n'
    found = repeats(tmp_path, {"onnx_import/rules/a.cc": f, "onnx_import/values/b.cc": f})
    assert list(found) == ["onnx_import"]


def test_names_outside_anonymous_namespaces_members_and_other_targets_pass(tmp_path):
    public = 'namespace memplan {\n\nbool run(const Graph& g) {\n  return true;\n}\n\n}  // namespace memplan\n'
    member = 'namespace memplan {\n\nbool Planner::run(int x) {\n  return x;\n}\n\n}  // namespace memplan\n'
    assert repeats(tmp_path, {
        "report/a.cc": public, "report/b.cc": member,        # a declared function's overloads, a member
        "planner/c.cc": RUN_STRING, "cost_models/d.cc": RUN_BOOL,  # two targets never share a batch
        "fuzz/targets/e.cc": RUN_STRING, "fuzz/targets/f.cc": RUN_BOOL,  # an executable a file
    }) == {}


def test_this_tree_has_no_repeat():
    assert {t: n for t, n in check_unity.find_repeats(SRC).items() if n} == {}
