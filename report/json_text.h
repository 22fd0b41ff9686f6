// JSON as text for output. ONNX names are proto2 strings that protobuf does not check for UTF-8: invalid bytes
// are replaced with U+FFFD instead of failing the whole report.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace memplan {

inline std::string json_text(const nlohmann::ordered_json& j) {
  return j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace memplan
