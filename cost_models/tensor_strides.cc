// PyTorch's view strides and matmul's operand copies (tensor_strides.h).
#include "cost_models/tensor_strides.h"

namespace memplan {
namespace {

int64_t normalized_axis(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }

const std::vector<int64_t>* known_ints(const Graph& g, const Node& n, size_t input) {
  if (input >= n.inputs.size() || n.inputs[input] < 0) return nullptr;
  const auto& value = g.tensors[n.inputs[input]].int_value;
  return value ? &*value : nullptr;
}

uint64_t product(const std::vector<int64_t>& dims, size_t begin, size_t end) {
  uint64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= static_cast<uint64_t>(dims[i]);
  return p;
}

// Tensor.expand of a tensor of `from` and `strides` to `to`: new leading and broadcast dimensions read one element
// (stride 0), the others keep theirs.
Strides expanded_strides(const std::vector<int64_t>& from, const Strides& strides, const std::vector<int64_t>& to) {
  Strides s(to.size(), 0);
  const size_t lead = to.size() >= from.size() ? to.size() - from.size() : 0;
  for (size_t i = lead; i < to.size(); ++i) s[i] = from[i - lead] == 1 && to[i] != 1 ? 0 : strides[i - lead];
  return s;
}

}  // namespace

Strides contiguous_strides(const std::vector<int64_t>& shape) {
  Strides s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * std::max<int64_t>(shape[i], 1);
  return s;
}

bool is_contiguous_layout(const std::vector<int64_t>& shape, const Strides& strides) {
  if (strides.size() != shape.size()) return true;  // no layout recorded: a fresh tensor
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 0) return true;
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

std::optional<Strides> view_strides(const std::vector<int64_t>& shape, const Strides& strides,
                                    const std::vector<int64_t>& to) {
  if (strides.size() != shape.size() || product(shape, 0, shape.size()) != product(to, 0, to.size()))
    return std::nullopt;
  if (shape.empty() || product(shape, 0, shape.size()) == 0) return contiguous_strides(to);
  Strides out(to.size(), 1);
  // Walk the old dimensions from the last, in runs whose strides chain (stride[d - 1] == size[d] x stride[d]); each
  // run must be covered exactly by a run of the new dimensions, which then chain from the run's innermost stride.
  int64_t view_d = static_cast<int64_t>(to.size()) - 1;
  int64_t base = strides.back();
  uint64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= static_cast<uint64_t>(shape[d]);
    const bool run_ends = d == 0 || (shape[d - 1] != 1 && strides[d - 1] != static_cast<int64_t>(tensor_numel) * base);
    if (!run_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || to[view_d] == 1)) {
      out[view_d] = static_cast<int64_t>(view_numel) * base;
      view_numel *= static_cast<uint64_t>(to[view_d]);
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      base = strides[d - 1];
      tensor_numel = view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

Strides view_output_strides(const Graph& g, const Node& n, int32_t out, const Strides& in) {
  const std::vector<int64_t>& from = g.tensors[n.inputs[0]].shape;
  const std::vector<int64_t>& to = g.tensors[out].shape;
  const Strides src = in.size() == from.size() ? in : contiguous_strides(from);
  if (n.op_type == "Transpose") {
    Strides s(to.size());
    const auto it = n.attributes.find("perm");
    for (size_t i = 0; i < to.size(); ++i) {
      const size_t axis = it != n.attributes.end() && i < it->second.ints.size()
                              ? static_cast<size_t>(normalized_axis(it->second.ints[i], from.size()))
                              : to.size() - 1 - i;
      s[i] = axis < src.size() ? src[axis] : 1;
    }
    return s;
  }
  if (n.op_type == "Split" || n.op_type == "Slice") {
    if (to.size() != from.size()) return contiguous_strides(to);
    Strides s = src;
    const std::vector<int64_t>* axes = n.op_type == "Slice" ? known_ints(g, n, 3) : nullptr;
    const std::vector<int64_t>* steps = n.op_type == "Slice" ? known_ints(g, n, 4) : nullptr;
    for (size_t i = 0; steps && i < steps->size(); ++i) {
      const int64_t axis = normalized_axis(axes && i < axes->size() ? (*axes)[i] : static_cast<int64_t>(i), from.size());
      if (axis >= 0 && axis < static_cast<int64_t>(s.size())) s[axis] *= (*steps)[i];
    }
    return s;
  }
  if (n.op_type == "Expand") return expanded_strides(from, src, to);
  if (n.op_type == "Gather" && to.size() + 1 == from.size()) {  // Tensor.select
    Strides s = src;
    s.erase(s.begin() + normalized_axis(n.int_attribute("axis", 0), from.size()));
    return s;
  }
  if (to == from) return src;
  return view_strides(from, src, to).value_or(contiguous_strides(to));
}

std::vector<MatmulCopy> matmul_operand_copies(const Graph& g, const Node& n,
                                              const std::function<Strides(int32_t)>& strides_of) {
  std::vector<MatmulCopy> copies;
  if (n.op_type != "MatMul" || n.inputs.size() < 2 || n.inputs[0] < 0 || n.inputs[1] < 0) return copies;
  const int32_t a = n.inputs[0], b = n.inputs[1];
  const std::vector<int64_t>& sa = g.tensors[a].shape;
  const std::vector<int64_t>& sb = g.tensors[b].shape;
  auto needs_copy = [&](int32_t t, const std::vector<int64_t>& shape, const Strides& strides,
                        const std::vector<int64_t>& to) {
    if (!view_strides(shape, strides, to)) copies.push_back({t, product(to, 0, to.size())});
  };
  if (sa.size() >= 3 && sb.size() <= 2) {  // the fold: a.reshape(-1, k) @ b
    const Strides s = strides_of(a);
    if (s.size() == sa.size())
      needs_copy(a, sa, s, {static_cast<int64_t>(product(sa, 0, sa.size() - 1)), sa.back()});
    return copies;
  }
  if (sa.size() < 3 || sb.size() < 2) return copies;  // mm, mv, dot; a 2-D left operand by a batch: not modelled
  // The broadcast batch of both operands' leading dimensions (at::infer_size), then each operand expanded to it and
  // reshaped to [batch, rows, cols].
  const size_t batch_rank = std::max(sa.size(), sb.size()) - 2;
  std::vector<int64_t> batch(batch_rank, 1);
  for (const std::vector<int64_t>* s : {&sa, &sb})
    for (size_t i = 0; i + 2 < s->size(); ++i) {
      const size_t j = batch_rank - (s->size() - 2) + i;
      batch[j] = std::max(batch[j], (*s)[i]);
    }
  const int64_t batch_elements = static_cast<int64_t>(product(batch, 0, batch.size()));
  for (const int32_t t : {a, b}) {
    const std::vector<int64_t>& shape = g.tensors[t].shape;
    const Strides own = strides_of(t);
    if (own.size() != shape.size()) continue;
    std::vector<int64_t> expanded = batch;
    expanded.insert(expanded.end(), shape.end() - 2, shape.end());
    needs_copy(t, expanded, expanded_strides(shape, own, expanded), {batch_elements, shape[shape.size() - 2], shape.back()});
  }
  return copies;
}

}  // namespace memplan
