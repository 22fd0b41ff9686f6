#include "cost_models/kv_cache.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "cost_models/graph_facts.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {
namespace {

// Probe values: small, and the probe one token above the base.
constexpr int64_t kBaseTokens = 3;

struct Symbols {
  std::set<std::string> all;       // every dim_param of the graph inputs
  std::set<std::string> tokenish;  // those at some axis other than 0 (axis 0 is the batch)
  std::set<std::string> leading;   // those at axis 0: the batch
  std::map<std::string, std::string> leading_of;  // input -> its axis 0's dim_param, when it has one
};

Symbols input_symbols(ModelSession& model) {
  Symbols s;
  for (const DeclaredInput& in : model.declared_inputs())
    for (size_t a = 0; a < in.dims.size(); ++a) {
      const std::string& d = in.dims[a];
      if (d.empty()) continue;
      s.all.insert(d);
      (a > 0 ? s.tokenish : s.leading).insert(d);
      if (a == 0) s.leading_of[in.name] = d;
    }
  return s;
}

// ORT GenAI's and our zoo's name for past + new tokens (the attention mask's length), a plain dim_param that the
// importer cannot derive (summed_dim_terms: it names no terms): the cache's steps bind it.
constexpr const char* kTotalTokens = "total_sequence_length";

bool derived_here(const std::string& s) { return !summed_dim_terms(s).empty() || s == kTotalTokens; }

// total_sequence_length = the sum of the token dimensions it totals (the cached and the new), as bound in `b`.
void bind_total(Bindings& b, const std::vector<std::string>& parts) {
  int64_t total = 0;
  for (const std::string& s : parts) total += b.dims.at(s);
  b.dims[kTotalTokens] = total;
}

std::string join(const std::vector<std::string>& v) {
  std::string r;
  for (const std::string& x : v) r += (r.empty() ? "" : ", ") + x;
  return r;
}

const Tensor& tensor(const Graph& g, const std::string& name) { return g.tensors[*g.find_tensor(name)]; }

// One past/present pair as two probes see it: the input grows by one token along `axis` from g0 to g1, the
// output has the input's shape but `delta` more tokens along that axis in both.
struct Pair {
  std::string input, output;
  int axis = 0;
  int64_t delta = 0;
};

std::optional<int> grown_axis(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  if (a.size() != b.size()) return std::nullopt;
  std::optional<int> axis;
  for (size_t k = 0; k < a.size(); ++k) {
    if (a[k] == b[k]) continue;
    if (axis || b[k] != a[k] + 1) return std::nullopt;
    axis = static_cast<int>(k);
  }
  return axis;
}

bool same_but(const std::vector<int64_t>& x, const std::vector<int64_t>& y, int axis) {
  if (x.size() != y.size()) return false;
  for (size_t k = 0; k < x.size(); ++k)
    if (static_cast<int>(k) != axis && x[k] != y[k]) return false;
  return true;
}

std::vector<Pair> pairs_along(const Graph& g0, const Graph& g1) {
  std::vector<Pair> pairs;
  std::set<int32_t> used;
  for (int32_t in : g0.inputs) {
    const Tensor& x0 = g0.tensors[in];
    const auto x1_id = g1.find_tensor(x0.name);
    if (!x1_id) continue;
    const Tensor& x1 = g1.tensors[*x1_id];
    const std::optional<int> axis = grown_axis(x0.shape, x1.shape);
    if (!axis) continue;
    for (int32_t out : g0.outputs) {
      const Tensor& y0 = g0.tensors[out];
      if (used.count(out) || y0.dtype != x0.dtype || !same_but(x0.shape, y0.shape, *axis)) continue;
      const int64_t delta = y0.shape[*axis] - x0.shape[*axis];
      const auto y1_id = g1.find_tensor(y0.name);
      if (delta <= 0 || !y1_id) continue;
      const Tensor& y1 = g1.tensors[*y1_id];
      if (!same_but(x1.shape, y1.shape, *axis) || y1.shape[*axis] - x1.shape[*axis] != delta) continue;
      used.insert(out);
      pairs.push_back({x0.name, y0.name, *axis, delta});
      break;
    }
  }
  return pairs;
}

// A past input of the cache at the base binding (one sequence, kBaseTokens cached) and one cached token more,
// with its present output: what KvCache's facts are read from, whether the pair was probed or stated.
struct PastInput {
  std::string input, output;
  int axis = 0;
  Tensor base, grown;
};

KvCache describe_cache(const std::string& cached_dim, const std::string& new_dim, const std::vector<PastInput>& pairs,
                       const Symbols& symbols, const std::set<std::string>& user_bound, DType float_dtype) {
  KvCache kv;
  kv.cached_dim = cached_dim;
  kv.new_dim = new_dim;
  for (const std::string& s : symbols.all)
    if (!user_bound.count(s) && derived_here(s)) kv.derived.push_back(s);
  for (const PastInput& p : pairs) {
    kv.pairs.emplace_back(p.input, p.output);
    // [batch, kv_heads, tokens, head_dim]: the heads are axis 1 when the tokens are axis 2 of a rank-4 cache.
    const std::vector<int64_t>& past = p.base.shape;
    const int64_t heads = past.size() == 4 && p.axis == 2 ? past[1] : 0;
    kv.kv_heads = &p == &pairs.front() || kv.kv_heads == heads ? heads : 0;
    const int64_t dim = heads > 0 ? past[3] : 0;
    kv.head_dim = &p == &pairs.front() || kv.head_dim == dim ? dim : 0;
    if (const auto lead = symbols.leading_of.find(p.input);
        lead != symbols.leading_of.end() &&
        std::find(kv.batch_dims.begin(), kv.batch_dims.end(), lead->second) == kv.batch_dims.end())
      kv.batch_dims.push_back(lead->second);
    const DType stored = storage_dtype(p.base.dtype, float_dtype);
    kv.bytes_per_token = checked_add(kv.bytes_per_token, bytes_as(p.grown, stored) - bytes_as(p.base, stored));
  }
  return kv;
}

// The cache the model's source states (a config.json's decode graph: ModelSession::stated_kv_cache), read off the
// declared inputs without shaping the graph, which for a mixture of experts takes seconds a binding. What the
// probes of find_kv_cache find on such a graph (tests/cost_models/kv_cache_test.cc compares them), used only
// where they would look: both of its dimensions free, --kv-dim naming it or nothing, every other axis a number.
std::optional<KvCache> stated_cache(ModelSession& model, const std::vector<std::string>& free,
                                    const std::string& cached_dim, const Symbols& symbols,
                                    const std::set<std::string>& user_bound, DType float_dtype) {
  const StatedKvCache& stated = model.stated_kv_cache();
  const auto is_free = [&](const std::string& s) { return std::find(free.begin(), free.end(), s) != free.end(); };
  if (stated.pairs.empty() || !is_free(stated.cached_dim) || !is_free(stated.new_dim) ||
      (!cached_dim.empty() && cached_dim != stated.cached_dim))
    return std::nullopt;
  std::map<std::string, const DeclaredInput*> declared;
  for (const DeclaredInput& in : model.declared_inputs()) declared[in.name] = &in;
  std::vector<PastInput> pairs;
  for (const auto& [input, output] : stated.pairs) {
    const auto it = declared.find(input);
    if (it == declared.end() || it->second->dtype == DType::Undefined) return std::nullopt;
    const DeclaredInput& in = *it->second;
    PastInput p{input, output, stated.axis, {}, {}};
    p.base.name = input;
    p.base.dtype = in.dtype;
    for (size_t a = 0; a < in.values.size(); ++a) {
      const int64_t v = a == 0 ? 1 : static_cast<int>(a) == stated.axis ? kBaseTokens : in.values[a];
      if (v < 0) return std::nullopt;
      p.base.shape.push_back(v);
    }
    if (static_cast<size_t>(stated.axis) >= p.base.shape.size() || stated.axis == 0) return std::nullopt;
    p.grown = p.base;
    ++p.grown.shape[static_cast<size_t>(stated.axis)];
    pairs.push_back(std::move(p));
  }
  return describe_cache(stated.cached_dim, stated.new_dim, pairs, symbols, user_bound, float_dtype);
}

}  // namespace

std::vector<std::string> KvCache::tensors() const {
  std::vector<std::string> t;
  for (const auto& [in, out] : pairs) {
    t.push_back(in);
    t.push_back(out);
  }
  return t;
}

Bindings kv_step_bindings(const Bindings& user, const KvCache& kv, int64_t batch, int64_t cached, int64_t fresh) {
  Bindings b = user;
  b.batch = batch;
  b.dims[kv.cached_dim] = cached;
  b.dims[kv.new_dim] = fresh;
  for (const std::string& s : kv.derived) b.dims.erase(s);  // the importer binds a sum from its terms
  if (std::count(kv.derived.begin(), kv.derived.end(), kTotalTokens)) bind_total(b, {kv.cached_dim, kv.new_dim});
  return b;
}

KvCache find_kv_cache(ModelSession& model, const Bindings& user, const std::string& cached_dim, DType float_dtype) {
  const std::string& path = model.path();
  const Symbols symbols = input_symbols(model);
  std::vector<std::string> free;  // the token-like dimensions the user left free: the candidates
  std::set<std::string> user_bound;
  for (const auto& [name, value] : user.dims) user_bound.insert(name);
  for (const std::string& s : symbols.tokenish)
    if (!user.dims.count(s) && !derived_here(s)) free.push_back(s);
  if (!cached_dim.empty() && !symbols.all.count(cached_dim))
    throw InputError("--kv-dim " + cached_dim + ": the inputs of " + path + " have no symbolic dimension " + cached_dim +
                     (symbols.all.empty() ? std::string(" (they have none)")
                                          : " (they have: " + join({symbols.all.begin(), symbols.all.end()}) + ")"));
  if (std::optional<KvCache> kv = stated_cache(model, free, cached_dim, symbols, user_bound, float_dtype)) return *kv;
  Bindings base = user;
  base.batch = 1;
  for (const std::string& s : free) base.dims[s] = kBaseTokens;
  const bool total_free = symbols.all.count(kTotalTokens) && !user_bound.count(kTotalTokens);
  if (total_free) bind_total(base, free);
  const std::shared_ptr<const Graph> shaped0 = model.shape(base);
  const Graph& g0 = *shaped0;
  // Each dimension's probe is shaped once and kept: the search for the new tokens below probes the same
  // dimensions again, and a 128-expert graph takes seconds to shape. Its peak is no higher (it held them too).
  std::map<std::string, std::shared_ptr<const Graph>> probed;
  auto probe = [&](const std::string& s) -> std::shared_ptr<const Graph> {
    if (const auto it = probed.find(s); it != probed.end()) return it->second;
    Bindings b = base;
    b.dims[s] = kBaseTokens + 1;
    if (total_free) bind_total(b, free);
    std::shared_ptr<const Graph> g;
    try {
      g = model.shape(b);
    } catch (const InputError&) {
      // a dimension the model ties to another (it cannot grow alone): not the cache's
    }
    return probed[s] = g;
  };

  std::map<std::string, std::pair<std::shared_ptr<const Graph>, std::vector<Pair>>> cached;  // candidate -> (probe, its pairs)
  std::vector<std::string> found;
  for (const std::string& s : free) {
    std::shared_ptr<const Graph> g1 = probe(s);
    if (!g1) continue;
    std::vector<Pair> pairs = pairs_along(g0, *g1);
    if (pairs.empty()) continue;
    found.push_back(s);
    cached.emplace(s, std::make_pair(std::move(g1), std::move(pairs)));
  }
  const std::string no_cache =
      path + " has no past/present key-value inputs: no graph input has a graph output of its shape grown along one "
             "axis by the new tokens (serve needs a decoder exported with its KV cache, e.g. optimum's "
             "past_key_values.{i}.key/value inputs and present.{i}.key/value outputs)";
  if (found.empty()) throw InputError(no_cache);
  std::string dim = cached_dim;
  if (dim.empty()) {
    if (found.size() > 1)
      throw InputError(path + " caches tokens along several dimensions (" + join(found) +
                       "): name the one that counts cached tokens with --kv-dim NAME");
    dim = found.front();
  } else if (!cached.count(dim)) {
    throw InputError("--kv-dim " + dim + ": no past/present key-value pair of " + path + " grows along " + dim +
                     " (they grow along: " + join(found) + ")");
  }
  const auto& [g1, pairs] = cached.at(dim);

  // The new tokens: the one other free dimension that lengthens every present output beyond its past input.
  std::vector<std::string> fresh;
  for (const std::string& s : free) {
    if (s == dim) continue;
    const std::shared_ptr<const Graph> gs = probe(s);
    if (!gs) continue;
    const bool grows = std::all_of(pairs.begin(), pairs.end(), [&](const Pair& p) {
      const Tensor& x = tensor(*gs, p.input);
      const Tensor& y = tensor(*gs, p.output);
      return x.shape == tensor(g0, p.input).shape && y.shape[p.axis] - x.shape[p.axis] == p.delta + 1;
    });
    if (grows) fresh.push_back(s);
  }
  if (fresh.size() != 1)
    throw InputError(path + ": the present outputs of its KV cache (along " + dim + ") grow by " +
                     (fresh.empty() ? std::string("no free input dimension") : "several dimensions (" + join(fresh) + ")") +
                     "; serve needs one dimension that counts the step's new tokens" +
                     (user.dims.empty() ? std::string() : " (serve binds the cached and new tokens itself: --dim only the others)"));

  std::vector<PastInput> past;
  for (const Pair& p : pairs)
    past.push_back({p.input, p.output, p.axis, tensor(g0, p.input), tensor(*g1, p.input)});
  return describe_cache(dim, fresh.front(), past, symbols, user_bound, float_dtype);
}

bool may_have_kv_cache(const Graph& g) {
  for (int32_t in : g.inputs)
    for (int32_t out : g.outputs) {
      const Tensor& x = g.tensors[in];
      const Tensor& y = g.tensors[out];
      if (x.dtype != y.dtype || x.shape.size() != y.shape.size() || x.shape.empty()) continue;
      int longer = 0;
      bool other = false;
      for (size_t k = 0; k < x.shape.size(); ++k) {
        if (y.shape[k] > x.shape[k]) ++longer;
        else if (y.shape[k] != x.shape[k]) other = true;
      }
      if (longer == 1 && !other) return true;
    }
  return false;
}

Bindings kv_probe_bindings(ModelSession& model, const Bindings& user) {
  Bindings probe = user;
  const Symbols symbols = input_symbols(model);
  for (const auto* set : {&symbols.tokenish, &symbols.leading})
    for (const std::string& s : *set) probe.dims.erase(s);
  return probe;
}

}  // namespace memplan
