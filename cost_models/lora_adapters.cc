#include "cost_models/lora_adapters.h"

#include <algorithm>
#include <climits>
#include <map>
#include <optional>
#include <regex>
#include <string>

#include "cost_models/eager_semantics.h"
#include "cost_models/graph_facts.h"
#include "cost_models/graph_rewrite.h"
#include "cost_models/lora_parameters.h"
#include "cost_models/op_fusion_match.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {

namespace {

using fusion::in;
using fusion::op_is;
using fusion::out0;

// "layers.0.self_attn.q_proj.weight" -> "layers.0.self_attn.q_proj", the module PEFT wraps.
std::string module_of(const std::string& weight) {
  const std::string suffix = ".weight";
  if (weight.size() > suffix.size() && weight.compare(weight.size() - suffix.size(), suffix.size(), suffix) == 0)
    return weight.substr(0, weight.size() - suffix.size());
  return weight;
}

constexpr const char* kAdapterNames[] = {"lora_A", "lora_B"};

// The module scope torch.onnx.export names a node by ("/layers.0/self_attn/q_proj" for
// "/layers.0/self_attn/q_proj/MatMul"), or `fallback` for a name without one.
std::string node_scope(const std::string& node, const std::string& fallback) {
  const size_t slash = node.rfind('/');
  return slash == std::string::npos || slash == 0 ? fallback : node.substr(0, slash);
}

// PEFT's lora.Linear holds the Linear it adapts as `base_layer` (peft/tuners/lora/layer.py LoraLayer.__init__), so a
// PEFT model's export names the Linear's nodes under <module>/base_layer/: "/layers.0/self_attn/q_proj/MatMul"
// becomes "/layers.0/self_attn/q_proj/base_layer/MatMul". Module-scoped rules (DeepSpeed ZeRO-3's hooks) read it.
std::string in_base_layer(const std::string& node) {
  const std::string scope = node_scope(node, "");
  return scope.empty() ? node : scope + "/base_layer" + node.substr(scope.size());
}

class Builder {
 public:
  Builder(const Graph& base, const TrainingOptions& o, LoraGraph& out) : o_(o), out_(out) {
    out_.graph = base;
    out_.graph.nodes.clear();
    out_.adapter.assign(base.tensors.size(), false);
    out_.float32.assign(base.tensors.size(), false);
  }

  Graph& g() { return out_.graph; }

  int32_t tensor(const std::string& name, DType dtype, std::vector<int64_t> shape, TensorKind kind) {
    Tensor t;
    t.name = name;
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.kind = kind;
    g().tensors.push_back(std::move(t));
    out_.adapter.push_back(false);
    out_.float32.push_back(false);
    return static_cast<int32_t>(g().tensors.size()) - 1;
  }

  int32_t node(const std::string& name, const char* op, std::vector<int32_t> inputs, int32_t output, int opset) {
    Node n;
    n.name = name;
    n.op_type = op;
    n.opset = opset;
    n.inputs = std::move(inputs);
    n.outputs = {output};
    g().nodes.push_back(std::move(n));
    return output;
  }

  // A Constant scalar tensor `name`, its node `node_name` (the tensor's name when empty).
  int32_t scalar(const std::string& name, double value, int opset, const std::string& node_name = "") {
    const int32_t t = tensor(name, DType::Float32, {}, TensorKind::Activation);
    g().tensors[t].real_value = std::vector<double>{value};
    return node(node_name.empty() ? name : node_name, "Constant", {}, t, opset);
  }

  // The adapter ops after the Linear `t` whose result is `y`, their nodes named under the adapted module's scope `scope`
  // as a PEFT model's export names them (<scope>/lora_A/MatMul, <scope>/Mul, <scope>/Add; the tensors keep memplan's
  // names, /<module>/lora/...); returns the tensor that replaces y.
  int32_t adapt(const LinearSite& t, int32_t y, const std::string& scope, int opset) {
    const std::string m = module_of(g().tensors[t.weight].name);
    const Tensor x = g().tensors[t.x];
    const int64_t r = o_.lora_rank;
    const DType adapter_type = DType::Float32;  // nn.Linear's default; PEFT upcasts fp16/bf16 ones (below)
    // Under --precision fp16/bf16 (model.half()) the base computes in the half type while PEFT keeps the
    // adapters in float32: BaseTuner._cast_adapter_dtype (peft/tuners/tuners_utils.py, autocast_adapter_dtype
    // = True by default) "only upcasts float16 and bfloat16 to float32". So x is copied into float32
    // (_cast_input_dtype: x.to(lora_A.weight.dtype) when the dtypes differ), the adapter path and the sum
    // `result + ...` are float32 (type promotion), and result.to(torch_result_dtype) copies back.
    // --lora-dtype base (autocast_adapter_dtype=False, or PEFT before it existed): the adapters in the base's
    // half type, no copies.
    const bool half_base = is_half(o_.precision) && o_.lora_float32;
    // Under torch.autocast (--precision amp-*) the base weights and the adapters are float32 and
    // _cast_input_dtype (BaseTunerLayer, peft/tuners/tuners_utils.py: `if (not cast_input_dtype_enabled)
    // or (x.dtype == dtype): return x; return x.to(dtype=dtype)`; cast_input_dtype_enabled is True by
    // default) copies x into float32 only where autocast left it in the low type (an o_proj or down_proj
    // input, a low-precision matmul's output): a Cast that is Tensor.to returning self when x is float32
    // (ForwardAliasing), a fresh float32 copy otherwise. lora_A and lora_B are then F.linear under autocast
    // (aten/src/ATen/autocast_mode.cpp: linear is a lower_precision_fp op): the input is cast to the low
    // type again, each adapter weight once per forward into the autocast cache (cached_cast: a float32
    // leaf that requires grad), and the adapter path and `result + ...` run in the low type, so
    // result.to(torch_result_dtype) (the base's low-type result) is a no-op and no Cast_1 is written.
    // PEFT's bitsandbytes layers (peft/tuners/lora/bnb.py, Linear8bitLt/Linear4bit.forward) skip the cast
    // under autocast: `requires_conversion = not torch.is_autocast_enabled()`.
    // (The head, whose result is a graph output, stays an nn.Linear: frozen_storage.h.)
    const bool bnb_layer = (o_.frozen_storage == FrozenStorage::Int8 || o_.frozen_storage == FrozenStorage::Nf4) &&
                           !is_graph_output(g(), y);
    const bool amp_cast = is_amp(o_.precision) && !bnb_layer;
    // Under a mixed-precision policy (--fsdp2-mp with amp-*, accelerate's FSDP) the adapters are float32 shards but
    // the forward reads them gathered in param_dtype, so lora_A.weight.dtype is the low type: x.to(dtype) copies x
    // into it only where x is float32 (a Cast keeps the type it names, training_context.cc), and no autocast cast
    // follows. Autocast over a half base (--param-dtype bf16/fp16, the Trainer's bf16=True on a bf16 checkpoint):
    // PEFT's cast_adapter_dtype (peft/tuners/tuners_utils.py, huggingface/peft 5d602fd) still upcasts the adapters to
    // float32 (--lora-dtype float32), so x.to(float32) copies the half input and autocast casts it, and each adapter
    // weight, back to the low type for lora_A and lora_B as over a float32 base; with --lora-dtype base the adapters
    // are half like the base, x.to(dtype) returns x and autocast casts nothing.
    const bool float32_copy =
        half_base || (amp_cast && (compute_param_dtype(o_) == DType::Float32 || (o_.lora_float32 && !o_.fsdp2_mp)));
    auto lead = [&](int64_t last) {
      std::vector<int64_t> s = x.shape;
      s.back() = last;
      return s;
    };
    int32_t cur = t.x;
    if (half_base || amp_cast) {
      const int32_t copy = tensor("/" + m + "/lora/Cast_output_0", adapter_type, x.shape, TensorKind::Activation);
      g().nodes.push_back(cast_node(scope + "/Cast", cur, copy, adapter_type, opset));
      cur = copy;
      out_.float32[cur] = float32_copy;  // under autocast: float32 whatever x's type (assign_amp_dtypes)
    }
    // lora_dropout: nn.Dropout(p) when p > 0, else nn.Identity (LoraLayer.update_layer). A p = 0 Dropout
    // is what dropout_is_noop (eager_semantics) treats as the identity, so no node is needed for it.
    if (o_.lora_dropout > 0) {
      const std::string d = "/" + m + "/lora_dropout/Dropout", dn = scope + "/lora_dropout/Dropout";
      const int32_t y = tensor(d + "_output_0", adapter_type, x.shape, TensorKind::Activation);
      if (opset >= 12) {  // the ratio is an input from opset 12 on, an attribute before
        node(dn, "Dropout", {cur, scalar(d + "/Constant_output_0", o_.lora_dropout, opset, dn + "/Constant")}, y, opset);
      } else {
        node(dn, "Dropout", {cur}, y, opset);
        g().nodes.back().attributes["ratio"].type = Attribute::Type::Float;
        g().nodes.back().attributes["ratio"].f = static_cast<float>(o_.lora_dropout);
      }
      cur = y;
      out_.float32[cur] = float32_copy;  // nn.Dropout keeps the copy's type
    }
    auto linear = [&](const char* which, int64_t in_f, int64_t out_f, int32_t input) {
      const std::string p = m + "." + which;
      const int32_t w = tensor(p + ".weight", adapter_type, {out_f, in_f}, TensorKind::Weight);
      g().tensors[w].trainable = true;
      g().initializers.push_back(w);
      out_.adapter[w] = true;
      out_.float32[w] = o_.lora_float32;
      out_.adapter_parameters = checked_add(out_.adapter_parameters, checked_mul(static_cast<uint64_t>(in_f),
                                                                                static_cast<uint64_t>(out_f)),
                                            "LoRA parameter count");
      const std::string tensor_prefix = "/" + m + "/" + which, node_prefix = scope + "/" + which;
      const int32_t wt = node(node_prefix + "/Transpose", "Transpose", {w},
                              tensor(tensor_prefix + "/Transpose_output_0", adapter_type, {in_f, out_f},
                                     TensorKind::Activation), opset);
      g().nodes.back().attributes["perm"].type = Attribute::Type::Ints;
      g().nodes.back().attributes["perm"].ints = {1, 0};
      const int32_t o = node(node_prefix + "/MatMul", "MatMul", {input, wt},
                             tensor(tensor_prefix + "/MatMul_output_0", adapter_type, lead(out_f), TensorKind::Activation),
                             opset);
      out_.float32[wt] = out_.float32[o] = half_base;
      return o;
    };
    cur = linear(kAdapterNames[0], t.in_features, r, cur);
    cur = linear(kAdapterNames[1], r, t.out_features, cur);
    // scaling = lora_alpha / r; its value changes no memory. PEFT's default lora_alpha is 8 (LoraConfig).
    const int32_t scaling =
        scalar("/" + m + "/lora/Constant_output_0", 8.0 / static_cast<double>(r), opset, scope + "/Constant");
    const std::vector<int64_t> y_shape = g().tensors[y].shape;
    cur = node(scope + "/Mul", "Mul", {cur, scaling},
               tensor("/" + m + "/lora/Mul_output_0", adapter_type, y_shape, TensorKind::Activation), opset);
    out_.float32[cur] = half_base;
    const DType y_type = g().tensors[y].dtype;
    cur = node(scope + "/Add", "Add", {y, cur},
               tensor("/" + m + "/lora/Add_output_0", half_base ? adapter_type : y_type, y_shape, TensorKind::Activation),
               opset);
    out_.float32[cur] = half_base;
    if (half_base) {
      const int32_t back = tensor("/" + m + "/lora/Cast_1_output_0", y_type, y_shape, TensorKind::Activation);
      g().nodes.push_back(cast_node(scope + "/Cast_1", cur, back, y_type, opset));
      cur = back;
    }
    ++out_.adapted_layers;
    return cur;
  }

  // LoraConfig(target_parameters=[...]) on a stacked [E, d1, d2] parameter `w` (huggingface/peft 5d602fd,
  // 0.20.1.dev0, src/peft/tuners/lora/layer.py class ParamWrapper): the ops that compute W + delta once a forward,
  // before the parameter's first reader; returns the sum, which every reader of `w` then reads.
  //  - update_layer: lora_A = nn.Linear(in_features, r * E), lora_B = nn.Linear(r * E, out_features), no bias;
  //    in/out from _get_in_out_features (shape [E, in, out]), swapped when the base layer is not `is_transposed`
  //    (transformers' [E, out, in] experts: Qwen3MoeExperts, MixtralExperts, DeepSeek's); gpt_oss's experts are
  //    stored [E, in, out] and marked is_transposed (transformers' GptOssExperts). Either way A and B hold
  //    r·E·(d1 + d2) values; scaling = lora_alpha / r (PEFT's default lora_alpha 8, as adapt's). The adapters are
  //    float32 on a half base as lora.Linear's (cast_adapter_dtype, peft/tuners/tuners_utils.py).
  //  - get_delta_weight: weight_A.reshape(E, -1, in), weight_B.reshape(out, -1, E) (views), then
  //    torch.einsum("o r e, e r i -> e o i" (swapped) or "e i o", B, A) * scaling, .to(param.dtype). aten's einsum
  //    (aten/src/ATen/native/Linear.cpp, sumproduct_pair, pytorch/pytorch 006b3e6) permutes B to [E, out, r] and
  //    A to [E, r, in] (views), runs bmm -> [E, out, in] and permutes the result back (a view: [E, in, out] for
  //    "e i o"); BmmBackward keeps the two operand views (views of the adapters: no new memory).
  //  - _activate_lora: the delta is computed when the wrapper's forward begins, then
  //    register_parametrization(base_layer, name, _LoraParameterProxy(delta)) and the base layer's forward inside
  //    nn.utils.parametrize.cached(); remove_parametrizations when it returns. Two parameters of one module nest
  //    (_inject_parameters wraps them in the module's named_parameters order, each new ParamWrapper around the
  //    last), so the outer wrapper's delta, the last parameter's, is computed first, and every delta is held by its
  //    proxy (self.delta_weight) until the experts' forward returns: parameter_delta, then held_to_module_end.
  //  - The first read of the parameter inside that forward runs _LoraParameterProxy.forward, W + delta_weight (fp8
  //    parameters upcast: not modelled, memplan has no fp8 training weights), and every later read gets the cached
  //    sum. transformers' grouped_mm_experts_forward reads gate_up_proj first (self.gate_up_proj.size(0), at its
  //    top) and down_proj at its grouped_mm: the graph's first readers (parameter_sum).
  //    The sum requires grad (delta does), so the reader keeps it for backward (_grouped_mm saves its mat2 when
  //    the rows need a grad), and the rows too (mat2 now needs one): autograd_rules.cc's _grouped_mm rule.
  // The delta of stacked parameter `w`, in its type: the ops of get_delta_weight.
  int32_t parameter_delta(int32_t w, bool stored_in_out, int opset) {
    const Tensor param = g().tensors[w];
    const std::string p = param.name, m = "/" + p + "/lora";
    const int64_t e = param.shape[0], d1 = param.shape[1], d2 = param.shape[2], r = o_.lora_rank;
    // [E, out, in] (swapped) or [E, in, out] (is_transposed): PEFT's in/out features.
    const int64_t in_f = stored_in_out ? d1 : d2, out_f = stored_in_out ? d2 : d1;
    const bool half_base = is_half(o_.precision) && o_.lora_float32;
    auto weight = [&](const char* which, std::vector<int64_t> shape) {
      const int32_t t = tensor(p + "." + which + ".weight", DType::Float32, std::move(shape), TensorKind::Weight);
      g().tensors[t].trainable = true;
      g().initializers.push_back(t);
      out_.adapter[t] = true;
      out_.float32[t] = o_.lora_float32;
      out_.adapter_parameters = checked_add(out_.adapter_parameters, g().tensors[t].elements(), "LoRA parameter count");
      return t;
    };
    // Reshape (`perm` empty) or Transpose by `perm`: views, of their base's type.
    auto view = [&](const std::string& name, int32_t from, std::vector<int64_t> shape, std::vector<int64_t> perm) {
      const int32_t y = tensor(m + "/" + name + "_output_0", DType::Float32, shape, TensorKind::Activation);
      out_.float32[y] = out_.float32[from];
      if (!perm.empty()) {
        node(m + "/" + name, "Transpose", {from}, y, opset);
        g().nodes.back().attributes["perm"].type = Attribute::Type::Ints;
        g().nodes.back().attributes["perm"].ints = std::move(perm);
        return y;
      }
      const int32_t s = tensor(m + "/" + name + "/Constant_output_0", DType::Int64, {int64_t(shape.size())},
                               TensorKind::Activation);
      g().tensors[s].int_value = shape;
      node(m + "/" + name + "/Constant", "Constant", {}, s, opset);
      return node(m + "/" + name, "Reshape", {from, s}, y, opset);
    };
    const int32_t a = weight(kAdapterNames[0], {r * e, in_f}), b = weight(kAdapterNames[1], {out_f, r * e});
    const int32_t a3 = view("Reshape", a, {e, r, in_f}, {});        // weight_A.reshape(E, -1, in)
    const int32_t b3 = view("Reshape_1", b, {out_f, r, e}, {});     // weight_B.reshape(out, -1, E)
    const int32_t left = view("Transpose", b3, {e, out_f, r}, {2, 0, 1});  // sumproduct_pair's left, [E, out, r]
    int32_t cur = node(m + "/MatMul", "MatMul", {left, a3},
                       tensor(m + "/MatMul_output_0", DType::Float32, {e, out_f, in_f}, TensorKind::Activation), opset);
    out_.float32[cur] = half_base;
    if (stored_in_out) cur = view("Transpose_1", cur, {e, in_f, out_f}, {0, 2, 1});  // "e i o": permuted back
    const int32_t scaling = scalar(m + "/Constant_output_0", 8.0 / static_cast<double>(r), opset);
    cur = node(m + "/Mul", "Mul", {cur, scaling},
               tensor(m + "/Mul_output_0", DType::Float32, param.shape, TensorKind::Activation), opset);
    out_.float32[cur] = half_base;
    // .to(param.device, param.dtype): a copy where the types differ, self otherwise (ForwardAliasing).
    const int32_t typed = tensor(m + "/Cast_output_0", param.dtype, param.shape, TensorKind::Activation);
    g().nodes.push_back(cast_node(m + "/Cast", cur, typed, param.dtype, opset));
    ++out_.adapted_parameters;
    return typed;
  }

  // _LoraParameterProxy.forward: W + delta, which every reader of `w` then reads.
  int32_t parameter_sum(int32_t w, int32_t delta, int opset) {
    const Tensor param = g().tensors[w];
    const std::string m = "/" + param.name + "/lora";
    return node(m + "/Add", "Add", {w, delta}, tensor(m + "/Add_output_0", param.dtype, param.shape, TensorKind::Activation),
                opset);
  }

 private:
  const TrainingOptions& o_;
  LoraGraph& out_;
};

}  // namespace

std::string lora_adapter_module(const std::string& name) {
  for (const char* which : kAdapterNames) {
    const std::string suffix = std::string(".") + which + ".weight";  // as Builder::adapt's linear names them
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return name.substr(0, name.size() - suffix.size());
  }
  return "";
}

LoraGraph add_lora_adapters(const Graph& base, const TrainingOptions& o) {
  if (o.lora_rank <= 0)
    throw InputError("--lora-rank must be a positive integer (got " + std::to_string(o.lora_rank) + ")");
  if (o.lora_targets.empty())
    throw InputError("--lora-rank needs --lora-targets REGEX (searched in the weight names of the MatMul/Gemm "
                     "layers to adapt, e.g. 'q_proj|v_proj')");
  if (!(o.lora_dropout >= 0 && o.lora_dropout < 1))
    throw InputError("--lora-dropout must be in [0, 1)");
  std::regex targets;
  try {
    targets = std::regex(o.lora_targets, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    throw InputError("--lora-targets '" + o.lora_targets + "' is not a valid regular expression: " + e.what());
  }
  std::vector<std::optional<LinearSite>> target_of(base.nodes.size());
  std::vector<int32_t> adapted_at(base.nodes.size(), -1);  // node ending a targeted linear -> its first node
  std::vector<bool> base_layer(base.nodes.size(), false);    // a targeted Linear's own nodes (in_base_layer)
  for (size_t i = 0; i < base.nodes.size(); ++i) {
    auto t = linear_site(base, static_cast<int32_t>(i));
    if (!t || !std::regex_search(base.tensors[t->weight].name, targets)) continue;
    target_of[i] = t;
    adapted_at[t->last_node] = static_cast<int32_t>(i);
    base_layer[i] = base_layer[size_t(t->last_node)] = true;
    const int32_t w = in(base, static_cast<int32_t>(i), 1);  // F.linear's Transpose of the weight, when exported
    if (w >= 0 && w != t->weight && base.tensors[w].producer >= 0 && op_is(base, base.tensors[w].producer, "Transpose"))
      base_layer[size_t(base.tensors[w].producer)] = true;
  }
  // A mixture of experts' stacked [E, d1, d2] parameters the pattern names: PEFT's target_parameters. Each module's
  // deltas are made before its forward's first node, the last parameter's first (the outermost ParamWrapper's), and
  // held until its last node; each sum before the parameter's first reader (Builder::parameter_delta).
  std::vector<std::vector<int32_t>> sum_at(base.nodes.size());    // node -> the parameters first read there
  std::vector<std::vector<int32_t>> delta_at(base.nodes.size());  // node -> the deltas made before it, in order
  std::vector<std::string> delta_scope(base.tensors.size());       // parameter -> its module's node scope
  std::vector<std::pair<std::string, std::vector<int32_t>>> modules;  // module name -> its parameters, in order
  int stacked = 0;
  for (int32_t w : base.initializers) {
    const Tensor& t = base.tensors[w];
    if (t.kind != TensorKind::Weight || t.shape.size() != 3 || !std::regex_search(t.name, targets)) continue;
    check_lora_parameter_readers(base, w);
    check_lora_parameter_storage(base, w, o);
    if (o.lora_dropout > 0)  // ParamWrapper.__init__ and update_layer: "does not work with lora_dropout != 0"
      throw InputError("--lora-dropout above 0 with --lora-targets '" + o.lora_targets +
                       "' naming the stacked experts' parameter '" + t.name + "': PEFT's ParamWrapper (LoraConfig("
                       "target_parameters=...)) refuses lora_dropout != 0 (it cannot factor x out of "
                       "lora_B(lora_A(dropout(x)))); give --lora-dropout 0");
    sum_at[size_t(*std::min_element(t.consumers.begin(), t.consumers.end()))].push_back(w);
    const std::string module = t.name.substr(0, t.name.rfind('.'));  // "layers.0.mlp.experts"
    auto m = std::find_if(modules.begin(), modules.end(), [&](const auto& e) { return e.first == module; });
    (m == modules.end() ? modules.emplace_back(module, std::vector<int32_t>{}).second : m->second).push_back(w);
    ++stacked;
  }
  for (const auto& [module, params] : modules) {
    // The module's forward: the nodes named under its scope (its parameters' first reader's), else its readers.
    int32_t first = INT32_MAX;
    for (int32_t w : params) first = std::min(first, *std::min_element(base.tensors[w].consumers.begin(),
                                                                        base.tensors[w].consumers.end()));
    const std::string scope = node_scope(base.nodes[size_t(first)].name, "");
    for (size_t i = 0; i < size_t(first) && !scope.empty(); ++i)
      if (base.nodes[i].name.compare(0, scope.size() + 1, scope + "/") == 0) first = static_cast<int32_t>(i);
    for (auto w = params.rbegin(); w != params.rend(); ++w) {
      delta_at[size_t(first)].push_back(*w);
      if (!scope.empty()) delta_scope[size_t(*w)] = scope + "/";  // without one, held to its last reader only
    }
  }
  LoraGraph out;
  Builder b(base, o, out);
  std::vector<int32_t> renamed(base.tensors.size(), -1);  // a linear's result or a stacked parameter -> the adapted one
  std::map<int32_t, int32_t> delta;                        // a stacked parameter -> its delta
  auto reads = [&](int32_t t) { return t >= 0 && renamed[t] >= 0 ? renamed[t] : t; };
  for (size_t i = 0; i < base.nodes.size(); ++i) {
    Node n = base.nodes[i];
    for (int32_t w : delta_at[i]) {
      delta[w] = b.parameter_delta(w, lora_parameter_stored_in_out(base, w), n.opset);
      if (!delta_scope[size_t(w)].empty()) out.held_to_module_end.push_back({delta[w], delta_scope[size_t(w)]});
    }
    for (int32_t w : sum_at[i]) renamed[w] = b.parameter_sum(w, delta[w], n.opset);
    for (int32_t& t : n.inputs) t = reads(t);
    if (base_layer[i]) n.name = in_base_layer(n.name);
    b.g().nodes.push_back(n);
    if (adapted_at[i] < 0) continue;
    const int32_t y = out0(base, static_cast<int32_t>(i));
    LinearSite t = *target_of[adapted_at[i]];
    t.x = reads(t.x);  // the input may itself be an adapted linear's result
    const std::string& first = base.nodes[size_t(adapted_at[i])].name;
    renamed[y] = b.adapt(t, y, node_scope(first, "/" + module_of(base.tensors[t.weight].name)), n.opset);
  }
  if (out.adapted_layers == 0 && stacked == 0)
    throw InputError("--lora-targets '" + o.lora_targets + "' matches the weight of no MatMul/Gemm layer of model '" +
                     base.model_path + "' and no mixture of experts' stacked [experts, in, out] parameter");
  Graph& g = out.graph;
  for (int32_t& t : g.outputs) {
    if (renamed[t] < 0) continue;
    g.tensors[renamed[t]].kind = TensorKind::Output;
    g.tensors[t].kind = TensorKind::Activation;
    t = renamed[t];
  }
  relink(g);
  return out;
}

}  // namespace memplan
