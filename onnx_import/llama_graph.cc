#include "onnx_import/llama_graph.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace memplan {
namespace {

using onnx::AttributeProto;
using onnx::TensorProto;

// Builds nodes with placeholder value names ("$N") and names them at the end as torch.onnx does
// (torch/onnx/utils.py, _jit_pass_onnx_assign_scoped_names_for_node_and_value): a node in a module scope is
// "<scope>/<Op>" then "<scope>/<Op>_1", ... per scope and op type, its outputs "<node>_output_<i>"; the
// Constants the exporter adds for a size list's Unsqueeze axes have no scope: "Constant_<node index>" with
// output "onnx::Unsqueeze_<node index + graph inputs + initializers>" (the JIT value's number).
class Emitter {
 public:
  struct Pending {
    onnx::NodeProto node;
    std::string scope;
    bool unscoped = false;  // an exporter-made Unsqueeze axes Constant
    int64_t pooled = 0;     // a pooled Python int: its value
    bool is_pooled = false, used = true;
  };

  std::string scope;  // the module scope new nodes go in ("" = the top module)

  // One node; returns its (first) output.
  std::string op(const std::string& type, std::vector<std::string> inputs, int outputs = 1) {
    Pending p;
    p.node.set_op_type(type);
    p.scope = scope;
    for (auto& in : inputs) p.node.add_input(std::move(in));
    std::string first;
    for (int i = 0; i < outputs; ++i) {
      const std::string v = "$" + std::to_string(next_value_++);
      p.node.add_output(v);
      if (i == 0) first = v;
    }
    nodes_.push_back(std::move(p));
    return first;
  }
  Emitter& ints(const std::string& name, const std::vector<int64_t>& values) {
    AttributeProto* a = last().add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::INTS);
    for (int64_t v : values) a->add_ints(v);
    return *this;
  }
  Emitter& i(const std::string& name, int64_t value) {
    AttributeProto* a = last().add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::INT);
    a->set_i(value);
    return *this;
  }
  Emitter& tensor(const std::string& name, int type, const std::vector<int64_t>& dims, const void* data, size_t bytes) {
    AttributeProto* a = last().add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::TENSOR);
    TensorProto* t = a->mutable_t();
    t->set_data_type(type);
    for (int64_t d : dims) t->add_dims(d);
    t->set_raw_data(std::string(static_cast<const char*>(data), bytes));  // little-endian, as torch writes it
    return *this;
  }
  std::string const_i64(std::vector<int64_t> values, bool scalar) {
    const std::string out = op("Constant", {});
    std::vector<int64_t> dims;
    if (!scalar) dims.push_back(int64_t(values.size()));
    tensor("value", TensorProto::INT64, dims, values.data(), values.size() * sizeof(int64_t));
    return out;
  }
  std::string const_f32(std::vector<float> values, std::vector<int64_t> dims) {
    const std::string out = op("Constant", {});
    tensor("value", TensorProto::FLOAT, dims, values.data(), values.size() * sizeof(float));
    return out;
  }

  // A Python int of the module's code, traced as a prim::Constant: the JIT pools equal ones into one, placed at
  // the first use in the scope of that use (torch/csrc/jit/passes/constant_pooling.cpp). It survives in the ONNX
  // graph only where a size list reads it; note() marks where it first appears, pooled() reads it.
  void note(int64_t value) {
    if (pool_.count(value)) return;
    const std::string out = const_i64({value}, true);
    Pending& p = nodes_.back();
    p.is_pooled = true;
    p.used = false;
    p.pooled = value;
    pool_[value] = nodes_.size() - 1;
  }
  std::string pooled(int64_t value) {
    note(value);
    Pending& p = nodes_[pool_.at(value)];
    p.used = true;
    return p.node.output(0);
  }

  // A view/reshape size list (b, s, ...): each element Unsqueezed on an unscoped axes Constant, then Concat.
  std::string size_list(const std::vector<std::string>& elements) {
    std::vector<std::string> parts;
    for (const std::string& e : elements) {
      const std::string axes = const_i64({0}, false);
      nodes_.back().unscoped = true;
      parts.push_back(op("Unsqueeze", {e, axes}));
    }
    const std::string out = op("Concat", parts);
    i("axis", 0);
    return out;
  }

  // Names every node and value; `fixed` renames a placeholder to a given name (the graph output).
  void finish(onnx::GraphProto& graph, int64_t value_offset, const std::map<std::string, std::string>& fixed) {
    std::map<std::string, std::string> names(fixed.begin(), fixed.end());
    std::map<std::string, int> counters;
    int index = 0;
    std::vector<onnx::NodeProto*> kept;
    for (Pending& p : nodes_) {
      if (!p.used) continue;
      onnx::NodeProto& n = p.node;
      if (p.unscoped) {
        n.set_name("Constant_" + std::to_string(index));
        names.emplace(n.output(0), "onnx::Unsqueeze_" + std::to_string(index + value_offset));
      } else {
        const int k = counters[p.scope + "/" + n.op_type()]++;
        n.set_name(p.scope + "/" + n.op_type() + (k ? "_" + std::to_string(k) : ""));
        for (int o = 0; o < n.output_size(); ++o)
          names.emplace(n.output(o), n.name() + "_output_" + std::to_string(o));
      }
      ++index;
    }
    auto rename = [&](std::string* v) {
      if (const auto it = names.find(*v); it != names.end()) *v = it->second;
    };
    for (Pending& p : nodes_) {
      if (!p.used) continue;
      for (auto& v : *p.node.mutable_input()) rename(&v);
      for (auto& v : *p.node.mutable_output()) rename(&v);
      graph.add_node()->Swap(&p.node);
    }
  }

 private:
  onnx::NodeProto& last() { return nodes_.back().node; }
  std::vector<Pending> nodes_;
  std::map<int64_t, size_t> pool_;
  int64_t next_value_ = 0;
};

class LlamaBuilder {
 public:
  LlamaBuilder(const DecoderConfig& c, onnx::GraphProto& g) : c_(c), g_(g) {}

  void build() {
    e_.scope = "";
    const std::string shape = e_.op("Shape", {"input_ids"});
    const std::string seq = e_.op("Gather", {shape, e_.const_i64({1}, true)});
    e_.i("axis", 0);
    e_.scope = "/embed_tokens";
    std::string x = e_.op("Gather", {param("embed_tokens.weight", {c_.vocab_size, c_.hidden_size}), "input_ids"});
    e_.scope = "";
    rotary_and_mask(seq);
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) x = layer(l, x);
    x = rms_norm("/norm", "norm.weight", x);
    std::string logits;
    if (c_.tie_word_embeddings) {  // F.linear(x, embed_tokens.weight) in the top module
      e_.scope = "";
      logits = e_.op("MatMul", {x, transpose_weight("embed_tokens.weight")});
    } else {
      e_.scope = "/lm_head";
      logits = e_.op("MatMul", {x, transpose_weight(param("lm_head.weight", {c_.vocab_size, c_.hidden_size}))});
    }
    logits_ = logits;
  }
  const std::string& logits() const { return logits_; }
  Emitter& emitter() { return e_; }
  int64_t initializers() const { return g_.initializer_size(); }

 private:
  // A weight-less float32 parameter, as tests/models/export_llama.py's point_at_missing_data leaves it.
  std::string param(const std::string& name, const std::vector<int64_t>& dims) {
    TensorProto* t = g_.add_initializer();
    t->set_name(name);
    t->set_data_type(TensorProto::FLOAT);
    int64_t count = 1;
    for (int64_t d : dims) t->add_dims(d), count *= d;
    t->set_data_location(TensorProto::EXTERNAL);
    const int64_t length = count * 4;
    for (auto [key, value] : {std::pair<std::string, std::string>{"location", "config.onnx.data"},
                              {"offset", std::to_string(offset_)}, {"length", std::to_string(length)}}) {
      auto* entry = t->add_external_data();
      entry->set_key(key);
      entry->set_value(value);
    }
    offset_ += (length + 4095) / 4096 * 4096;  // onnx's external_data_helper aligns offsets to 4 KiB
    return name;
  }
  std::string transpose_weight(const std::string& weight) {
    const std::string t = e_.op("Transpose", {weight});
    e_.ints("perm", {1, 0});
    return t;
  }
  // nn.Linear on a 3-D input: Transpose, MatMul, and Add(bias, ·) with a bias (torch/onnx/symbolic_opset9.py linear).
  std::string linear(const std::string& scope, const std::string& prefix, const std::string& x, int64_t in,
                     int64_t out, bool bias) {
    const std::string saved = e_.scope;
    e_.scope = scope;
    std::string y = e_.op("MatMul", {x, transpose_weight(param(prefix + ".weight", {out, in}))});
    if (bias) y = e_.op("Add", {param(prefix + ".bias", {out}), y});
    e_.scope = saved;
    return y;
  }

  // Llama.forward's rotary tables (rotary_cos_sin) and causal mask (causal_additive_mask).
  void rotary_and_mask(const std::string& seq) {
    const std::string n = e_.op("Cast", {seq});
    e_.i("to", TensorProto::INT64);
    const std::string zero = e_.const_i64({0}, true), one = e_.const_i64({1}, true);
    const std::string range = e_.op("Range", {zero, n, one});
    e_.note(6);  // .to(torch.float32): ScalarType Float is 6 (c10/core/ScalarType.h)
    const std::string positions = e_.op("Cast", {range});
    e_.i("to", TensorProto::FLOAT);
    const std::string column = e_.op("Unsqueeze", {positions, e_.const_i64({1}, false)});
    // inv_freq = 1 / theta^(arange(0, head_dim, 2) / head_dim) in float32 (LlamaRotaryEmbedding), folded by the
    // tracer into one (1, head_dim / 2) constant.
    std::vector<float> inv;
    for (int64_t k = 0; k < c_.head_dim; k += 2) {
      const float exponent = float(k) / float(c_.head_dim);
      inv.push_back(1.0f / float(std::pow(double(float(c_.rope_theta)), double(exponent))));
    }
    const std::string freqs = e_.op("Mul", {column, e_.const_f32(inv, {1, int64_t(inv.size())})});
    const std::string emb = e_.op("Concat", {freqs, freqs});
    e_.i("axis", -1);
    cos_ = e_.op("Cos", {emb});
    sin_ = e_.op("Sin", {emb});
    const std::string rows = e_.op("Unsqueeze", {range, e_.const_i64({0}, false)});
    const std::string cols = e_.op("Unsqueeze", {range, e_.const_i64({1}, false)});
    const std::string future = e_.op("Greater", {rows, cols});
    const std::string zeros = e_.op("ConstantOfShape", {e_.size_list({seq, seq})});
    const float zero_f = 0.0f;
    e_.tensor("value", TensorProto::FLOAT, {1}, &zero_f, 4);
    const std::string blocked = e_.op("Cast", {future});
    e_.i("to", TensorProto::BOOL);
    mask_ = e_.op("Where", {blocked, e_.const_f32({-std::numeric_limits<float>::infinity()}, {}), zeros});
  }

  // RMSNorm.forward: weight * (x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)); rsqrt exports as 1 / Sqrt.
  std::string rms_norm(const std::string& scope, const std::string& weight, const std::string& x) {
    e_.scope = scope;
    e_.note(2);  // x.pow(2)
    const std::string sq = e_.op("Pow", {x, e_.const_f32({2.0f}, {})});
    const std::string mean = e_.op("ReduceMean", {sq});
    e_.ints("axes", {-1}).i("keepdims", 1);
    const std::string var = e_.op("Add", {mean, e_.const_f32({float(c_.rms_norm_eps)}, {})});
    const std::string root = e_.op("Sqrt", {var});
    const std::string inv = e_.op("Div", {e_.const_f32({1.0f}, {}), root});
    const std::string y = e_.op("Mul", {x, inv});
    return e_.op("Mul", {param(weight, {c_.hidden_size}), y});
  }

  // rotate_half(x) = cat(-x[..., half:], x[..., :half]); returns x * cos + rotate_half(x) * sin.
  std::string rotary(const std::string& x) {
    const int64_t half = c_.head_dim / 2;
    const std::string cos = e_.op("Mul", {x, cos_});
    e_.note(3), e_.note(half);
    auto slice = [&](int64_t start, int64_t end) {
      const std::string axes = e_.const_i64({3}, false), starts = e_.const_i64({start}, false);
      const std::string ends = e_.const_i64({end}, false), steps = e_.const_i64({1}, false);
      return e_.op("Slice", {x, starts, ends, axes, steps});
    };
    const std::string upper = e_.op("Neg", {slice(half, std::numeric_limits<int64_t>::max())});
    const std::string lower = slice(0, half);
    const std::string rotated = e_.op("Concat", {upper, lower});
    e_.i("axis", -1);
    return e_.op("Add", {cos, e_.op("Mul", {rotated, sin_})});
  }

  // repeat_kv's x[:, :, None].expand(b, kv, n_rep, s, d): the expand symbolic's own (scoped) axes Constants and
  // its -1 handling (torch/onnx/symbolic_opset9.py expand).
  std::string expand_kv(const std::string& x) {
    const int64_t n_rep = c_.num_attention_heads / c_.num_key_value_heads;
    const std::string x5 = e_.op("Unsqueeze", {x, e_.const_i64({2}, false)});
    e_.note(c_.num_key_value_heads), e_.note(n_rep), e_.note(c_.head_dim);
    std::vector<std::string> parts;
    for (const std::string& v : {b_, e_.pooled(c_.num_key_value_heads), e_.pooled(n_rep), s_, e_.pooled(c_.head_dim)})
      parts.push_back(e_.op("Unsqueeze", {v, e_.const_i64({0}, false)}));
    const std::string list = e_.op("Concat", parts);
    e_.i("axis", 0);
    const std::string sizes = e_.op("Reshape", {list, e_.const_i64({-1}, false)});
    e_.i("allowzero", 0);
    const std::string ones = e_.op("ConstantOfShape", {e_.op("Shape", {sizes})});
    const int64_t one = 1;
    e_.tensor("value", TensorProto::INT64, {1}, &one, 8);
    const std::string minus = e_.op("Mul", {ones, e_.const_i64({-1}, true)});
    const std::string where = e_.op("Where", {e_.op("Equal", {sizes, minus}), ones, sizes});
    return e_.op("Expand", {x5, where});
  }

  std::string reshape(const std::string& x, const std::string& shape) {
    const std::string y = e_.op("Reshape", {x, shape});
    e_.i("allowzero", 0);
    return y;
  }
  std::string transpose(const std::string& x, std::vector<int64_t> perm) {
    const std::string y = e_.op("Transpose", {x});
    e_.ints("perm", perm);
    return y;
  }

  std::string attention(const std::string& layer, const std::string& x) {
    const std::string a = layer + "/self_attn", p = "layers." + layer.substr(8) + ".self_attn.";
    e_.scope = a;
    const int64_t h = c_.hidden_size, hd = c_.head_dim, heads = c_.num_attention_heads, kv = c_.num_key_value_heads;
    b_ = e_.op("Gather", {e_.op("Shape", {x}), e_.const_i64({0}, true)});
    e_.i("axis", 0);
    s_ = e_.op("Gather", {e_.op("Shape", {x}), e_.const_i64({1}, true)});
    e_.i("axis", 0);
    // view(b, s, heads, hd) and view(b, s, kv, hd): the JIT merges equal size lists, so a list equal to an
    // earlier one is built there, one copy per view, in the views' order.
    const std::string q = linear(a + "/q_proj", p + "q_proj", x, h, heads * hd, c_.qkv_bias);
    e_.note(heads), e_.note(hd);
    std::vector<std::string> views;
    auto view_list = [&](int64_t n) { return e_.size_list({b_, s_, e_.pooled(n), e_.pooled(hd)}); };
    views.push_back(view_list(heads));
    if (kv == heads) views.push_back(view_list(kv)), views.push_back(view_list(kv));
    const std::string q4 = transpose(reshape(q, views[0]), {0, 2, 1, 3});
    const std::string k = linear(a + "/k_proj", p + "k_proj", x, h, kv * hd, c_.qkv_bias);
    e_.note(kv);
    if (kv != heads) views.push_back(view_list(kv)), views.push_back(view_list(kv));
    const std::string k4 = transpose(reshape(k, views[1]), {0, 2, 1, 3});
    const std::string v = linear(a + "/v_proj", p + "v_proj", x, h, kv * hd, c_.qkv_bias);
    const std::string v4 = transpose(reshape(v, views[2]), {0, 2, 1, 3});
    const std::string qr = rotary(q4), kr = rotary(k4);
    std::string keys = kr, values = v4;
    if (kv != heads) {
      const std::string ke = expand_kv(kr);
      e_.note(heads), e_.note(hd);
      const std::string k_list = e_.size_list({b_, e_.pooled(heads), s_, e_.pooled(hd)});
      const std::string v_list = e_.size_list({b_, e_.pooled(heads), s_, e_.pooled(hd)});
      keys = reshape(ke, k_list);
      values = reshape(expand_kv(v4), v_list);
    }
    const std::string scores = e_.op("MatMul", {qr, transpose(keys, {0, 1, 3, 2})});
    const float scale = float(std::sqrt(double(hd)));  // / math.sqrt(head_dim)
    const std::string masked = e_.op("Add", {e_.op("Div", {scores, e_.const_f32({scale}, {})}), mask_});
    const std::string probs = e_.op("Softmax", {masked});
    e_.i("axis", -1);
    const std::string context = transpose(e_.op("MatMul", {probs, values}), {0, 2, 1, 3});
    e_.note(heads * hd);
    const std::string merged = reshape(context, e_.size_list({b_, s_, e_.pooled(heads * hd)}));
    return linear(a + "/o_proj", p + "o_proj", merged, heads * hd, h, c_.o_bias);
  }

  std::string layer(int64_t l, const std::string& x) {
    const std::string scope = "/layers." + std::to_string(l), p = "layers." + std::to_string(l) + ".";
    const std::string attended = attention(scope, rms_norm(scope + "/input_layernorm", p + "input_layernorm.weight", x));
    e_.scope = scope;
    const std::string h1 = e_.op("Add", {x, attended});
    const std::string y = rms_norm(scope + "/post_attention_layernorm", p + "post_attention_layernorm.weight", h1);
    const std::string m = scope + "/mlp";
    const int64_t h = c_.hidden_size, f = c_.intermediate_size;
    const std::string gate = linear(m + "/gate_proj", p + "mlp.gate_proj", y, h, f, c_.mlp_bias);
    e_.scope = m;
    const std::string silu = e_.op("Mul", {gate, e_.op("Sigmoid", {gate})});
    const std::string up = linear(m + "/up_proj", p + "mlp.up_proj", y, h, f, c_.mlp_bias);
    e_.scope = m;
    const std::string product = e_.op("Mul", {silu, up});
    const std::string down = linear(m + "/down_proj", p + "mlp.down_proj", product, f, h, c_.mlp_bias);
    e_.scope = scope;
    return e_.op("Add", {h1, down});
  }

  const DecoderConfig& c_;
  onnx::GraphProto& g_;
  Emitter e_;
  std::string cos_, sin_, mask_, b_, s_, logits_;
  int64_t offset_ = 0;
};

void add_tensor_value(onnx::ValueInfoProto* v, const std::string& name, int type, const std::vector<std::string>& syms,
                      std::optional<int64_t> last) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(type);
  for (const std::string& s : syms) t->mutable_shape()->add_dim()->set_dim_param(s);
  if (last) t->mutable_shape()->add_dim()->set_dim_value(*last);
}

}  // namespace

void build_llama_train_graph(const DecoderConfig& config, onnx::ModelProto& model) {
  // torch.onnx.export's model header (torch/onnx/utils.py): IR version 8 and opset 17 for torch 1.13, graph
  // "torch_jit". The producer is memplan, which built it.
  model.set_ir_version(8);
  model.set_producer_name("memplan");
  model.set_producer_version("config.json");
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(17);
  onnx::GraphProto& g = *model.mutable_graph();
  g.set_name("torch_jit");
  add_tensor_value(g.add_input(), "input_ids", TensorProto::INT64, {"batch", "seq"}, std::nullopt);
  LlamaBuilder builder(config, g);
  builder.build();
  builder.emitter().finish(g, 1 + builder.initializers(), {{builder.logits(), "logits"}});
  add_tensor_value(g.add_output(), "logits", TensorProto::FLOAT, {"batch", "seq"}, config.vocab_size);
}

}  // namespace memplan
