#include "report/gpu_catalog.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "onnx_import/errors.h"
#include "report/gpu_catalog_data.h"

namespace memplan {
namespace {

std::string normalize(const std::string& s) {
  std::string r;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c))) r += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

}  // namespace

const GpuSpec& GpuCatalog::find(const std::string& name) const {
  const std::string want = normalize(name);
  for (const GpuSpec& g : gpus)
    if (normalize(g.name) == want) return g;
  std::string known;
  for (const GpuSpec& g : gpus) known += (known.empty() ? "" : ", ") + g.name;
  throw InputError("--gpu " + name + ": unknown GPU; known: " + known + " (or give --memory SIZE)");
}

GpuCatalog parse_gpu_catalog(const std::string& text, const std::string& origin) {
  GpuCatalog c;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (j.value("schema", "") != "memplan.gpus/1") throw InputError(origin + ": expected \"schema\": \"memplan.gpus/1\"");
    c.context_reserve_bytes = j.at("context_reserve_mib").get<uint64_t>() << 20;
    for (const auto& g : j.at("gpus")) {
      GpuSpec s;
      s.name = g.at("name").get<std::string>();
      const uint64_t mib = g.at("memory_mib").get<uint64_t>();
      if (mib == 0 || mib > (uint64_t{1} << 40)) throw InputError(origin + ": GPU " + s.name + " has an implausible memory_mib");
      s.memory_bytes = mib << 20;
      s.vendor = g.value("vendor", "");
      s.source = g.value("source", "");
      c.gpus.push_back(std::move(s));
    }
  } catch (const nlohmann::json::exception& e) {
    throw InputError(origin + ": not a GPU catalog: " + e.what());
  }
  if (c.gpus.empty()) throw InputError(origin + ": the catalog lists no GPU");
  return c;
}

GpuCatalog builtin_gpu_catalog() { return parse_gpu_catalog(kGpuCatalogJson, "built-in GPU catalog"); }

GpuCatalog load_gpu_catalog(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("--catalog " + path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_gpu_catalog(ss.str(), path);
}

}  // namespace memplan
