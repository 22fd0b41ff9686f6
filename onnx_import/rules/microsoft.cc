// com.microsoft contrib ops that ONNX Runtime's transformer optimizer and quantization tools emit.
// Shapes follow ONNX Runtime's operator docs (docs/ContribOperators.md) and its shape inference
// (onnxruntime/core/graph/contrib_ops/bert_defs.cc, quantization_defs.cc, contrib_defs.cc).
// LayerNormalization and SimplifiedLayerNormalization are also registered by ONNX Runtime in the default
// domain (before ONNX itself added LayerNormalization at opset 17), so their rules serve both domains.
#include <algorithm>
#include <optional>

#include <onnx/onnx_pb.h>

#include "onnx_import/rules/rules.h"

namespace memplan::shape {
namespace {

// LayerNormalization (axis, default -1) and SimplifiedLayerNormalization: Y like X; the optional
// Mean / InvStdDev keep X's dims before `axis` and are 1 after it, in float32 (stash_type's default).
bool layer_norm(NodeContext& ctx) {
  const Value& x = ctx.required(0);
  ctx.set_output(0, x.dtype, x.shape);
  const int64_t axis = ctx.axis(ctx.attr_int("axis", -1), x.shape.size());
  std::vector<int64_t> stat(x.shape.begin(), x.shape.begin() + axis);
  stat.resize(x.shape.size(), 1);
  const auto stash = dtype_from_onnx(static_cast<int32_t>(ctx.attr_int("stash_type", 1))).value_or(DType::Float32);
  for (size_t i = 1; i < ctx.num_outputs(); ++i)
    if (ctx.output_used(i)) ctx.set_output(i, stash, stat);
  return true;
}

// SkipLayerNormalization / SkipSimplifiedLayerNormalization: output like input; mean and inv_std_var
// [.., 1] in float32; input_skip_bias_sum like input. (The simplified op has no mean: its outputs are
// output, mean (unused), inv_std_var, input_skip_bias_sum, the same positions.)
bool skip_layer_norm(NodeContext& ctx) {
  const Value& x = ctx.required(0);
  ctx.set_output(0, x.dtype, x.shape);
  std::vector<int64_t> stat = x.shape;
  if (!stat.empty()) stat.back() = 1;
  if (ctx.output_used(1)) ctx.set_output(1, DType::Float32, stat);
  if (ctx.output_used(2)) ctx.set_output(2, DType::Float32, stat);
  if (ctx.output_used(3)) ctx.set_output(3, x.dtype, x.shape);
  return true;
}

// EmbedLayerNormalization: input_ids [B, S], word_embedding [V, H] -> output [B, S, H] (embedding dtype),
// mask_index [B] int32, embedding_sum [B, S, H].
bool embed_layer_norm(NodeContext& ctx) {
  const Value& ids = ctx.required(0);
  const Value& word = ctx.required(2);
  if (ids.shape.size() != 2 || word.shape.size() != 2) ctx.fail("input_ids must be [B, S] and word_embedding [V, H]");
  const std::vector<int64_t> out{ids.shape[0], ids.shape[1], word.shape[1]};
  ctx.set_output(0, word.dtype, out);
  if (ctx.output_used(1)) ctx.set_output(1, DType::Int32, {ids.shape[0]});
  if (ctx.output_used(2)) ctx.set_output(2, word.dtype, out);
  return true;
}

// BiasSplitGelu: input [N, S, D], bias [D] -> [N, S, D/2].
bool bias_split_gelu(NodeContext& ctx) {
  const Value& x = ctx.required(0);
  if (x.shape.empty() || x.shape.back() % 2) ctx.fail("the last dimension must be even");
  auto shape = x.shape;
  shape.back() /= 2;
  ctx.set_output(0, x.dtype, std::move(shape));
  return true;
}

// numpy matmul of two shapes (1-D operands promoted and the added dim dropped again).
std::vector<int64_t> matmul_shape(const NodeContext& ctx, std::vector<int64_t> a, std::vector<int64_t> b) {
  if (a.empty() || b.empty()) ctx.fail("matmul operands cannot be scalars");
  const bool a1 = a.size() == 1, b1 = b.size() == 1;
  if (a1) a.insert(a.begin(), 1);
  if (b1) b.push_back(1);
  if (a.back() != b[b.size() - 2])
    ctx.fail("matmul inner dimensions differ (" + std::to_string(a.back()) + " vs " + std::to_string(b[b.size() - 2]) + ")");
  auto batch = ctx.broadcast({std::vector<int64_t>(a.begin(), a.end() - 2), std::vector<int64_t>(b.begin(), b.end() - 2)});
  if (!a1) batch.push_back(a[a.size() - 2]);
  if (!b1) batch.push_back(b.back());
  return batch;
}

// FusedMatMul: alpha * op(A) @ op(B), op transposing the last two dims when transA / transB.
// (transBatchA/B move the batch dims; ORT's optimizer emits them only with rank-2 results we follow.)
bool fused_matmul(NodeContext& ctx) {
  auto a = ctx.required(0).shape, b = ctx.required(1).shape;
  if (ctx.attr_int("transA", 0) && a.size() >= 2) std::swap(a[a.size() - 1], a[a.size() - 2]);
  if (ctx.attr_int("transB", 0) && b.size() >= 2) std::swap(b[b.size() - 1], b[b.size() - 2]);
  ctx.set_output(0, ctx.required(0).dtype, matmul_shape(ctx, a, b));
  return true;
}

// MatMulIntegerToFloat / DynamicQuantizeMatMul: matmul shape, float output (the scale's dtype).
bool matmul_to_float(NodeContext& ctx) {
  const DType out = ctx.input(2) ? ctx.input(2)->dtype : DType::Float32;
  ctx.set_output(0, is_real(out) ? out : DType::Float32, matmul_shape(ctx, ctx.required(0).shape, ctx.required(1).shape));
  return true;
}

// QLinearAdd/QLinearMul: (A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp) -> broadcast, A's dtype.
bool qlinear_binary(NodeContext& ctx) {
  const Value& a = ctx.required(0);
  ctx.set_output(0, a.dtype, ctx.broadcast({a.shape, ctx.required(3).shape}));
  return true;
}

// QLinearGlobalAveragePool: [N, C, spatial...] -> [N, C, 1...] (channels_last moves C to the end).
bool qlinear_global_avg_pool(NodeContext& ctx) {
  const Value& x = ctx.required(0);
  if (x.shape.size() < 3) ctx.fail("the input needs batch, channel and spatial dimensions");
  std::vector<int64_t> shape(x.shape.size(), 1);
  shape[0] = x.shape[0];
  if (ctx.attr_int("channels_last", 0)) shape.back() = x.shape.back();
  else shape[1] = x.shape[1];
  ctx.set_output(0, x.dtype, std::move(shape));
  return true;
}

// QLinearConcat: (Y_scale, Y_zp, then (X, X_scale, X_zp) triples) concatenated along `axis`.
bool qlinear_concat(NodeContext& ctx) {
  if (ctx.num_inputs() < 5) ctx.fail("needs at least one (X, scale, zero point) triple");
  const Value& first = ctx.required(2);
  auto shape = first.shape;
  const int64_t axis = ctx.axis(ctx.attr_int("axis", 0), shape.size());
  shape[axis] = 0;
  for (size_t i = 2; i < ctx.num_inputs(); i += 3) {
    const Value& x = ctx.required(i);
    if (x.shape.size() != shape.size()) ctx.fail("inputs have different ranks");
    shape[axis] = ctx.add(shape[axis], x.shape[axis]);
  }
  ctx.set_output(0, first.dtype, std::move(shape));
  return true;
}

// Attention: input [B, S, D_in], weights [D_in, D_q + D_k + D_v] (qkv_hidden_sizes, else equal thirds),
// optional past [2, B, N, P, H] -> output [B, S, D_v], present [2, B, N, P + S, D_k / N].
bool ms_attention(NodeContext& ctx) {
  const Value& x = ctx.required(0);
  const Value& w = ctx.required(1);
  const int64_t heads = ctx.attr_int("num_heads", 0);
  if (x.shape.size() != 3 || w.shape.size() != 2 || heads <= 0) ctx.fail("needs input [B, S, D], weights [D, 3*H] and num_heads");
  int64_t dk, dv;
  if (const auto sizes = ctx.attr_ints("qkv_hidden_sizes"); sizes && sizes->size() == 3) {
    dk = (*sizes)[1];
    dv = (*sizes)[2];
  } else {
    if (w.shape[1] % 3) ctx.fail("the weights' second dimension is not a multiple of 3");
    dk = dv = w.shape[1] / 3;
  }
  ctx.set_output(0, x.dtype, {x.shape[0], x.shape[1], dv});
  if (ctx.output_used(1)) {
    const Value* past = ctx.input(4);
    const int64_t past_len = past && past->shape.size() == 5 ? past->shape[3] : 0;
    ctx.set_output(1, x.dtype, {2, x.shape[0], heads, ctx.add(past_len, x.shape[1]), dk / heads});
  }
  return true;
}

// MultiHeadAttention: query [B, S, D] (or packed QKV [B, S, N, 3, H] with key/value absent); key
// [B, L, D], [B, N, L, H] or packed KV [B, L, N, 2, H]; value [B, L, D_v] or [B, N, L, H_v]; past_key
// (input 6) [B, N, P, H]. Outputs [B, S, D_v], present_key [B, N, P + L, H], present_value [B, N, P + L, H_v].
bool multi_head_attention(NodeContext& ctx) {
  const Value& q = ctx.required(0);
  const int64_t n = ctx.attr_int("num_heads", 0);
  if (n <= 0) ctx.fail("needs num_heads");
  const Value* k = ctx.input(1);
  const Value* v = ctx.input(2);
  int64_t batch = q.shape.at(0), seq = q.shape.at(1), head, v_head, kv_seq;
  if (q.shape.size() == 5) {  // packed QKV
    head = v_head = q.shape[4];
    kv_seq = seq;
  } else {
    if (q.shape.size() != 3 || !k) ctx.fail("query must be [B, S, D] or packed [B, S, N, 3, H]");
    head = q.shape[2] / n;
    if (k->shape.size() == 5) {  // packed KV
      kv_seq = k->shape[1];
      v_head = k->shape[4];
    } else if (k->shape.size() == 4) {  // BNSH key (cross attention with cached key/value)
      kv_seq = k->shape[2];
      v_head = v && v->shape.size() == 4 ? v->shape[3] : head;
    } else {
      kv_seq = k->shape.at(1);
      v_head = v && v->shape.size() == 3 ? v->shape[2] / n : head;
    }
  }
  ctx.set_output(0, q.dtype, {batch, seq, ctx.mul(n, v_head)});
  const Value* past = ctx.input(6);
  const int64_t past_len = past && past->shape.size() == 4 ? past->shape[2] : 0;
  const int64_t total = ctx.add(past_len, kv_seq);
  if (ctx.output_used(1)) ctx.set_output(1, q.dtype, {batch, n, total, head});
  if (ctx.output_used(2)) ctx.set_output(2, q.dtype, {batch, n, total, v_head});
  if (ctx.output_used(3)) ctx.set_output(3, q.dtype, {batch, n, seq, total});
  return true;
}

// GroupQueryAttention: query [B, S, N*H] (or packed [B, S, (N + 2*KV)*H] with key absent), key/value
// [B, L, KV*H], past_key (input 3) [B, KV, P, H], total_sequence_length (input 6, int32). Output [B, S, N*H];
// present_key/value [B, KV, T, H] in past_key's dtype (an int8 quantized cache stays int8), T by ONNX Runtime's
// shape inference (onnxruntime/core/graph/contrib_ops/bert_defs.cc, BaseGroupQueryAttentionTypeAndShapeInference,
// and its kernel's present_sequence_length in group_query_attention_helper.h):
//   - with a past: max(P, total) (a shared KV buffer of P = max length stays P long; without sharing,
//     total = P + L); sliding_window_cache=1: P, the window's buffer; total unknown: P, or L when P is 0;
//   - without a past: total, or L (the new keys) when total is unknown.
bool group_query_attention(NodeContext& ctx) {
  const Value& q = ctx.required(0);
  const int64_t n = ctx.attr_int("num_heads", 0), kv = ctx.attr_int("kv_num_heads", 0);
  if (n <= 0 || kv <= 0 || q.shape.size() != 3) ctx.fail("needs num_heads, kv_num_heads and query [B, S, D]");
  const bool packed = !ctx.input(1);
  const int64_t head = q.shape[2] / (packed ? ctx.add(n, ctx.mul(2, kv)) : n);
  ctx.set_output(0, q.dtype, {q.shape[0], q.shape[1], ctx.mul(n, head)});
  const Value* value = ctx.input(2);
  const int64_t new_len = !packed && value && value->shape.size() == 3 ? value->shape[1] : q.shape[1];
  const Value* past = ctx.input(3);
  if (past && past->shape.size() != 4) ctx.fail("past_key must be [B, KV, P, H]");
  std::optional<int64_t> total;
  if (const auto t = ctx.input_ints(6); t && t->size() == 1) total = (*t)[0];
  int64_t present = total.value_or(new_len);
  if (past) {
    const int64_t p = past->shape[2];
    if (ctx.attr_int("sliding_window_cache", 0) == 1) present = p;
    else if (total) present = std::max(p, *total);
    else present = p > 0 ? p : new_len;
  }
  const DType dtype = past ? past->dtype : q.dtype;
  for (size_t i = 1; i <= 2; ++i)
    if (ctx.output_used(i)) ctx.set_output(i, dtype, {q.shape[0], kv, present, head});
  return true;
}

// QuantizeLinear / DequantizeLinear in com.microsoft: x's shape; the zero point's dtype (uint8 default)
// when quantizing, the scale's dtype when dequantizing.
bool ms_quantize(NodeContext& ctx) {
  ctx.set_output(0, ctx.input(2) ? ctx.input(2)->dtype : DType::UInt8, ctx.required(0).shape);
  return true;
}

bool ms_dequantize(NodeContext& ctx) {
  ctx.set_output(0, ctx.required(1).dtype, ctx.required(0).shape);
  return true;
}

}  // namespace

void register_microsoft_rules(RuleTable& t) {
  for (const char* op : {"FastGelu", "BiasGelu", "Gelu", "QuickGelu", "BiasAdd", "RotaryEmbedding", "QLinearSigmoid",
                         "QLinearLeakyRelu", "QLinearSoftmax"})
    t[kMsDomain][op] = same_as_first;
  for (const char* domain : {"", kMsDomain}) {
    t[domain]["SimplifiedLayerNormalization"] = layer_norm;
    t[domain]["LayerNormalization"] = layer_norm;
  }
  t[kMsDomain]["SkipLayerNormalization"] = skip_layer_norm;
  t[kMsDomain]["SkipSimplifiedLayerNormalization"] = skip_layer_norm;
  t[kMsDomain]["EmbedLayerNormalization"] = embed_layer_norm;
  t[kMsDomain]["BiasSplitGelu"] = bias_split_gelu;
  t[kMsDomain]["FusedMatMul"] = fused_matmul;
  t[kMsDomain]["MatMulIntegerToFloat"] = matmul_to_float;
  t[kMsDomain]["DynamicQuantizeMatMul"] = matmul_to_float;
  t[kMsDomain]["QLinearAdd"] = qlinear_binary;
  t[kMsDomain]["QLinearMul"] = qlinear_binary;
  t[kMsDomain]["QLinearGlobalAveragePool"] = qlinear_global_avg_pool;
  t[kMsDomain]["QLinearConcat"] = qlinear_concat;
  t[kMsDomain]["Attention"] = ms_attention;
  t[kMsDomain]["MultiHeadAttention"] = multi_head_attention;
  t[kMsDomain]["GroupQueryAttention"] = group_query_attention;
  t[kMsDomain]["QuantizeLinear"] = ms_quantize;
  t[kMsDomain]["DequantizeLinear"] = ms_dequantize;
}

}  // namespace memplan::shape
