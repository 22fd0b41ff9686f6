// Element-wise evaluators with numpy broadcasting (onnx/docs/Broadcasting.md): binary arithmetic and
// comparisons, the variadic Max/Min/Sum/Mean, unary math, Where. Integer inputs are computed in int64
// (overflow leaves the output unknown), anything else in double.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "onnx_import/values/values.h"

namespace memplan::shape::values {
namespace {

// Evaluates a binary op: in integer arithmetic when both inputs are integers (and the op has an integer
// form), else in double. `int_fn` returns nullopt where the result is undefined (division by zero).
template <typename IntFn, typename RealFn>
void binary(const EvalContext& c, IntFn int_fn, RealFn real_fn) {
  const Inputs& in = c.in;
  if (!c.known(0) || !c.known(1) || !broadcastable(*in[0], c.out) || !broadcastable(*in[1], c.out)) return;
  const auto ma = broadcast_map(in[0]->shape, c.out.shape), mb = broadcast_map(in[1]->shape, c.out.shape);
  if constexpr (!std::is_same_v<IntFn, std::nullptr_t>) {
    if (in[0]->ints && in[1]->ints) {
      std::vector<int64_t> r(ma.size());
      for (size_t i = 0; i < r.size(); ++i) {
        const std::optional<int64_t> x = int_fn((*in[0]->ints)[ma[i]], (*in[1]->ints)[mb[i]]);
        if (!x) return;  // division by zero and the like: unknown
        r[i] = *x;
      }
      store_ints(c.out, std::move(r));
      return;
    }
  }
  std::vector<double> r(ma.size());
  for (size_t i = 0; i < r.size(); ++i) r[i] = real_fn(real_at(*in[0], ma[i]), real_at(*in[1], mb[i]));
  store_reals(c.out, r);
}

// A comparison or logical op: the same predicate on int64 and on double.
template <typename Pred>
void predicate(const EvalContext& c, Pred p) {
  binary(c, [p](int64_t a, int64_t b) { return std::optional<int64_t>(p(a, b)); },
         [p](double a, double b) { return double(p(a, b)); });
}

// Mod: fmod=0 takes the sign of the divisor (Python's %), fmod=1 that of the dividend (C's fmod).
template <typename T>
T mod_result(T r, T b, bool fmod) {
  if (!fmod && r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

void mod(const EvalContext& c) {
  const bool fmod = c.attr_int("fmod", 0) != 0;
  binary(c,
         [fmod](int64_t a, int64_t b) -> std::optional<int64_t> {
           if (b == 0 || (a == INT64_MIN && b == -1)) return std::nullopt;
           return mod_result(a % b, b, fmod);
         },
         [fmod](double a, double b) { return mod_result(std::fmod(a, b), b, fmod); });
}

// Max, Min, Sum, Mean: variadic with broadcasting. Mean is always computed in double.
enum class Fold { Max, Min, Sum, Mean };

template <Fold F>
void variadic(const EvalContext& c) {
  const Inputs& in = c.in;
  if (in.empty()) return;
  for (size_t i = 0; i < in.size(); ++i)
    if (!c.known(i) || !broadcastable(*in[i], c.out)) return;
  auto fold = [](auto acc, auto x) {
    if constexpr (F == Fold::Max) return std::max(acc, x);
    else if constexpr (F == Fold::Min) return std::min(acc, x);
    else return acc + x;
  };
  const uint64_t n = c.out.elements();
  const bool ints = std::all_of(in.begin(), in.end(), [](const Value* v) { return v->ints.has_value(); });
  std::vector<std::vector<size_t>> maps;
  for (const Value* v : in) maps.push_back(broadcast_map(v->shape, c.out.shape));
  if (ints && F != Fold::Mean) {
    std::vector<int64_t> r(n);
    for (size_t i = 0; i < n; ++i) {
      __int128 acc = (*in[0]->ints)[maps[0][i]];
      for (size_t k = 1; k < in.size(); ++k) acc = fold(acc, static_cast<__int128>((*in[k]->ints)[maps[k][i]]));
      const auto v = checked_int(acc);
      if (!v) return;
      r[i] = *v;
    }
    store_ints(c.out, std::move(r));
    return;
  }
  std::vector<double> r(n);
  for (size_t i = 0; i < n; ++i) {
    double acc = real_at(*in[0], maps[0][i]);
    for (size_t k = 1; k < in.size(); ++k) acc = fold(acc, real_at(*in[k], maps[k][i]));
    r[i] = F == Fold::Mean ? acc / static_cast<double>(in.size()) : acc;
  }
  store_reals(c.out, r);
}

// A unary op: `int_fn` (when the op has an integer form; nullopt leaves the output unknown) on integer
// contents, else `real_fn` in double.
using IntUnary = std::optional<int64_t> (*)(int64_t);
using RealUnary = double (*)(double);

void unary(const EvalContext& c, IntUnary int_fn, RealUnary real_fn) {
  if (!c.known(0) || c.in[0]->elements() != c.out.elements()) return;
  const Value& x = *c.in[0];
  if (x.ints && int_fn) {
    std::vector<int64_t> r(x.ints->size());
    for (size_t i = 0; i < r.size(); ++i) {
      const auto v = int_fn((*x.ints)[i]);
      if (!v) return;
      r[i] = *v;
    }
    store_ints(c.out, std::move(r));
    return;
  }
  std::vector<double> r(x.elements());
  for (size_t i = 0; i < r.size(); ++i) r[i] = real_fn(real_at(x, i));
  store_reals(c.out, r);
}

std::optional<int64_t> int_same(int64_t v) { return v; }  // Floor, Ceil, Round of an integer

void where(const EvalContext& c) {
  const Inputs& in = c.in;
  for (size_t i = 0; i < 3; ++i)
    if (!c.known(i) || !broadcastable(*in[i], c.out)) return;
  const auto mc = broadcast_map(in[0]->shape, c.out.shape), mx = broadcast_map(in[1]->shape, c.out.shape),
             my = broadcast_map(in[2]->shape, c.out.shape);
  if (in[1]->ints && in[2]->ints) {
    std::vector<int64_t> r(mc.size());
    for (size_t i = 0; i < r.size(); ++i) r[i] = int_at(*in[0], mc[i]) ? (*in[1]->ints)[mx[i]] : (*in[2]->ints)[my[i]];
    store_ints(c.out, std::move(r));
  } else {
    std::vector<double> r(mc.size());
    for (size_t i = 0; i < r.size(); ++i) r[i] = int_at(*in[0], mc[i]) ? real_at(*in[1], mx[i]) : real_at(*in[2], my[i]);
    store_reals(c.out, r);
  }
}

}  // namespace

void register_arith_values(EvalTable& table) {
  auto& t = table[""];
  t["Add"] = [](const EvalContext& c) {
    binary(c, [](int64_t a, int64_t b) { return checked_int(static_cast<__int128>(a) + b); },
           [](double a, double b) { return a + b; });
  };
  t["Sub"] = [](const EvalContext& c) {
    binary(c, [](int64_t a, int64_t b) { return checked_int(static_cast<__int128>(a) - b); },
           [](double a, double b) { return a - b; });
  };
  t["Mul"] = [](const EvalContext& c) {
    binary(c, [](int64_t a, int64_t b) { return checked_int(static_cast<__int128>(a) * b); },
           [](double a, double b) { return a * b; });
  };
  // Integer Div truncates toward zero, as ONNX Runtime's kernel (C++ '/') does.
  t["Div"] = [](const EvalContext& c) {
    binary(c,
           [](int64_t a, int64_t b) -> std::optional<int64_t> {
             if (b == 0 || (a == INT64_MIN && b == -1)) return std::nullopt;
             return a / b;
           },
           [](double a, double b) { return a / b; });
  };
  t["Mod"] = mod;
  t["Pow"] = [](const EvalContext& c) { binary(c, nullptr, [](double a, double b) { return std::pow(a, b); }); };
  t["Equal"] = [](const EvalContext& c) { predicate(c, [](auto a, auto b) { return a == b; }); };
  t["Less"] = [](const EvalContext& c) { predicate(c, [](auto a, auto b) { return a < b; }); };
  t["LessOrEqual"] = [](const EvalContext& c) { predicate(c, [](auto a, auto b) { return a <= b; }); };
  t["Greater"] = [](const EvalContext& c) { predicate(c, [](auto a, auto b) { return a > b; }); };
  t["GreaterOrEqual"] = [](const EvalContext& c) { predicate(c, [](auto a, auto b) { return a >= b; }); };
  t["And"] = [](const EvalContext& c) { predicate(c, [](auto a, auto b) { return a != 0 && b != 0; }); };
  t["Or"] = [](const EvalContext& c) { predicate(c, [](auto a, auto b) { return a != 0 || b != 0; }); };
  t["Xor"] = [](const EvalContext& c) { predicate(c, [](auto a, auto b) { return (a != 0) != (b != 0); }); };

  t["Max"] = variadic<Fold::Max>;
  t["Min"] = variadic<Fold::Min>;
  t["Sum"] = variadic<Fold::Sum>;
  t["Mean"] = variadic<Fold::Mean>;

  t["Neg"] = [](const EvalContext& c) {
    unary(c, [](int64_t v) { return v == INT64_MIN ? std::nullopt : std::optional<int64_t>(-v); },
          [](double v) { return -v; });
  };
  t["Abs"] = [](const EvalContext& c) {
    unary(c, [](int64_t v) { return v == INT64_MIN ? std::nullopt : std::optional<int64_t>(std::abs(v)); },
          [](double v) { return std::fabs(v); });
  };
  t["Not"] = [](const EvalContext& c) {
    unary(c, [](int64_t v) { return std::optional<int64_t>(!v); }, [](double v) { return double(v == 0); });
  };
  t["Sign"] = [](const EvalContext& c) {
    unary(c, [](int64_t v) { return std::optional<int64_t>((v > 0) - (v < 0)); },
          [](double v) { return double((v > 0) - (v < 0)); });
  };
  t["Relu"] = [](const EvalContext& c) {
    unary(c, [](int64_t v) { return std::optional<int64_t>(std::max<int64_t>(v, 0)); },
          [](double v) { return std::max(v, 0.0); });
  };
  t["Floor"] = [](const EvalContext& c) { unary(c, int_same, [](double v) { return std::floor(v); }); };
  t["Ceil"] = [](const EvalContext& c) { unary(c, int_same, [](double v) { return std::ceil(v); }); };
  // ONNX Round: half to even, which std::nearbyint gives in the default rounding mode (FE_TONEAREST).
  t["Round"] = [](const EvalContext& c) { unary(c, int_same, [](double v) { return std::nearbyint(v); }); };
  t["Sqrt"] = [](const EvalContext& c) { unary(c, nullptr, [](double v) { return std::sqrt(v); }); };
  t["Reciprocal"] = [](const EvalContext& c) { unary(c, nullptr, [](double v) { return 1.0 / v; }); };
  t["Exp"] = [](const EvalContext& c) { unary(c, nullptr, [](double v) { return std::exp(v); }); };
  t["Log"] = [](const EvalContext& c) { unary(c, nullptr, [](double v) { return std::log(v); }); };

  t["Where"] = where;
}

}  // namespace memplan::shape::values
