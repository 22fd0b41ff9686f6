// The traced building blocks the config.json decoders share (onnx_import/decoder_builder.h): rotary, repeat_kv's
// expand, reshapes and transposes, last-axis slices and the soft-cap, each as torch.onnx.export (torch 1.13,
// opset 17) writes the PyTorch expression named in its comment.
#include <limits>
#include <string>
#include <vector>

#include "onnx_import/decoder_builder.h"

namespace memplan {

using onnx::TensorProto;

// rotate_half(x) = cat(-x[..., half:], x[..., :half]); returns x * cos + rotate_half(x) * sin.
std::string LlamaBuilder::rotary(const std::string& x, const std::string& cos_table, const std::string& sin_table,
                                 int64_t half) {
  const std::string cos = e_.op("Mul", {x, cos_table});
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
  return e_.op("Add", {cos, e_.op("Mul", {rotated, sin_table})});
}

// repeat_kv's x[:, :, None].expand(b, kv, n_rep, s, d): the expand symbolic's own (scoped) axes Constants and
// its -1 handling (torch/onnx/symbolic_opset9.py expand).
std::string LlamaBuilder::expand_kv(const std::string& x, const std::string& total) {
  const int64_t n_rep = c_.num_attention_heads / c_.num_key_value_heads;
  const std::string x5 = e_.op("Unsqueeze", {x, e_.const_i64({2}, false)});
  e_.note(3), e_.note(4);  // x[:, :, None, :, :]'s full slices of dims 3 and 4
  e_.note(c_.num_key_value_heads), e_.note(n_rep), e_.note(c_.head_dim);
  return expand_to(x5, {b_, e_.pooled(c_.num_key_value_heads), e_.pooled(n_rep), total, e_.pooled(c_.head_dim)});
}

// x.expand(sizes) (repeat_kv's, DeepSeek's k_rot, gpt_oss's sinks) with traced sizes: each Unsqueezed on the expand symbolic's own (scoped) axes Constant, Concat,
// and the -1 handling (torch/onnx/symbolic_opset9.py expand).
std::string LlamaBuilder::expand_to(const std::string& x, const std::vector<std::string>& dims) {
  std::vector<std::string> parts;
  for (const std::string& v : dims) parts.push_back(e_.op("Unsqueeze", {v, e_.const_i64({0}, false)}));
  const std::string list = e_.op("Concat", parts);
  e_.i("axis", 0);
  const std::string sizes = e_.op("Reshape", {list, e_.const_i64({-1}, false)});
  e_.i("allowzero", 0);
  const std::string ones = e_.op("ConstantOfShape", {e_.op("Shape", {sizes})});
  const int64_t one = 1;
  e_.tensor("value", TensorProto::INT64, {1}, &one, 8);
  const std::string minus = e_.op("Mul", {ones, e_.const_i64({-1}, true)});
  const std::string where = e_.op("Where", {e_.op("Equal", {sizes, minus}), ones, sizes});
  return e_.op("Expand", {x, where});
}

std::string LlamaBuilder::reshape(const std::string& x, const std::string& shape) {
  const std::string y = e_.op("Reshape", {x, shape});
  e_.i("allowzero", 0);
  return y;
}
std::string LlamaBuilder::transpose(const std::string& x, std::vector<int64_t> perm) {
  const std::string y = e_.op("Transpose", {x});
  e_.ints("perm", perm);
  return y;
}

// x[..., start:end] of a tensor whose last axis is `axis`: the Slice symbolic's scoped axes, starts, ends and steps
// Constants (torch/onnx/symbolic_opset10.py slice), the indexing's Python ints traced before them.
std::string LlamaBuilder::slice_last(const std::string& x, int64_t axis, int64_t start, int64_t end) {
  e_.note(axis), e_.note(start), e_.note(end), e_.note(1);
  const std::string axes = e_.const_i64({axis}, false), starts = e_.const_i64({start}, false);
  const std::string ends = e_.const_i64({end}, false), steps = e_.const_i64({1}, false);
  return e_.op("Slice", {x, starts, ends, axes, steps});
}

// cap * tanh(x / cap): eager_attention_forward's attn_logit_softcapping and Gemma2ForCausalLM's
// final_logit_softcapping.
std::string LlamaBuilder::soft_cap(const std::string& x, double cap) {
  const std::string divided = e_.op("Div", {x, e_.const_f32({float(cap)}, {})});
  const std::string t = e_.op("Tanh", {divided});
  return e_.op("Mul", {t, e_.const_f32({float(cap)}, {})});
}

}  // namespace memplan
