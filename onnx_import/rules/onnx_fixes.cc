// Ops whose ONNX 1.12 schema inference leaves the output shape unknown or gets it wrong, found by the
// conformance test (tests/import/conformance_test.cc): shapes from the ONNX operator specs.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <map>

#include "onnx_import/rules/rules.h"

namespace memplan::shape {
namespace {

// LessOrEqual / GreaterOrEqual (12, function ops without inference in 1.12): broadcast, bool.
bool compare(NodeContext& ctx) {
  ctx.set_output(0, DType::Bool, ctx.broadcast({ctx.required(0).shape, ctx.required(1).shape}));
  return true;
}

// Compress: the selected length is the number of true entries of the (known) condition; without an
// axis the input is flattened first.
bool compress(NodeContext& ctx) {
  const Value& x = ctx.required(0);
  const auto cond = ctx.input_ints(1);
  if (!cond) return false;  // data-dependent: the declared shape, else an error naming the output
  const int64_t count = std::count_if(cond->begin(), cond->end(), [](int64_t c) { return c != 0; });
  if (const auto* a = ctx.attr("axis")) {
    auto shape = x.shape;
    shape[ctx.axis(a->i(), shape.size())] = count;
    ctx.set_output(0, x.dtype, std::move(shape));
  } else {
    ctx.set_output(0, x.dtype, {count});
  }
  return true;
}

// OneHot: indices' shape with `depth` inserted at `axis` (of the output's rank); the values' dtype.
bool one_hot(NodeContext& ctx) {
  const Value& indices = ctx.required(0);
  const auto depth = ctx.input_ints(1);
  if (!depth || depth->size() != 1) return false;
  if ((*depth)[0] < 0) ctx.fail("depth is negative");
  auto shape = indices.shape;
  const int64_t axis = ctx.axis(ctx.attr_int("axis", -1), shape.size() + 1);
  shape.insert(shape.begin() + axis, (*depth)[0]);
  ctx.set_output(0, ctx.required(2).dtype, std::move(shape));
  return true;
}

// MaxUnpool with an output_shape input: exactly that shape.
bool max_unpool(NodeContext& ctx) {
  const auto out = ctx.input_ints(2);
  if (!out) return false;
  ctx.set_output(0, ctx.required(0).dtype, *out);
  return true;
}

// STFT-17: signal [batch, length, 1|2], frame_step, window [frame_length]?, frame_length? ->
// [batch, frames, bins, 2], frames = (length - frame_length) / frame_step + 1, bins = frame_length/2 + 1
// when onesided (the default), else frame_length.
bool stft(NodeContext& ctx) {
  const Value& x = ctx.required(0);
  const auto step = ctx.input_ints(1);
  if (x.shape.size() != 3 || !step || step->size() != 1 || (*step)[0] <= 0) return false;
  int64_t frame_length = -1;
  if (const auto fl = ctx.input_ints(3); fl && fl->size() == 1) frame_length = (*fl)[0];
  else if (const Value* w = ctx.input(2); w && w->shape.size() == 1) frame_length = w->shape[0];
  if (frame_length <= 0 || frame_length > x.shape[1]) return false;
  const int64_t frames = (x.shape[1] - frame_length) / (*step)[0] + 1;
  const int64_t bins = ctx.attr_int("onesided", 1) ? frame_length / 2 + 1 : frame_length;
  ctx.set_output(0, x.dtype, {x.shape[0], frames, bins, 2});
  return true;
}

// StringNormalizer without stopwords keeps every string: the input's shape.
bool string_normalizer(NodeContext& ctx) {
  const auto* stop = ctx.attr("stopwords");
  if (stop && stop->strings_size() > 0) return false;  // the kept count depends on the strings
  ctx.set_output(0, DType::String, ctx.required(0).shape);
  return true;
}

// Einsum: letters name dims; "..." stands for broadcast leading dims. Without "->" the output is the
// ellipsis dims then the letters used exactly once, in alphabetical order (numpy's implicit mode).
bool einsum(NodeContext& ctx) {
  std::string eq = ctx.attr_string("equation", "");
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != ctx.num_inputs()) ctx.fail("the equation names " + std::to_string(terms.size()) + " operands");
  std::map<char, int64_t> dim;
  std::map<char, int> uses;
  std::vector<std::vector<int64_t>> ellipses;
  for (size_t i = 0; i < terms.size(); ++i) {
    const auto& shape = ctx.required(i).shape;
    const std::string& t = terms[i];
    const size_t dots = t.find("...");
    const size_t letters = t.size() - (dots == std::string::npos ? 0 : 3);
    if (letters > shape.size()) ctx.fail("operand " + std::to_string(i) + " has fewer dims than its subscripts");
    const size_t ell = dots == std::string::npos ? 0 : shape.size() - letters;
    if (dots == std::string::npos && letters != shape.size()) ctx.fail("operand " + std::to_string(i) + " rank differs from its subscripts");
    size_t axis = 0;
    for (size_t c = 0; c < t.size();) {
      if (c == dots) {
        ellipses.emplace_back(shape.begin() + axis, shape.begin() + axis + ell);
        axis += ell;
        c += 3;
        continue;
      }
      const char l = t[c++];
      const int64_t d = shape[axis++];
      ++uses[l];
      auto [it, fresh] = dim.emplace(l, d);
      if (!fresh && it->second != d) {
        if (it->second == 1) it->second = d;
        else if (d != 1) ctx.fail(std::string("subscript '") + l + "' has sizes " + std::to_string(it->second) + " and " + std::to_string(d));
      }
    }
  }
  const std::vector<int64_t> ellipsis = ctx.broadcast(ellipses);
  std::vector<int64_t> out;
  if (arrow == std::string::npos) {
    if (!ellipses.empty()) out = ellipsis;
    for (const auto& [l, n] : uses)
      if (n == 1) out.push_back(dim[l]);
  } else {
    const std::string rhs = eq.substr(arrow + 2);
    for (size_t c = 0; c < rhs.size();) {
      if (rhs.compare(c, 3, "...") == 0) {
        out.insert(out.end(), ellipsis.begin(), ellipsis.end());
        c += 3;
        continue;
      }
      auto it = dim.find(rhs[c]);
      if (it == dim.end()) ctx.fail(std::string("output subscript '") + rhs[c] + "' names no input dim");
      out.push_back(it->second);
      ++c;
    }
  }
  ctx.set_output(0, ctx.required(0).dtype, std::move(out));
  return true;
}

// Gradient (ai.onnx.preview.training): output i is the gradient of `y` with respect to xs[i], so it has
// that tensor's shape and dtype.
bool gradient(NodeContext& ctx) {
  const auto* xs = ctx.attr("xs");
  if (!xs) ctx.fail("has no xs attribute");
  for (int i = 0; i < xs->strings_size() && static_cast<size_t>(i) < ctx.num_outputs(); ++i) {
    const Value* x = ctx.subgraphs().lookup(xs->strings(i));
    if (!x) ctx.fail("xs names '" + xs->strings(i) + "', which is not a tensor in scope");
    ctx.set_output(i, x->dtype, x->shape);
  }
  return true;
}

}  // namespace

void register_onnx_fix_rules(RuleTable& t) {
  t[""]["LessOrEqual"] = compare;
  t[""]["GreaterOrEqual"] = compare;
  t[""]["MeanVarianceNormalization"] = same_as_first;  // a function op without inference in 1.12
  t[""]["Compress"] = compress;
  t[""]["OneHot"] = one_hot;
  t[""]["MaxUnpool"] = max_unpool;
  t[""]["STFT"] = stft;
  t[""]["StringNormalizer"] = string_normalizer;
  t[""]["Einsum"] = einsum;
  t["ai.onnx.preview.training"]["Gradient"] = gradient;
}

}  // namespace memplan::shape
