// What gemma2, gemma3_text and phi3 configs add to a llama-like config.json: their own keys and how the decoder
// reads them (DecoderConfig's hf_arch fields). Internal to onnx_import (hf_config.cc).
#pragma once

#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "onnx_import/hf_config.h"

namespace memplan::hf {

// Per model_type, the keys only that architecture's configuration reads.
const std::map<std::string, std::set<std::string>>& arch_keys();

// Reads those keys into `c` (hf_arch fields), from the keys their modeling code reads.
void parse_hf_arch(const std::string& path, const nlohmann::json& j, DecoderConfig& c);

}  // namespace memplan::hf
