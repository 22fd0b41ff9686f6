// GraphEmitter::fold_constants (onnx_import/graph_emitter.h): torch.onnx's constant folding of the graph's nodes.
#include <cstring>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "onnx_import/errors.h"
#include "onnx_import/graph_emitter.h"

namespace memplan {

using onnx::AttributeProto;
using onnx::TensorProto;

void GraphEmitter::fold_constants(onnx::GraphProto& graph, int64_t next_number, Names& names) {
  std::unordered_map<std::string_view, const TensorProto*> params;  // views into the initializers' names
  params.reserve(size_t(graph.initializer_size()));
  for (const TensorProto& t : graph.initializer()) params[t.name()] = &t;
  auto param = [&](const std::string& name) -> const TensorProto* {
    const auto it = params.find(name);
    return it == params.end() ? nullptr : it->second;
  };
  std::vector<Pending*> constants(names.size(), nullptr);     // placeholder -> its Constant node
  std::vector<const std::string*> reader(names.size(), nullptr);  // placeholder -> the op type of its first reader
  for (Pending& p : nodes_)
    if (p.used)
      for (const std::string& in : p.node->input())
        if (const int64_t v = names.index(in); v >= 0 && !reader[size_t(v)]) reader[size_t(v)] = &p.node->op_type();
  auto reader_of = [&](const std::string& value) -> const std::string& {
    const int64_t v = names.index(value);
    if (v < 0 || !reader[size_t(v)]) throw InternalError("folding a node whose output nobody reads");
    return *reader[size_t(v)];
  };
  auto constant = [&](const std::string& value) -> Pending* {
    const int64_t v = names.index(value);
    return v < 0 ? nullptr : constants[size_t(v)];
  };
  // A folded initializer is appended to the graph's at once, on its arena (a copy from another arena would be a
  // deep one); the parameters before `originals` are filtered below.
  const int originals = graph.initializer_size();
  auto fold_copy = [&](const TensorProto& from) -> TensorProto& {
    TensorProto& t = *graph.add_initializer();
    t.CopyFrom(from);
    return t;
  };
  std::vector<std::pair<std::string, std::string>> copies;  // (folded copy, the parameter it transposes)
  std::unordered_map<std::string, std::string> cast_params;  // a float parameter's Cast to float -> the parameter
  auto first_read_by = [&](const std::string& value, const char* op) {
    const int64_t v = names.index(value);
    return v >= 0 && reader[size_t(v)] && *reader[size_t(v)] == op;
  };
  for (Pending& p : nodes_) {
    if (!p.used) continue;
    onnx::NodeProto& n = *p.node;
    if (n.op_type() == "Constant") {
      constants[size_t(names.index(n.output(0)))] = &p;
      continue;
    }
    if (n.op_type() == "Cast" && n.input_size() == 1 && param(n.input(0)) &&
        param(n.input(0))->data_type() == TensorProto::FLOAT && n.attribute_size() == 1 &&
        n.attribute(0).i() == TensorProto::FLOAT && first_read_by(n.output(0), "Transpose")) {
      // DeepseekV3TopkRouter's self.weight.type(torch.float32), a no-op Cast of a float32 parameter: folded into the
      // Transpose that reads it (below), its own folded value numbered and dropped, as torch.onnx's folding leaves it.
      cast_params[n.output(0)] = n.input(0);
      ++next_number;
      p.removed = true;
      continue;
    }
    if (n.op_type() == "Transpose" && n.input_size() == 1 &&
        (param(n.input(0)) || cast_params.count(n.input(0)))) {
      // A parameter's transposed copy becomes an initializer named after its reader (onnx::MatMul_<number>).
      const std::string source = cast_params.count(n.input(0)) ? cast_params.at(n.input(0)) : n.input(0);
      TensorProto& t = fold_copy(*param(source));
      t.set_name("onnx::" + reader_of(n.output(0)) + "_" + std::to_string(next_number++));
      // A 2-D weight's transpose, or a stack of them transposed per matrix (perm [0, 2, 1]: the grouped experts'
      // gate_up_proj.transpose(-2, -1), onnx_import/hf_moe_grouped.h).
      const int d = t.dims_size();
      const bool stacked = d == 3 && n.attribute_size() == 1 && n.attribute(0).name() == "perm" &&
                           n.attribute(0).ints_size() == 3 && n.attribute(0).ints(0) == 0 &&
                           n.attribute(0).ints(1) == 2 && n.attribute(0).ints(2) == 1;
      if (d != 2 && !stacked) throw InternalError("folding a Transpose of a parameter that is not 2-D");
      const int64_t rows = t.dims(d - 2);
      t.set_dims(d - 2, t.dims(d - 1));
      t.set_dims(d - 1, rows);
      names.set(n.output(0), t.name());
      copies.emplace_back(t.name(), source);
      p.removed = true;
    } else if (n.op_type() == "Add" && n.input_size() == 2 && param(n.input(0)) &&
               constant(n.input(1))) {
      // A parameter plus a scalar constant (Gemma's RMSNorm, weight + 1.0) becomes an initializer of the
      // parameter's shape named after its reader (onnx::Mul_<number>), numbered as a transposed copy is.
      if (constant(n.input(1))->node->attribute(0).t().dims_size() != 0)
        throw InternalError("folding an Add of a parameter and a constant that is not a scalar");
      TensorProto& t = fold_copy(*param(n.input(0)));
      t.set_name("onnx::" + reader_of(n.output(0)) + "_" + std::to_string(next_number++));
      names.set(n.output(0), t.name());
      p.removed = true;
    } else if (n.op_type() == "Unsqueeze" && n.input_size() == 2 && param(n.input(0)) &&
               constant(n.input(1))) {
      // A parameter unsqueezed (DeepSeek's e_score_correction_bias.unsqueeze(0)) becomes an initializer with the
      // new axis, named after its reader (onnx::Add_<number>), numbered as a transposed copy is.
      const TensorProto& axes = constant(n.input(1))->node->attribute(0).t();
      int64_t axis;
      if (axes.data_type() != TensorProto::INT64 || axes.raw_data().size() != sizeof axis)
        throw InternalError("folding an Unsqueeze of a parameter on more than one axis");
      std::memcpy(&axis, axes.raw_data().data(), sizeof axis);
      TensorProto& t = fold_copy(*param(n.input(0)));
      if (axis < 0 || axis > t.dims_size()) throw InternalError("folding an Unsqueeze of a parameter: bad axis");
      std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
      dims.insert(dims.begin() + axis, 1);
      t.clear_dims();
      for (int64_t d : dims) t.add_dims(d);
      t.set_name("onnx::" + reader_of(n.output(0)) + "_" + std::to_string(next_number++));
      names.set(n.output(0), t.name());
      p.removed = true;
    } else if ((n.op_type() == "Gather" || n.op_type() == "Reshape") && n.input_size() == 2 &&
               param(n.input(0)) && constant(n.input(1))) {
      // gpt_oss: a stacked parameter's slice by a scalar index (GptOssExperts' gate_up_proj[e]) or a parameter
      // reshaped (sinks.reshape(1, -1, 1, 1)) becomes an initializer named after its reader, as a transposed copy.
      const TensorProto& index = constant(n.input(1))->node->attribute(0).t();
      TensorProto& t = fold_copy(*param(n.input(0)));
      t.set_name("onnx::" + reader_of(n.output(0)) + "_" + std::to_string(next_number++));
      if (index.data_type() != TensorProto::INT64) throw InternalError("folding a " + n.op_type() + " by a non-int64");
      std::vector<int64_t> values(size_t(index.raw_data().size() / sizeof(int64_t)));
      std::memcpy(values.data(), index.raw_data().data(), values.size() * sizeof(int64_t));
      if (n.op_type() == "Gather") {
        if (index.dims_size() != 0 || t.dims_size() < 1) throw InternalError("folding a Gather that is not a select");
        t.mutable_dims()->erase(t.mutable_dims()->begin());
      } else {
        int64_t elements = 1, known = 1;
        for (int64_t d : t.dims()) elements *= d;
        for (int64_t v : values) known *= v == -1 ? 1 : v;
        t.clear_dims();
        for (int64_t v : values) t.add_dims(v == -1 ? elements / known : v);
      }
      names.set(n.output(0), t.name());
      p.removed = true;
    } else if ((n.op_type() == "Cast" && n.input_size() == 1 && constant(n.input(0))) ||
               (n.op_type() == "Shape" && n.input_size() == 1 && constant(n.input(0)))) {
      // Cast of a scalar to float: an int64 (scatter_'s scalar src, DeepSeek's router) or a Python float, double or
      // float (gpt_oss's clamp bounds); or Shape(1-D int64 constant) (expand's constant size list): a Constant of
      // the result, in the node's scope.
      const TensorProto& in = constant(n.input(0))->node->attribute(0).t();
      const bool cast = n.op_type() == "Cast";
      const size_t width = in.data_type() == TensorProto::INT64 || in.data_type() == TensorProto::DOUBLE ? 8
                           : in.data_type() == TensorProto::FLOAT                                          ? 4
                                                                                                           : 0;
      if ((cast ? width == 0 : in.data_type() != TensorProto::INT64) || in.dims_size() != (cast ? 0 : 1) ||
          (cast && (in.raw_data().size() != width || n.attribute_size() != 1 ||
                    n.attribute(0).i() != TensorProto::FLOAT)))
        throw InternalError("folding a " + n.op_type() + " of a constant memplan does not fold");
      std::string raw;
      std::vector<int64_t> dims;
      if (cast) {
        float f = 0;
        if (in.data_type() == TensorProto::INT64) {
          int64_t v;
          std::memcpy(&v, in.raw_data().data(), sizeof v);
          f = float(v);
        } else if (in.data_type() == TensorProto::DOUBLE) {
          double d;
          std::memcpy(&d, in.raw_data().data(), sizeof d);
          f = float(d);
        } else {
          std::memcpy(&f, in.raw_data().data(), sizeof f);
        }
        raw.assign(reinterpret_cast<const char*>(&f), sizeof f);
      } else {
        const int64_t rank = in.dims(0);
        raw.assign(reinterpret_cast<const char*>(&rank), sizeof rank);
        dims.push_back(1);
      }
      n.set_op_type("Constant");
      n.clear_input();
      n.clear_attribute();
      AttributeProto* a = n.add_attribute();
      a->set_name("value");
      a->set_type(AttributeProto::TENSOR);
      a->mutable_t()->set_data_type(cast ? TensorProto::FLOAT : TensorProto::INT64);
      for (int64_t d : dims) a->mutable_t()->add_dims(d);
      a->mutable_t()->set_raw_data(raw);
      constants[size_t(names.index(n.output(0)))] = &p;
      ++next_number;
    } else if ((n.op_type() == "Unsqueeze" || n.op_type() == "Reshape") && n.input_size() == 2 &&
               constant(n.input(0)) && constant(n.input(1))) {
      // Unsqueeze(scalar, [0]), or Reshape(scalar, [1]) (torch.topk's k, symbolic_opset11.py topk: the mixtures
      // of experts' router, hf_moe.cc): a 1-D Constant of the scalar's value, in the node's scope.
      const TensorProto& scalar = constant(n.input(0))->node->attribute(0).t();
      if (scalar.data_type() != TensorProto::INT64 || scalar.dims_size() != 0)
        throw InternalError("folding an " + n.op_type() + " of a constant that is not an int64 scalar");
      int64_t v;
      std::memcpy(&v, scalar.raw_data().data(), sizeof v);
      n.set_op_type("Constant");
      n.clear_input();
      n.clear_attribute();
      const std::vector<int64_t> one = {v};
      AttributeProto* a = n.add_attribute();
      a->set_name("value");
      a->set_type(AttributeProto::TENSOR);
      a->mutable_t()->set_data_type(TensorProto::INT64);
      a->mutable_t()->add_dims(1);
      a->mutable_t()->set_raw_data(std::string(reinterpret_cast<const char*>(one.data()), sizeof(int64_t)));
      constants[size_t(names.index(n.output(0)))] = &p;
      ++next_number;
    }
  }
  // What nobody reads any more: the pooled ints and axes Constants of folded nodes, the folded parameters.
  std::vector<bool> read_value(names.size(), false);  // placeholders read (and the graph outputs, folded copies)
  std::unordered_set<std::string_view> read_other;    // parameters and graph inputs read: views into the nodes
  for (size_t v = 0; v < names.size(); ++v) read_value[v] = names.has(int64_t(v));
  for (const Pending& p : nodes_)
    if (p.used && !p.removed)
      for (const std::string& in : p.node->input()) {
        if (const int64_t v = names.index(in); v >= 0) read_value[size_t(v)] = true;
        else read_other.insert(in);
      }
  for (const auto& [value, name] : names.others()) read_other.insert(value);
  auto read = [&](const std::string& name) {
    const int64_t v = names.index(name);
    return v >= 0 ? bool(read_value[size_t(v)]) : read_other.count(name) > 0;
  };
  for (Pending& p : nodes_)
    if (p.used && !p.removed && p.node->op_type() == "Constant" && !read(p.node->output(0))) p.removed = true;
  // The parameters still read, in their order, then every folded initializer in its: elements moved forward by
  // pointer (SwapElements), the rest deleted.
  google::protobuf::RepeatedPtrField<TensorProto>& inits = *graph.mutable_initializer();
  int kept = 0;
  for (int i = 0; i < inits.size(); ++i) {
    if (i < originals && !read(inits.Get(i).name())) continue;
    if (kept != i) inits.SwapElements(kept, i);
    ++kept;
  }
  inits.DeleteSubrange(kept, inits.size() - kept);
  for (const auto& [copy, param] : copies)
    if (read(param)) tied_copies_.emplace_back(copy, param);
}

}  // namespace memplan
