#include "onnx_import/hf_config_keys.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "onnx_import/errors.h"

namespace memplan::hf {

using nlohmann::json;

[[noreturn]] void fail(const std::string& path, const std::string& what) { throw InputError(path + ": " + what); }

const json& require(const std::string& path, const json& j, const std::string& key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) fail(path, "config key \"" + key + "\" is missing");
  return *it;
}

const json& require_present(const std::string& path, const json& j, const std::string& key) {
  const auto it = j.find(key);
  if (it == j.end()) fail(path, "config key \"" + key + "\" is missing");
  return *it;
}

int64_t positive_int(const std::string& path, const json& value, const std::string& key, int64_t max) {
  if (!value.is_number_integer()) fail(path, "config key \"" + key + "\" must be an integer, not " + value.dump());
  const int64_t v = value.is_number_unsigned() && value.get<uint64_t>() > uint64_t(INT64_MAX) ? -1 : value.get<int64_t>();
  if (v <= 0 || v > max)
    fail(path, "config key \"" + key + "\" is " + value.dump() + "; memplan reads 1 to " + std::to_string(max));
  return v;
}

int64_t int_key(const std::string& path, const json& j, const std::string& key, int64_t max) {
  return positive_int(path, require(path, j, key), key, max);
}

double positive_number(const std::string& path, const json& j, const std::string& key) {
  const json& v = require(path, j, key);
  if (!v.is_number() || !(v.get<double>() > 0) || v.get<double>() > 1e30)
    fail(path, "config key \"" + key + "\" must be a positive number, not " + v.dump());
  return v.get<double>();
}

bool bool_key(const std::string& path, const json& j, const std::string& key, bool absent) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absent;
  if (!it->is_boolean()) fail(path, "config key \"" + key + "\" must be true or false, not " + it->dump());
  return it->get<bool>();
}

// A key whose only value memplan models; any other changes the graph.
void require_value(const std::string& path, const json& j, const std::string& key, const json& modelled,
                   const std::string& why) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null() || *it == modelled) return;
  fail(path, "config key \"" + key + "\" is " + it->dump() + "; memplan models only " + modelled.dump() + " (" + why +
                 ")");
}

void read_layer_types(const std::string& path, const json& j, std::vector<bool>& sliding) {
  const auto types = j.find("layer_types");
  if (types == j.end() || types->is_null()) return;
  const size_t layers = sliding.size();
  if (!types->is_array() || types->size() != layers)
    fail(path, "config key \"layer_types\" must list num_hidden_layers (" + std::to_string(layers) + ") layers");
  for (size_t l = 0; l < layers; ++l) {
    const json& t = (*types)[l];
    if (t != "sliding_attention" && t != "full_attention")
      fail(path, "config key \"layer_types\" holds " + t.dump() + "; memplan reads sliding_attention, full_attention");
    sliding[l] = t == "sliding_attention";
  }
}

std::string read_small_file(const std::string& path, const std::string& what) {
  constexpr std::streamoff kMaxBytes = std::streamoff{1} << 24;
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    fail(path, "is not a file: " + what + " model is the file itself");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail(path, "cannot open the file");
  const std::streamoff size = in.tellg();
  if (size > kMaxBytes)
    fail(path, "is " + std::to_string(size) + " bytes: " + what + " is a few kB (memplan reads at most 16 MiB)");
  in.seekg(0);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail(path, "cannot read the file");
  return text.str();
}

}  // namespace memplan::hf
