// The typed reads of config.json keys shared by the config readers (hf_config.cc, hf_moe.cc): each failure is one
// InputError naming the file and the key. Internal to onnx_import.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace memplan::hf {

// Bounds that keep a hostile config from asking for a giant graph or an overflowing size: the largest published
// dense configs stay far inside them (Llama-3.1-405B: hidden 16384, 126 layers, vocab 128256).
inline constexpr int64_t kMaxDimension = int64_t{1} << 24;
inline constexpr int64_t kMaxLayers = 1024;
// A graph of every expert of every layer (hf_moe.cc, hf_deepseek.cc, hf_gpt_oss.cc): the largest published
// configs stay far inside (Qwen3-235B-A22B: 128 experts x 94 layers; DeepSeek-V3: 256 x 58), a hostile one is
// refused before it is built.
inline constexpr int64_t kMaxExperts = 4096;
inline constexpr int64_t kMaxExpertBlocks = int64_t{1} << 16;

[[noreturn]] void fail(const std::string& path, const std::string& what);
// The key's value; missing or null is an error.
const nlohmann::json& require(const std::string& path, const nlohmann::json& j, const std::string& key);
// The key's value, which may be null; missing is an error.
const nlohmann::json& require_present(const std::string& path, const nlohmann::json& j, const std::string& key);
// An integer in [1, max].
int64_t positive_int(const std::string& path, const nlohmann::json& value, const std::string& key, int64_t max);
int64_t int_key(const std::string& path, const nlohmann::json& j, const std::string& key, int64_t max);
// A number in (0, 1e30].
double positive_number(const std::string& path, const nlohmann::json& j, const std::string& key);
// true or false; `absent` when missing or null.
bool bool_key(const std::string& path, const nlohmann::json& j, const std::string& key, bool absent);
// The text of a small JSON file beside or as the model (`what`: "a config.json", "a ModelOpt hf_quant_config.json"),
// refused before it is read when it is not a file, cannot be opened, or is over 16 MiB (a few kB is what it holds).
std::string read_small_file(const std::string& path, const std::string& what);
// layer_types, when present and not null: one "sliding_attention" or "full_attention" per layer, written into
// `sliding` (sized to the layers already); any other list is an error.
void read_layer_types(const std::string& path, const nlohmann::json& j, std::vector<bool>& sliding);
// A key whose only value memplan models; any other changes the graph (missing or null: the modelled default).
void require_value(const std::string& path, const nlohmann::json& j, const std::string& key,
                   const nlohmann::json& modelled, const std::string& why);

}  // namespace memplan::hf
