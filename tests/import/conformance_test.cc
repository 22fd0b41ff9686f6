// Conformance: memplan's shape inference against ONNX's own test models (Debian's libonnx-testdata 1.12).
//
// Every model under node/, pytorch-converted/, pytorch-operator/ and simple/ is read with memplan's
// reader, its declared shapes for outputs and value_info are stripped, the integer and bool inputs that
// have test data (pads, shapes, axes, indices, conditions) and the float inputs that size a Resize/Upsample
// (scales, roi) become initializers, as they are in exported models, and the remaining inputs' shapes are
// bound from their test data (--input NAME=SHAPE). The inferred dtype and shape of every graph output are
// then compared with test_data_set_0/output_*.pb, which ONNX's reference implementation produced: an
// independent source of truth. At least 99% of the models that are not excluded below must match.
// Sequence and optional inputs (SequenceProto / OptionalProto test data) are bound with their tensors'
// shapes (Bindings::sequence_inputs, optional_inputs); sequence and optional outputs are compared tensor by
// tensor (element type, each shape, and whether an optional holds a value).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "onnx/onnx-data_pb.h"
#include "onnx/onnx_pb.h"
#include "onnx_import/errors.h"
#include "onnx_import/model_reader.h"
#include "onnx_import/shape_inference.h"

namespace memplan {
namespace {

namespace fs = std::filesystem;

const char* kTestDataRoot = "/usr/share/libonnx-testdata/data";

// Models left out, each with its reason. Output shapes that depend on floating-point data values cannot
// be known statically; everything else must be inferred.
const std::map<std::string, std::string>& excluded() {
  static const std::map<std::string, std::string> list = {
      {"node/test_nonzero_example", "NonZero: the output length is the number of non-zero float values"},
      {"node/test_unique_not_sorted_without_axis", "Unique: the output length depends on the float values"},
      {"node/test_unique_sorted_with_axis", "Unique: the output length depends on the float values"},
      {"node/test_unique_sorted_with_axis_3d", "Unique: the output length depends on the float values"},
      {"node/test_unique_sorted_with_negative_axis", "Unique: the output length depends on the float values"},
      {"node/test_unique_sorted_without_axis", "Unique: the output length depends on the float values"},
      {"node/test_nonmaxsuppression_center_point_box_format", "NonMaxSuppression: the number of kept boxes depends on float scores"},
      {"node/test_nonmaxsuppression_flipped_coordinates", "NonMaxSuppression: the number of kept boxes depends on float scores"},
      {"node/test_nonmaxsuppression_identical_boxes", "NonMaxSuppression: the number of kept boxes depends on float scores"},
      {"node/test_nonmaxsuppression_limit_output_size", "NonMaxSuppression: the number of kept boxes depends on float scores"},
      {"node/test_nonmaxsuppression_single_box", "NonMaxSuppression: the number of kept boxes depends on float scores"},
      {"node/test_nonmaxsuppression_suppress_by_IOU", "NonMaxSuppression: the number of kept boxes depends on float scores"},
      {"node/test_nonmaxsuppression_suppress_by_IOU_and_scores", "NonMaxSuppression: the number of kept boxes depends on float scores"},
      {"node/test_nonmaxsuppression_two_batches", "NonMaxSuppression: the number of kept boxes depends on float scores"},
      {"node/test_nonmaxsuppression_two_classes", "NonMaxSuppression: the number of kept boxes depends on float scores"},
      {"node/test_range_float_type_positive_delta", "Range over float start/limit/delta inputs: the length depends on float values"},
      {"node/test_range_float_type_positive_delta_expanded", "Range over float start/limit/delta inputs: the length depends on float values"},
      {"node/test_strnormalizer_export_monday_casesensintive_lower", "StringNormalizer with stopwords: the kept count depends on the strings"},
      {"node/test_strnormalizer_export_monday_casesensintive_nochangecase", "StringNormalizer with stopwords: the kept count depends on the strings"},
      {"node/test_strnormalizer_export_monday_casesensintive_upper", "StringNormalizer with stopwords: the kept count depends on the strings"},
      {"node/test_strnormalizer_export_monday_empty_output", "StringNormalizer with stopwords: the kept count depends on the strings"},
      {"node/test_strnormalizer_export_monday_insensintive_upper_twodim", "StringNormalizer with stopwords: the kept count depends on the strings"},
      {"simple/test_strnorm_model_monday_casesensintive_lower", "StringNormalizer with stopwords: the kept count depends on the strings"},
      {"simple/test_strnorm_model_monday_casesensintive_nochangecase", "StringNormalizer with stopwords: the kept count depends on the strings"},
      {"simple/test_strnorm_model_monday_casesensintive_upper", "StringNormalizer with stopwords: the kept count depends on the strings"},
      {"simple/test_strnorm_model_monday_empty_output", "StringNormalizer with stopwords: the kept count depends on the strings"},
      {"simple/test_strnorm_model_monday_insensintive_upper_twodim", "StringNormalizer with stopwords: the kept count depends on the strings"},
  };
  return list;
}

template <typename Proto = onnx::TensorProto>
Proto read_proto(const fs::path& path) {
  Proto t;
  std::ifstream in(path, std::ios::binary);
  if (!in || !t.ParseFromIstream(&in)) throw std::runtime_error("cannot parse " + path.string());
  return t;
}
onnx::TensorProto read_tensor(const fs::path& path) { return read_proto<onnx::TensorProto>(path); }

std::vector<int64_t> dims_of(const onnx::TensorProto& t) { return {t.dims().begin(), t.dims().end()}; }

// The shapes of a SequenceProto's tensors, and their element type (UNDEFINED for an empty sequence).
std::vector<std::vector<int64_t>> sequence_shapes(const onnx::SequenceProto& s, int32_t* elem = nullptr) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& t : s.tensor_values()) {
    out.push_back(dims_of(t));
    if (elem) *elem = t.data_type();
  }
  return out;
}

// What an OptionalProto holds: nullopt when nothing, else its tensor's shape or its sequence's shapes.
std::optional<std::vector<std::vector<int64_t>>> optional_shapes(const onnx::OptionalProto& o, int32_t* elem = nullptr) {
  if (o.has_tensor_value()) {
    if (elem) *elem = o.tensor_value().data_type();
    return std::vector<std::vector<int64_t>>{dims_of(o.tensor_value())};
  }
  if (o.has_sequence_value()) return sequence_shapes(o.sequence_value(), elem);
  return std::nullopt;
}

bool is_integer_or_bool(int32_t code) {
  const auto t = dtype_from_onnx(code);
  return t && (*t == DType::Bool || *t == DType::Int8 || *t == DType::Int16 || *t == DType::Int32 ||
               *t == DType::Int64 || *t == DType::UInt8 || *t == DType::UInt16 || *t == DType::UInt32 ||
               *t == DType::UInt64);
}

bool is_tensor_typed(const onnx::ValueInfoProto& vi) { return vi.type().has_tensor_type(); }
bool is_container_typed(const onnx::ValueInfoProto& vi) {
  return vi.type().has_sequence_type() || vi.type().has_optional_type();
}

bool compatible(const onnx::ValueInfoProto& vi, const std::vector<int64_t>& shape) {
  const auto& tt = vi.type().tensor_type();
  if (!tt.has_shape()) return true;
  if (tt.shape().dim_size() != static_cast<int>(shape.size())) return false;
  for (size_t a = 0; a < shape.size(); ++a) {
    const auto& d = tt.shape().dim(static_cast<int>(a));
    if (d.has_dim_value() && d.dim_value() != shape[a]) return false;
  }
  return true;
}

// Removes every declared shape the inference could lean on: value_info, output shapes (subgraphs too).
void strip_declared_shapes(onnx::GraphProto& g) {
  g.clear_value_info();
  for (auto& o : *g.mutable_output())
    if (o.type().has_tensor_type()) o.mutable_type()->mutable_tensor_type()->clear_shape();
  for (auto& n : *g.mutable_node())
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) strip_declared_shapes(*a.mutable_g());
      for (auto& sub : *a.mutable_graphs()) strip_declared_shapes(sub);
    }
}

// Float inputs that size an output: Resize/Upsample scales and roi, and OneHot's depth (any numeric
// type in the spec; float in these tests). Exported models hold them as constants.
std::set<std::string> resize_size_inputs(const onnx::ModelProto& m) {
  int opset = 0;
  for (const auto& o : m.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = static_cast<int>(o.version());
  std::set<std::string> names;
  for (const auto& n : m.graph().node()) {
    if (n.op_type() == "Upsample" || (n.op_type() == "Resize" && opset < 11)) {
      if (n.input_size() > 1) names.insert(n.input(1));
    } else if (n.op_type() == "Resize") {
      for (int i = 1; i < std::min(n.input_size(), 3); ++i) names.insert(n.input(i));
    } else if (n.op_type() == "OneHot" && n.input_size() > 1) {
      names.insert(n.input(1));
    }
  }
  return names;
}

std::string shape_str(DType t, const std::vector<int64_t>& s) {
  std::string out = std::string(dtype_name(t)) + "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

struct Outcome {
  enum { Pass, Fail, Excluded } status = Pass;
  std::string detail;
};

Outcome check_model(const fs::path& dir) {
  const fs::path data = dir / "test_data_set_0";
  onnx::ModelProto model = read_model_file((dir / "model.onnx").string()).proto;
  onnx::GraphProto& g = *model.mutable_graph();
  for (const auto& vi : g.input())
    if (!is_tensor_typed(vi) && !is_container_typed(vi)) return {Outcome::Excluded, "an input is a map, not a tensor"};
  for (const auto& vi : g.output())
    if (!is_tensor_typed(vi) && !is_container_typed(vi)) return {Outcome::Excluded, "an output is a map, not a tensor"};
  std::map<std::string, int32_t> declared_output_types;
  std::map<std::string, onnx::TypeProto> declared_types;
  for (const auto& o : g.output()) {
    declared_output_types[o.name()] = o.type().tensor_type().elem_type();
    declared_types[o.name()] = o.type();
  }
  strip_declared_shapes(g);

  std::set<std::string> initializers;
  for (const auto& i : g.initializer()) initializers.insert(i.name());
  std::vector<std::string> runtime_inputs;
  for (const auto& vi : g.input())
    if (!initializers.count(vi.name())) runtime_inputs.push_back(vi.name());

  const auto size_inputs = resize_size_inputs(model);
  Bindings bindings;
  std::set<std::string> to_initializers;
  for (size_t k = 0; k < runtime_inputs.size(); ++k) {
    const fs::path p = data / ("input_" + std::to_string(k) + ".pb");
    if (!fs::exists(p)) continue;  // an optional input the test leaves out
    const onnx::ValueInfoProto* declared = nullptr;
    for (const auto& vi : g.input())
      if (vi.name() == runtime_inputs[k]) declared = &vi;
    if (declared && declared->type().has_sequence_type()) {
      bindings.sequence_inputs[runtime_inputs[k]] = sequence_shapes(read_proto<onnx::SequenceProto>(p));
      continue;
    }
    if (declared && declared->type().has_optional_type()) {
      bindings.optional_inputs[runtime_inputs[k]] = optional_shapes(read_proto<onnx::OptionalProto>(p));
      continue;
    }
    onnx::TensorProto t = read_tensor(p);
    std::string name = runtime_inputs[k];
    if (!t.name().empty() && std::find(runtime_inputs.begin(), runtime_inputs.end(), t.name()) != runtime_inputs.end())
      name = t.name();
    for (const auto& vi : g.input())  // bfloat16 data is stored as uint16 bit patterns, as for outputs
      if (vi.name() == name && vi.type().tensor_type().elem_type() == dtype_to_onnx(DType::BFloat16))
        t.set_data_type(dtype_to_onnx(DType::BFloat16));
    if (is_integer_or_bool(t.data_type()) || size_inputs.count(name)) {
      t.set_name(name);
      *g.add_initializer() = t;
      to_initializers.insert(name);
    } else {
      bindings.input_shapes[name] = std::vector<int64_t>(t.dims().begin(), t.dims().end());
      // A few tests feed data whose rank or fixed dims contradict the declared shape (the castlike
      // bfloat16 tests): the reference ran on the data, so the data's shape wins.
      for (auto& vi : *g.mutable_input())
        if (vi.name() == name && !compatible(vi, bindings.input_shapes[name]))
          vi.mutable_type()->mutable_tensor_type()->clear_shape();
    }
  }
  // Inputs that became initializers leave the graph's input list, as in exported models.
  auto* inputs = g.mutable_input();
  inputs->erase(std::remove_if(inputs->begin(), inputs->end(),
                               [&](const onnx::ValueInfoProto& vi) { return to_initializers.count(vi.name()) > 0; }),
                inputs->end());

  InferenceResult r;
  try {
    r = infer_shapes(model, bindings);
  } catch (const InputError& e) {
    return {Outcome::Fail, e.what()};
  }
  std::string mismatches;
  for (int k = 0; k < g.output_size(); ++k) {
    const fs::path p = data / ("output_" + std::to_string(k) + ".pb");
    if (!fs::exists(p)) continue;
    const onnx::TypeProto& declared = declared_types[g.output(k).name()];
    if (declared.has_sequence_type() || declared.has_optional_type()) {
      int32_t elem = 0;
      std::optional<std::vector<std::vector<int64_t>>> want;
      if (declared.has_sequence_type()) want = sequence_shapes(read_proto<onnx::SequenceProto>(p), &elem);
      else want = optional_shapes(read_proto<onnx::OptionalProto>(p), &elem);
      const auto it = r.values.find(g.output(k).name());
      if (it == r.values.end()) {
        mismatches += " output '" + g.output(k).name() + "' missing;";
        continue;
      }
      const InferredValue& got = it->second;
      const ValueType want_type = declared.has_sequence_type() ? ValueType::Sequence : ValueType::Optional;
      const bool empty_optional = want_type == ValueType::Optional && !want;
      bool same = got.value_type == want_type && (empty_optional ? got.element_shapes.empty() && got.optional_of_sequence == (declared.optional_type().elem_type().has_sequence_type())
                                                                 : got.element_shapes == *want);
      // An empty sequence has no tensor to tell its element type; otherwise it must match.
      if (same && elem != 0) same = dtype_from_onnx(elem) == got.dtype;
      if (!same) {
        std::string w = want ? std::to_string(want->size()) + " tensors" : std::string("no value");
        if (want)
          for (const auto& sh : *want) w += " " + shape_str(dtype_from_onnx(elem).value_or(DType::Undefined), sh);
        std::string h = std::to_string(got.element_shapes.size()) + " tensors";
        for (const auto& sh : got.element_shapes) h += " " + shape_str(got.dtype, sh);
        mismatches += " output '" + g.output(k).name() + "': expected " + w + ", inferred " + h + ";";
      }
      continue;
    }
    const onnx::TensorProto expected = read_tensor(p);
    auto want_t = dtype_from_onnx(expected.data_type());
    // numpy has no bfloat16: ONNX stores bfloat16 test outputs as uint16 bit patterns.
    if (want_t == DType::UInt16 && declared_output_types[g.output(k).name()] == dtype_to_onnx(DType::BFloat16))
      want_t = DType::BFloat16;
    const std::vector<int64_t> want_s(expected.dims().begin(), expected.dims().end());
    const auto it = r.values.find(g.output(k).name());
    if (it == r.values.end()) {
      mismatches += " output '" + g.output(k).name() + "' missing;";
      continue;
    }
    if (!want_t || it->second.dtype != *want_t || it->second.shape != want_s)
      mismatches += " output '" + g.output(k).name() + "': expected " + shape_str(want_t.value_or(DType::Undefined), want_s) +
                    ", inferred " + shape_str(it->second.dtype, it->second.shape) + ";";
  }
  if (!mismatches.empty()) return {Outcome::Fail, mismatches};
  return {};
}

TEST(Conformance, OnnxTestDataOutputsMatchInferredShapes) {
  if (!fs::exists(kTestDataRoot)) GTEST_SKIP() << "libonnx-testdata is not installed (scripts/setup.sh installs it)";
  const auto start = std::chrono::steady_clock::now();
  std::vector<fs::path> models;
  for (const char* suite : {"node", "pytorch-converted", "pytorch-operator", "simple"}) {
    const fs::path root = fs::path(kTestDataRoot) / suite;
    if (!fs::exists(root)) continue;
    for (const auto& entry : fs::directory_iterator(root))
      if (fs::exists(entry.path() / "model.onnx") && fs::exists(entry.path() / "test_data_set_0")) models.push_back(entry.path());
  }
  std::sort(models.begin(), models.end());
  ASSERT_GT(models.size(), 1000u) << "expected the full libonnx-testdata set";

  int passed = 0, failed = 0;
  std::vector<std::string> failures, exclusions;
  for (const auto& dir : models) {
    const std::string id = dir.parent_path().filename().string() + "/" + dir.filename().string();
    if (auto it = excluded().find(id); it != excluded().end()) {
      exclusions.push_back(id + ": " + it->second);
      continue;
    }
    Outcome o;
    try {
      o = check_model(dir);
    } catch (const std::exception& e) {
      o = {Outcome::Fail, std::string("exception: ") + e.what()};
    }
    if (o.status == Outcome::Excluded) exclusions.push_back(id + ": " + o.detail);
    else if (o.status == Outcome::Pass) ++passed;
    else {
      ++failed;
      failures.push_back(id + ":" + (o.detail.empty() ? "" : " ") + o.detail);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int total = passed + failed;
  const double rate = total ? 100.0 * passed / total : 0;
  std::printf("conformance: %d of %d models pass (%.2f%%), %zu excluded, %.1f s\n", passed, total, rate,
              exclusions.size(), seconds);
  for (const auto& e : exclusions) std::printf("  excluded %s\n", e.c_str());
  for (const auto& f : failures) std::printf("  FAIL %s\n", f.c_str());
  EXPECT_GE(rate, 99.0);
}

}  // namespace
}  // namespace memplan
