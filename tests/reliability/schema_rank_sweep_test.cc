// Every ONNX 1.12 operator schema, every version, fed inputs of every rank from 0 to 5 and integer
// attributes at edge values.
//
// ONNX's own shape-inference functions index input dimensions without checking the rank (Gemm-6 read B.dim(1)
// of a 1-D B, STFT read signal.dim(1) of a 1-D signal, conv/pool divided by a zero stride): in memplan such a
// read is a segfault in a library it cannot catch. The fuzzers found those one at a time; this sweep asks
// the whole registry the same question at once. For each schema and each input-rank pattern it builds a
// one-node model and runs infer_shapes in a forked child. The child must end with a result or memplan's
// InputError; a signal, another exception, or a hang is reported with the schema, version and ranks.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "onnx/defs/schema.h"
#include "onnx/onnx_pb.h"
#include "onnx_import/errors.h"
#include "onnx_import/shape_inference.h"

namespace memplan {
namespace {

constexpr int kMaxRank = 5;
constexpr int64_t kDim = 3;             // every dimension; 3 is neither 1 (broadcast) nor a power of two
constexpr unsigned kChildSeconds = 20;  // a hang is a finding; ASan builds stay far below this
constexpr int kLongVector = -1;         // a rank pattern entry: a 1-D tensor of 2^31 elements (a huge shape input)
constexpr int64_t kLongVectorLength = int64_t{1} << 31;
constexpr int64_t kChildRssLimitKiB = 2 << 20;  // 2 GiB resident is an out-of-memory finding, as in fuzz/run.sh

// The element type an input is given: float when its constraint allows it, else int64, else the first
// tensor type listed. Returns UNDEFINED for inputs that take no tensor (sequences, maps, optionals).
int32_t element_type(const onnx::OpSchema& schema, const onnx::OpSchema::FormalParameter& p) {
  std::vector<std::string> allowed;
  bool constrained = false;
  for (const auto& c : schema.typeConstraintParams())
    if (c.type_param_str == p.GetTypeStr()) {
      allowed = c.allowed_type_strs;
      constrained = true;
    }
  if (!constrained) allowed = {p.GetTypeStr()};
  auto has = [&](const std::string& t) {
    for (const auto& a : allowed)
      if (a == t) return true;
    return false;
  };
  if (has("tensor(float)")) return onnx::TensorProto::FLOAT;
  if (has("tensor(int64)")) return onnx::TensorProto::INT64;
  for (const auto& a : allowed) {
    if (a.rfind("tensor(", 0) != 0) continue;
    const std::string inner = a.substr(7, a.size() - 8);
    static const std::vector<std::pair<std::string, int32_t>> kTypes = {
        {"float16", onnx::TensorProto::FLOAT16}, {"bfloat16", onnx::TensorProto::BFLOAT16},
        {"double", onnx::TensorProto::DOUBLE},   {"int32", onnx::TensorProto::INT32},
        {"int8", onnx::TensorProto::INT8},       {"uint8", onnx::TensorProto::UINT8},
        {"int16", onnx::TensorProto::INT16},     {"uint16", onnx::TensorProto::UINT16},
        {"uint32", onnx::TensorProto::UINT32},   {"uint64", onnx::TensorProto::UINT64},
        {"bool", onnx::TensorProto::BOOL},       {"string", onnx::TensorProto::STRING}};
    for (const auto& [n, t] : kTypes)
      if (n == inner) return t;
  }
  return onnx::TensorProto::UNDEFINED;
}

// A value for each required attribute, so that inference runs past the attribute checks. Schemas with a
// required graph attribute (If, Loop, Scan) are skipped: their bodies are covered by the subgraph tests.
bool fill_required_attributes(const onnx::OpSchema& schema, onnx::NodeProto& node) {
  for (const auto& [name, attr] : schema.attributes()) {
    if (!attr.required) continue;
    onnx::AttributeProto* a = node.add_attribute();
    a->set_name(name);
    a->set_type(attr.type);
    switch (attr.type) {
      case onnx::AttributeProto::INT: a->set_i(1); break;
      case onnx::AttributeProto::INTS: a->add_ints(1); break;
      case onnx::AttributeProto::FLOAT: a->set_f(1.0f); break;
      case onnx::AttributeProto::FLOATS: a->add_floats(1.0f); break;
      case onnx::AttributeProto::STRING: a->set_s("a"); break;
      case onnx::AttributeProto::STRINGS: a->add_strings("a"); break;
      case onnx::AttributeProto::TENSOR:
        a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
        a->mutable_t()->add_float_data(1.0f);
        break;
      default: return false;
    }
  }
  return true;
}

struct Case {
  const onnx::OpSchema* schema;
  std::vector<int> ranks;                   // one per formal input given; trailing optional inputs past it are left off
  std::optional<onnx::AttributeProto> attr;  // an integer attribute set to an edge value
};

std::string describe(const Case& c) {
  std::ostringstream s;
  s << (c.schema->domain().empty() ? "ai.onnx" : c.schema->domain()) << "::" << c.schema->Name() << "-"
    << c.schema->SinceVersion() << " input ranks (";
  for (size_t i = 0; i < c.ranks.size(); ++i)
    s << (i ? "," : "") << (c.ranks[i] == kLongVector ? "[2^31]" : std::to_string(c.ranks[i]));
  s << ")";
  if (c.ranks.size() < c.schema->inputs().size()) s << " optional inputs left off";
  if (c.attr) {
    s << " " << c.attr->name() << "=";
    if (c.attr->type() == onnx::AttributeProto::INT) {
      s << c.attr->i();
    } else {
      s << "[";
      for (int i = 0; i < c.attr->ints_size(); ++i) s << (i ? "," : "") << c.attr->ints(i);
      s << "]";
    }
  }
  return s.str();
}

// The one-node model of a case, or nothing when the schema cannot be instantiated from tensors alone.
bool build_model(const Case& c, onnx::ModelProto& m) {
  const onnx::OpSchema& schema = *c.schema;
  m.set_ir_version(8);
  auto* opset = m.add_opset_import();
  opset->set_domain(schema.domain());
  opset->set_version(schema.SinceVersion());
  if (!schema.domain().empty()) {  // the default domain too: memplan reads every node's opset
    auto* d = m.add_opset_import();
    d->set_domain("");
    d->set_version(17);
  }
  auto* g = m.mutable_graph();
  g->set_name("sweep");
  onnx::NodeProto* node = g->add_node();
  node->set_op_type(schema.Name());
  node->set_domain(schema.domain());
  node->set_name("n");
  if (!fill_required_attributes(schema, *node)) return false;
  if (c.attr) {
    bool replaced = false;
    for (auto& a : *node->mutable_attribute())
      if (a.name() == c.attr->name()) a = *c.attr, replaced = true;
    if (!replaced) *node->add_attribute() = *c.attr;
  }
  const auto& formals = schema.inputs();
  for (size_t i = 0; i < c.ranks.size(); ++i) {
    const int32_t type = element_type(schema, formals[i]);
    if (type == onnx::TensorProto::UNDEFINED) {
      if (formals[i].GetOption() == onnx::OpSchema::Optional) {
        node->add_input("");
        continue;
      }
      return false;
    }
    const std::string name = "x" + std::to_string(i);
    node->add_input(name);
    auto* in = g->add_input();
    in->set_name(name);
    auto* t = in->mutable_type()->mutable_tensor_type();
    t->set_elem_type(type);
    auto* shape = t->mutable_shape();
    if (c.ranks[i] == kLongVector) shape->add_dim()->set_dim_value(kLongVectorLength);
    for (int d = 0; d < c.ranks[i]; ++d) shape->add_dim()->set_dim_value(kDim);
  }
  for (size_t i = 0; i < schema.outputs().size(); ++i) {
    const std::string name = "y" + std::to_string(i);
    node->add_output(name);
    g->add_output()->set_name(name);
  }
  return true;
}

// Runs infer_shapes on each of `models` in turn in one child, each under its own alarm. Returns "" when the child
// ended well, else what went wrong. One child a schema, not a case: a fork is the sweep's main cost under ASan
// (each copies the sanitizer's page tables); a batch that fails is run again a case a child to name the case.
std::string run_in_child(const std::vector<onnx::ModelProto>& models) {
  const pid_t pid = fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    for (const onnx::ModelProto& m : models) {
      alarm(kChildSeconds);
      try {
        infer_shapes(m, Bindings{});
      } catch (const InputError&) {
      } catch (const std::exception& e) {
        std::fprintf(stderr, "  unexpected exception: %s\n", e.what());
        _exit(3);
      }
    }
    _exit(0);
  }
  // Wait, killing the child once it holds more than kChildRssLimitKiB (a 169-byte ConstantOfShape model
  // once made ONNX build a 2^31-dimension shape: 20 GB).
  int status = 0;
  const std::string statm = "/proc/" + std::to_string(pid) + "/statm";
  const int64_t page_kib = sysconf(_SC_PAGESIZE) / 1024;
  bool out_of_memory = false;
  int poll_us = 50;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    long pages = 0, resident = 0;
    if (FILE* f = std::fopen(statm.c_str(), "r")) {
      if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
      std::fclose(f);
    }
    if (resident * page_kib > kChildRssLimitKiB) {
      out_of_memory = true;
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    usleep(poll_us);
    poll_us = std::min(poll_us * 2, 10000);  // most children end within a millisecond
  }
  if (out_of_memory) return "more than " + std::to_string(kChildRssLimitKiB >> 20) + " GiB resident";
  if (WIFSIGNALED(status))
    return WTERMSIG(status) == SIGALRM ? "no result after " + std::to_string(kChildSeconds) + " s"
                                       : "killed by signal " + std::to_string(WTERMSIG(status));
  if (WEXITSTATUS(status) != 0) return "exit " + std::to_string(WEXITSTATUS(status));
  return "";
}

// Rank patterns for n inputs: all equal to r (r = 0..5), and each input alone at r, or a 1-D tensor of 2^31
// elements, with the others at 4.
std::vector<std::vector<int>> rank_patterns(size_t n) {
  std::set<std::vector<int>> patterns;
  for (int r = 0; r <= kMaxRank; ++r) patterns.insert(std::vector<int>(n, r));
  for (size_t i = 0; i < n; ++i)
    for (int r = kLongVector; r <= kMaxRank; ++r) {
      std::vector<int> p(n, 4);
      p[i] = r;
      patterns.insert(p);
    }
  return {patterns.begin(), patterns.end()};
}

// How many leading inputs a node must give: the formal inputs up to the last that is not optional. ONNX's
// inference functions take a missing trailing input as "not given" (MaxUnpool-11 then reads its output shape
// from X and I alone), a path the cases with every input given never take.
size_t required_inputs(const onnx::OpSchema& schema) {
  const auto& formals = schema.inputs();
  size_t n = formals.size();
  while (n > 0 && formals[n - 1].GetOption() == onnx::OpSchema::Optional) --n;
  return n;
}

// Edge values for each integer attribute (axis, perm, pads, strides, blocksize...), inputs at rank 4:
// negative, zero, past any rank, and a list longer than any rank.
std::vector<onnx::AttributeProto> attribute_edges(const onnx::OpSchema& schema) {
  std::vector<onnx::AttributeProto> edges;
  for (const auto& [name, attr] : schema.attributes()) {
    if (attr.type == onnx::AttributeProto::INT) {
      for (int64_t v : {-9, -1, 0, 2, 9}) {
        onnx::AttributeProto& a = edges.emplace_back();
        a.set_name(name);
        a.set_type(attr.type);
        a.set_i(v);
      }
    } else if (attr.type == onnx::AttributeProto::INTS) {
      for (const std::vector<int64_t>& v : std::vector<std::vector<int64_t>>{
               {}, {-9}, {0}, {9}, {2, 2, 2, 2, 2, 2, 2, 2, 2}}) {
        onnx::AttributeProto& a = edges.emplace_back();
        a.set_name(name);
        a.set_type(attr.type);
        for (int64_t x : v) a.add_ints(x);
      }
    }
  }
  return edges;
}

TEST(SchemaRankSweep, EveryOnnxSchemaEndsInAResultOrAnInputErrorAtEveryInputRank) {
  size_t schemas = 0, cases = 0;
  std::vector<std::string> findings;
  for (const onnx::OpSchema& schema : onnx::OpSchemaRegistry::get_all_schemas_with_history()) {
    if (!schema.has_type_and_shape_inference_function() || schema.Deprecated()) continue;
    ++schemas;
    std::vector<Case> all;
    for (const auto& ranks : rank_patterns(schema.inputs().size())) all.push_back({&schema, ranks, std::nullopt});
    if (const size_t required = required_inputs(schema); required < schema.inputs().size())
      for (const auto& ranks : rank_patterns(required)) all.push_back({&schema, ranks, std::nullopt});
    for (const auto& a : attribute_edges(schema))
      all.push_back({&schema, std::vector<int>(schema.inputs().size(), 4), a});
    std::vector<onnx::ModelProto> models;
    for (const Case& c : all) {
      if (!build_model(c, models.emplace_back())) {
        models.pop_back();
        break;
      }
    }
    cases += models.size();
    if (models.empty() || run_in_child(models).empty()) continue;
    for (size_t i = 0; i < models.size(); ++i)
      if (std::string what = run_in_child({models[i]}); !what.empty())
        findings.push_back(describe(all[i]) + ": " + what);
  }
  std::printf("%zu schemas, %zu one-node models, %zu findings\n", schemas, cases, findings.size());
  // ONNX 1.12 registers 386 schema versions that have an inference function and are not deprecated
  // (counted independently with python3-onnx 1.12: onnx.defs.get_all_schemas_with_history()).
  EXPECT_EQ(schemas, 386u);
  std::ostringstream all;
  for (const auto& f : findings) all << "\n  " << f;
  EXPECT_TRUE(findings.empty()) << findings.size() << " cases crashed or hung:" << all.str();
}

}  // namespace
}  // namespace memplan
