// Binding a graph's inputs to the user's dimensions (--batch, --dim, --input, --value; cli/ and import.h Bindings):
// every graph input that is not an initializer gets a concrete shape, or one error lists every dimension
// left unbound (input_binding.cc; an input bound by --value, input_values.cc). Internal to onnx_import/.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "onnx_import/import.h"
#include "onnx_import/value_eval.h"

namespace onnx {
class GraphProto;
class ValueInfoProto;
}  // namespace onnx

namespace memplan::shape {

class InputBinder {
 public:
  InputBinder(const onnx::GraphProto& graph, const Bindings& b) : graph_(graph), b_(b) {}

  // Shapes every graph input that is not an initializer; throws one InputError listing every unbound dim.
  std::map<std::string, Value> bind(std::map<std::string, int64_t>& symbols);

 private:
  Value bind_one(const onnx::ValueInfoProto& vi, std::map<std::string, int64_t>& symbols);
  Value bind_container(const onnx::ValueInfoProto& vi);
  Value bind_shape(const onnx::ValueInfoProto& vi, std::map<std::string, int64_t>& symbols);
  Value bind_value(const onnx::ValueInfoProto& vi, const Bindings::InputValue& value, std::map<std::string, int64_t>& symbols);
  void check_flags(const std::set<std::string>& initializers) const;
  void bind_symbol(const std::string& symbol, int64_t value, const std::string& input, std::map<std::string, int64_t>& symbols);

  // One line of the unbound-dimension error: the first input axis a free dimension was met at, how to bind it,
  // and how many more input axes share its symbol (a decoder's 2 x layers past inputs share the batch: one line).
  struct Unbound {
    std::string symbol;  // "": an input without a shape, or an unnamed axis (never merged)
    std::string where, fix;
    int more = 0;
  };
  void add_unbound(std::string symbol, std::string where, std::string fix);

  const onnx::GraphProto& graph_;
  const Bindings& b_;
  std::vector<Unbound> unbound_;
};

}  // namespace memplan::shape
