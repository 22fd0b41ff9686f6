// What every memplan fuzz target treats as a finding, and the helpers the model targets share.
//
// The contract under test (helper brief, "Bad input never crashes"): any input either succeeds or throws
// memplan::InputError (exit 2). A crash, a sanitizer report, an InternalError (exit 3: an invariant of
// memplan failed), any other exception, or a property of a result that its header promises and that does
// not hold is a finding: the target prints one line naming it and aborts, so libFuzzer saves the input.
#pragma once

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "onnx_import/errors.h"
#include "onnx_import/graph.h"
#include "onnx_import/import.h"
#include "onnx_import/model_overview.h"

namespace memplan::fuzz {

[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "memplan fuzz finding: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

inline void require(bool ok, const std::string& what) {
  if (!ok) finding(what);
}

// Runs `body`; an InputError is the expected answer to bad input, everything else escaping is a finding.
template <class Body>
void expect_success_or_input_error(Body&& body) {
  try {
    body();
  } catch (const InputError&) {
    // the documented outcome for bad input (exit 2)
  } catch (const InternalError& e) {
    finding(std::string("InternalError (exit 3): ") + e.what());
  } catch (const Error& e) {
    finding(std::string("memplan::Error with exit code ") + std::to_string(e.exit_code()) + ": " + e.what());
  } catch (const std::exception& e) {
    finding(std::string("exception that is not memplan::InputError: ") + e.what());
  }
}

// The dimension value every free dimension is bound to: small, so the analysis of a mutated model stays
// fast, and above 1, so broadcasting and Reshape still see a real size.
inline constexpr int64_t kFuzzDimValue = 2;

// Binds every named symbolic dimension of the graph inputs, and fixes the whole shape of inputs that have
// an unnamed dimension ("?"), as a user would with --dim and --input.
inline Bindings bind_every_dim(const ModelOverview& overview) {
  Bindings b;
  for (const DeclaredValue& v : overview.inputs) {
    bool has_unnamed = false;
    std::vector<int64_t> shape;
    for (const std::string& d : v.dims) {
      const bool numeric = !d.empty() && (std::isdigit(static_cast<unsigned char>(d[0])) || d[0] == '-');
      if (numeric) {
        shape.push_back(std::strtoll(d.c_str(), nullptr, 10));
      } else {
        if (d == "?") has_unnamed = true;
        else b.dims[d] = kFuzzDimValue;
        shape.push_back(kFuzzDimValue);
      }
    }
    if (has_unnamed) b.input_shapes[v.name] = shape;
  }
  return b;
}

// The promises graph.h makes about an imported Graph: ids in range, nodes in a topological order,
// producers and consumers consistent, every shape concrete and non-negative, sizes computable.
inline void check_graph(const Graph& g) {
  const auto n_tensors = static_cast<int64_t>(g.tensors.size());
  const auto n_nodes = static_cast<int64_t>(g.nodes.size());
  auto tensor_id_ok = [&](int32_t id) { return id >= 0 && id < n_tensors; };
  for (int64_t n = 0; n < n_nodes; ++n) {
    const Node& node = g.nodes[static_cast<size_t>(n)];
    for (int32_t in : node.inputs) {
      if (in == -1) continue;
      require(tensor_id_ok(in), "node '" + node.name + "' reads tensor id " + std::to_string(in) + " out of range");
      const int32_t producer = g.tensors[static_cast<size_t>(in)].producer;
      require(producer < n, "node '" + node.name + "' reads '" + g.tensors[static_cast<size_t>(in)].name +
                                "' before its producer: nodes are not in topological order");
    }
    for (int32_t out : node.outputs) {
      if (out == -1) continue;
      require(tensor_id_ok(out), "node '" + node.name + "' writes tensor id out of range");
      require(g.tensors[static_cast<size_t>(out)].producer == n,
              "tensor '" + g.tensors[static_cast<size_t>(out)].name + "' does not name its producer '" + node.name + "'");
    }
  }
  for (const Tensor& t : g.tensors) {
    require(t.producer >= -1 && t.producer < n_nodes, "tensor '" + t.name + "' has a producer out of range");
    for (int64_t d : t.shape) require(d >= 0, "tensor '" + t.name + "' has a negative dimension after import");
    for (int32_t c : t.consumers) require(c >= 0 && c < n_nodes, "tensor '" + t.name + "' has a consumer out of range");
    t.bytes();  // may throw ShapeOverflow (an InputError): the caller expects it
  }
  for (int32_t id : g.inputs) require(tensor_id_ok(id), "graph input id out of range");
  for (int32_t id : g.outputs) require(tensor_id_ok(id), "graph output id out of range");
  for (int32_t id : g.initializers) require(tensor_id_ok(id), "initializer id out of range");
}

}  // namespace memplan::fuzz
