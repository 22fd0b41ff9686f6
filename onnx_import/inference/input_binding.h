// Binding a graph's inputs to the user's dimensions (--batch, --dim, --input, --value; cli/ and import.h Bindings):
// every graph input that is not an initializer gets a concrete shape, or one error lists every dimension
// left unbound. Internal to onnx_import/.
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

  const onnx::GraphProto& graph_;
  const Bindings& b_;
  std::vector<std::string> unbound_;
};

}  // namespace memplan::shape
