// Sequence and optional values (onnx/defs/sequence/defs.cc, onnx/defs/optional/defs.cc, Operators.md):
// SequenceEmpty, SequenceConstruct, SequenceAt, SequenceInsert, SequenceErase, SequenceLength,
// SplitToSequence, ConcatFromSequence, SequenceMap, Optional, OptionalGetElement, OptionalHasElement, and
// Identity on them. A sequence is its tensors' shapes (Value::items), so every op that reads a position or
// a length needs it known: positions from initializers, Constants, --value or evaluated shape computations.
#include <onnx/onnx_pb.h>

#include <algorithm>

#include "onnx_import/rules/rules.h"

namespace memplan::shape {
namespace {

// memplan follows a sequence tensor by tensor (Value::items), so a sequence's length is memory: SplitToSequence
// with `split` omitted turns each element along its axis into a tensor, 2^31 of them (over 2 GiB resident) for a
// [2^31] input. Sequences in exported models hold per-step or per-chunk tensors, far fewer than this.
constexpr int64_t kMaxSequenceItems = int64_t{1} << 16;

Value sequence_of(DType t, std::vector<Value> items) {
  Value s;
  s.kind = ValueType::Sequence;
  s.dtype = t;
  s.items = std::move(items);
  return s;
}

Value scalar_known(DType t, int64_t x) {
  Value v;
  v.dtype = t;
  v.ints = std::vector<int64_t>{x};
  return v;
}

const Value& sequence_input(const NodeContext& ctx, size_t i) {
  const Value& v = ctx.required(i);
  if (v.kind != ValueType::Sequence)
    ctx.fail("input " + std::to_string(i) + " ('" + ctx.node().input(static_cast<int>(i)) + "') is " + kind_text(v) +
             "; " + ctx.op() + " takes a sequence there");
  return v;
}

const Value& tensor_input(const NodeContext& ctx, size_t i) {
  const Value& v = ctx.required(i);
  if (!v.is_tensor())
    ctx.fail("input " + std::to_string(i) + " ('" + ctx.node().input(static_cast<int>(i)) + "') is " + kind_text(v) +
             "; " + ctx.op() + " takes a tensor there");
  return v;
}

// The value of a scalar position input (int32/int64), or nullopt when it is omitted.
std::optional<int64_t> position(const NodeContext& ctx, size_t i) {
  const Value* p = ctx.input(i);
  if (!p) return std::nullopt;
  if (!p->is_tensor() || !(p->dtype == DType::Int32 || p->dtype == DType::Int64) || p->elements() != 1)
    ctx.fail("input " + std::to_string(i) + " (position) must be an int32 or int64 scalar");
  const auto v = ctx.input_ints(i);
  if (!v)
    ctx.fail("the position (input " + std::to_string(i) + ", '" + ctx.node().input(static_cast<int>(i)) +
             "') is not known statically; bind the inputs it is computed from with --value");
  return v->front();
}

// A position in [-n, n - 1] (or [-n, n] for an insertion), normalized; fails naming the node otherwise.
size_t normalize_position(const NodeContext& ctx, int64_t p, size_t n, bool insertion) {
  const int64_t len = static_cast<int64_t>(n);
  const int64_t hi = insertion ? len : len - 1;
  if (p < -len || p > hi)
    ctx.fail("position " + std::to_string(p) + " is out of range for a sequence of " + std::to_string(n) +
             " tensor" + (n == 1 ? "" : "s") + " (valid: " + std::to_string(-len) + " to " + std::to_string(hi) + ")");
  return static_cast<size_t>(p < 0 ? p + len : p);
}

DType sequence_dtype_attr(const NodeContext& ctx, const char* name, DType def) {
  const auto* a = ctx.attr(name);
  if (!a) return def;
  const auto t = dtype_from_onnx(static_cast<int32_t>(a->i()));
  if (!t) ctx.fail("unknown data type " + std::to_string(a->i()));
  return *t;
}

bool sequence_empty(NodeContext& ctx) {
  ctx.set_output(0, sequence_of(sequence_dtype_attr(ctx, "dtype", DType::Float32), {}));
  return true;
}

bool sequence_construct(NodeContext& ctx) {
  if (ctx.num_inputs() == 0) ctx.fail("needs at least one input");
  std::vector<Value> items;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const Value& t = tensor_input(ctx, i);
    if (t.dtype != tensor_input(ctx, 0).dtype)
      ctx.fail("input " + std::to_string(i) + " is " + std::string(dtype_name(t.dtype)) + " but input 0 is " +
               std::string(dtype_name(tensor_input(ctx, 0).dtype)) + "; a sequence holds one element type");
    items.push_back(t);
  }
  const DType t = items.front().dtype;  // read before the move below: argument order is unspecified
  ctx.set_output(0, sequence_of(t, std::move(items)));
  return true;
}

bool sequence_at(NodeContext& ctx) {
  const Value& s = sequence_input(ctx, 0);
  const auto p = position(ctx, 1);
  if (!p) ctx.fail("input 1 (position) is required but missing");
  ctx.set_output(0, s.items[normalize_position(ctx, *p, s.items.size(), false)]);
  return true;
}

bool sequence_insert(NodeContext& ctx) {
  const Value& s = sequence_input(ctx, 0);
  const Value& t = tensor_input(ctx, 1);
  if (!s.items.empty() && t.dtype != s.dtype)
    ctx.fail("the tensor is " + std::string(dtype_name(t.dtype)) + " but the sequence holds " +
             std::string(dtype_name(s.dtype)));
  const auto p = position(ctx, 2);
  const size_t at = p ? normalize_position(ctx, *p, s.items.size(), true) : s.items.size();
  Value out = s;
  out.dtype = t.dtype;
  out.items.insert(out.items.begin() + static_cast<std::ptrdiff_t>(at), t);
  ctx.set_output(0, std::move(out));
  return true;
}

bool sequence_erase(NodeContext& ctx) {
  const Value& s = sequence_input(ctx, 0);
  if (s.items.empty()) ctx.fail("erases from an empty sequence");
  const auto p = position(ctx, 1);
  Value out = s;
  out.items.erase(out.items.begin() + static_cast<std::ptrdiff_t>(normalize_position(ctx, p.value_or(-1), s.items.size(), false)));
  ctx.set_output(0, std::move(out));
  return true;
}

bool sequence_length(NodeContext& ctx) {
  ctx.set_output(0, scalar_known(DType::Int64, static_cast<int64_t>(sequence_input(ctx, 0).items.size())));
  return true;
}

// SplitToSequence: `split` omitted -> chunks of 1 along `axis` (squeezed unless keepdims); a scalar -> chunks
// of that size, the last smaller; a 1-D tensor -> those lengths, which must sum to the dimension.
bool split_to_sequence(NodeContext& ctx) {
  const Value& x = tensor_input(ctx, 0);
  const size_t axis = static_cast<size_t>(ctx.axis(ctx.attr_int("axis", 0), x.shape.size()));
  const int64_t dim = x.shape[axis];
  std::vector<int64_t> lengths;
  bool squeeze = false;
  auto check_count = [&](int64_t pieces) {
    if (pieces > kMaxSequenceItems)
      ctx.fail("would make a sequence of " + std::to_string(pieces) + " tensors (axis " + std::to_string(axis) +
               " has " + std::to_string(dim) + "); memplan follows sequences of up to " +
               std::to_string(kMaxSequenceItems) + " tensors");
  };
  if (const Value* split = ctx.input(1)) {
    if (!split->is_tensor() || !dtype_is_integer(split->dtype) || split->shape.size() > 1)
      ctx.fail("input 1 (split) must be an integer scalar or 1-D tensor");
    const auto v = ctx.input_ints(1);
    if (!v) ctx.fail("the split lengths (input 1) are not known statically; bind them with --value");
    if (split->shape.empty()) {
      const int64_t k = v->front();
      if (k <= 0) ctx.fail("split is " + std::to_string(k) + "; it must be positive");
      check_count(dim / k + (dim % k != 0));
      for (int64_t left = dim; left > 0; left -= lengths.back()) lengths.push_back(std::min(k, left));
    } else {
      int64_t sum = 0;
      for (int64_t l : *v) {
        if (l < 0) ctx.fail("a split length is negative (" + std::to_string(l) + ")");
        sum = ctx.add(sum, l);
      }
      if (sum != dim)
        ctx.fail("the split lengths sum to " + std::to_string(sum) + ", but axis " + std::to_string(axis) + " has " +
                 std::to_string(dim));
      lengths = *v;
    }
  } else {
    check_count(dim);
    lengths.assign(static_cast<size_t>(dim), 1);
    squeeze = ctx.attr_int("keepdims", 1) == 0;
  }
  std::vector<Value> items;
  for (int64_t l : lengths) {
    Value t;
    t.dtype = x.dtype;
    t.shape = x.shape;
    t.shape[axis] = l;
    if (squeeze) t.shape.erase(t.shape.begin() + static_cast<std::ptrdiff_t>(axis));
    items.push_back(std::move(t));
  }
  ctx.set_output(0, sequence_of(x.dtype, std::move(items)));
  return true;
}

// ConcatFromSequence: Concat of the tensors along `axis`, or, with new_axis=1, stacked along a new axis.
bool concat_from_sequence(NodeContext& ctx) {
  const Value& s = sequence_input(ctx, 0);
  if (s.items.empty()) ctx.fail("the sequence is empty; there is nothing to concatenate");
  const bool new_axis = ctx.attr_int("new_axis", 0) == 1;
  const auto* axis_attr = ctx.attr("axis");
  if (!axis_attr) ctx.fail("has no 'axis' attribute");
  const std::vector<int64_t>& first = s.items.front().shape;
  const size_t axis = static_cast<size_t>(ctx.axis(axis_attr->i(), first.size() + (new_axis ? 1 : 0)));
  std::vector<int64_t> out = first;
  if (new_axis) out.insert(out.begin() + static_cast<std::ptrdiff_t>(axis), 0);
  else out[axis] = 0;  // the sum over the tensors below, the first included
  for (size_t k = 0; k < s.items.size(); ++k) {
    const auto& shape = s.items[k].shape;
    bool fits = shape.size() == first.size();
    for (size_t a = 0; fits && a < shape.size(); ++a) fits = (!new_axis && a == axis) || shape[a] == first[a];
    if (!fits)
      ctx.fail("tensor " + std::to_string(k) + " of the sequence has a shape that does not " +
               (new_axis ? "stack with" : "concatenate with") + " tensor 0's along axis " + std::to_string(axis));
    out[axis] = ctx.add(out[axis], new_axis ? 1 : shape[axis]);
  }
  ctx.set_output(0, s.dtype, std::move(out));
  return true;
}

// SequenceMap-17: the body runs once per position of the first input's sequence, seeing that position's
// tensor of every sequence input and the tensor inputs whole; each output collects one tensor per run.
bool sequence_map(NodeContext& ctx) {
  const auto* body_attr = ctx.attr("body");
  if (!body_attr || !body_attr->has_g()) ctx.fail("has no 'body' subgraph");
  const size_t n = sequence_input(ctx, 0).items.size();
  std::vector<std::vector<Value>> outs(ctx.num_outputs());
  for (size_t k = 0; k < n; ++k) {
    std::vector<Value> in;
    for (size_t i = 0; i < ctx.num_inputs(); ++i) {
      const Value& v = ctx.required(i);
      if (v.kind == ValueType::Sequence && v.items.size() != n)
        ctx.fail("input " + std::to_string(i) + " holds " + std::to_string(v.items.size()) + " tensors, input 0 " +
                 std::to_string(n));
      in.push_back(v.kind == ValueType::Sequence ? v.items[k] : v);
    }
    SubgraphResult r = ctx.subgraphs().run(body_attr->g(), in, ctx.name() + "/body (position " + std::to_string(k) + ")");
    if (r.outputs.size() < ctx.num_outputs()) ctx.fail("the body returns fewer values than the node has outputs");
    for (size_t o = 0; o < ctx.num_outputs(); ++o) outs[o].push_back(r.outputs[o]);
  }
  for (size_t o = 0; o < ctx.num_outputs(); ++o) {
    DType t = outs[o].empty() ? DType::Undefined : outs[o].front().dtype;
    if (t == DType::Undefined)  // an empty input sequence: the body's declared output type
      if (const auto& g = body_attr->g(); static_cast<int>(o) < g.output_size() && g.output(static_cast<int>(o)).type().has_tensor_type())
        t = dtype_from_onnx(g.output(static_cast<int>(o)).type().tensor_type().elem_type()).value_or(DType::Float32);
    ctx.set_output(o, sequence_of(t, std::move(outs[o])));
  }
  return true;
}

// Optional-15: with an input, an optional holding it; without, an empty optional of the `type` attribute.
bool optional(NodeContext& ctx) {
  Value v;
  v.kind = ValueType::Optional;
  if (const Value* in = ctx.input(0)) {
    if (in->kind == ValueType::Optional) ctx.fail("input 0 is an optional; Optional takes a tensor or a sequence");
    v.dtype = in->dtype;
    v.optional_of_sequence = in->kind == ValueType::Sequence;
    v.items.push_back(*in);
  } else {
    const auto* type = ctx.attr("type");
    if (!type || !type->has_tp()) ctx.fail("has neither an input nor a 'type' attribute");
    const onnx::TypeProto& tp = type->tp();
    v.optional_of_sequence = tp.has_sequence_type();
    const auto& tensor = v.optional_of_sequence ? tp.sequence_type().elem_type() : tp;
    if (!tensor.has_tensor_type()) ctx.fail("the 'type' attribute is neither a tensor nor a sequence of tensors");
    const auto t = dtype_from_onnx(tensor.tensor_type().elem_type());
    if (!t) ctx.fail("the 'type' attribute has an unknown element type");
    v.dtype = *t;
  }
  ctx.set_output(0, std::move(v));
  return true;
}

// OptionalGetElement: the value an optional holds (an error when it holds none). A tensor or sequence passes
// through, as opset 18 defines; earlier opsets take optionals only, but a Loop that carries an optional
// (test_loop16_seq_none) hands its body the sequence the previous iteration made, which runtimes accept.
bool optional_get_element(NodeContext& ctx) {
  const Value& in = ctx.required(0);
  if (in.kind != ValueType::Optional) {
    ctx.set_output(0, in);
    return true;
  }
  if (in.items.empty()) ctx.fail("the optional '" + ctx.node().input(0) + "' holds no value at these inputs");
  ctx.set_output(0, in.items.front());
  return true;
}

// OptionalHasElement: a bool scalar, known: whether the optional holds a value; an omitted input is false and
// a tensor or sequence true (opset 18's definition, taken for every opset as for OptionalGetElement).
bool optional_has_element(NodeContext& ctx) {
  const Value* in = ctx.input(0);
  const bool has = in && (in->kind != ValueType::Optional || !in->items.empty());
  ctx.set_output(0, scalar_known(DType::Bool, has ? 1 : 0));
  return true;
}

// Identity on a sequence or optional passes it through; tensors are left to ONNX's inference.
bool identity(NodeContext& ctx) {
  const Value* in = ctx.input(0);
  if (!in || in->is_tensor()) return false;
  ctx.set_output(0, *in);
  return true;
}

}  // namespace

bool takes_sequences(std::string_view domain, std::string_view op) {
  if (!domain.empty()) return false;
  return op.rfind("Sequence", 0) == 0 || op.rfind("Optional", 0) == 0 || op == "SplitToSequence" ||
         op == "ConcatFromSequence" || op == "Identity" || op == "If" || op == "Loop";
}

void register_sequence_rules(RuleTable& t) {
  t[""]["SequenceEmpty"] = sequence_empty;
  t[""]["SequenceConstruct"] = sequence_construct;
  t[""]["SequenceAt"] = sequence_at;
  t[""]["SequenceInsert"] = sequence_insert;
  t[""]["SequenceErase"] = sequence_erase;
  t[""]["SequenceLength"] = sequence_length;
  t[""]["SplitToSequence"] = split_to_sequence;
  t[""]["ConcatFromSequence"] = concat_from_sequence;
  t[""]["SequenceMap"] = sequence_map;
  t[""]["Optional"] = optional;
  t[""]["OptionalGetElement"] = optional_get_element;
  t[""]["OptionalHasElement"] = optional_has_element;
  t[""]["Identity"] = identity;
}

}  // namespace memplan::shape
