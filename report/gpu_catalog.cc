#include "report/gpu_catalog.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "onnx_import/errors.h"
#include "report/estimate.h"
#include "report/gpu_catalog_data.h"
#include "report/sizes.h"

namespace memplan {
namespace {

std::string normalize(const std::string& s) {
  std::string r;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c))) r += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

}  // namespace

// The name as written, case and punctuation aside ("h100-80gb", "H100 80GB"), or a part of exactly one name
// ("H100" is the H100-80GB, "4090" the RTX-4090; "A100" names two sizes, and the message lists them).
const GpuSpec& GpuCatalog::find(const std::string& name) const {
  const std::string want = normalize(name);
  for (const GpuSpec& g : gpus)
    if (normalize(g.name) == want) return g;
  std::vector<const GpuSpec*> naming;
  for (const GpuSpec& g : gpus)
    if (!want.empty() && normalize(g.name).find(want) != std::string::npos) naming.push_back(&g);
  if (naming.size() == 1) return *naming.front();
  if (naming.size() > 1) {
    std::string names;
    for (const GpuSpec* g : naming) names += (names.empty() ? "" : ", ") + g->name;
    throw InputError("--gpu " + name + " names " + std::to_string(naming.size()) + " GPUs: " + names +
                     "; say which (or give --memory SIZE)");
  }
  std::string known;
  for (const GpuSpec& g : gpus) known += (known.empty() ? "" : ", ") + g.name;
  throw InputError("--gpu " + name + ": unknown GPU; known: " + known + " (or give --memory SIZE)");
}

namespace {

// "8.6" -> {8, 6}; the GPU named in the message.
void parse_compute_capability(const std::string& text, const std::string& where, GpuSpec& s) {
  const size_t dot = text.find('.');
  auto digits = [](const std::string& d) {
    return !d.empty() && d.size() <= 3 && std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (dot == std::string::npos || !digits(text.substr(0, dot)) || !digits(text.substr(dot + 1)))
    throw InputError(where + " has compute_capability \"" + text + "\": expected MAJOR.MINOR, e.g. \"8.6\"");
  s.cc_major = std::stoi(text.substr(0, dot));
  s.cc_minor = std::stoi(text.substr(dot + 1));
  if (s.cc_major == 0) throw InputError(where + " has compute_capability \"" + text + "\": the major is at least 1");
}

}  // namespace

GpuCatalog parse_gpu_catalog(const std::string& text, const std::string& origin) {
  GpuCatalog c;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    const std::string schema = j.value("schema", "");
    if (schema == "memplan.gpus/1")
      throw InputError(origin + ": schema memplan.gpus/1 lacks each GPU's compute capability; use \"memplan.gpus/2\" and "
                       "give every GPU \"compute_capability\": \"MAJOR.MINOR\" (see report/gpu_catalog.json)");
    if (schema != "memplan.gpus/2") throw InputError(origin + ": expected \"schema\": \"memplan.gpus/2\"");
    c.context_reserve_bytes = j.at("context_reserve_mib").get<uint64_t>() << 20;
    for (const auto& g : j.at("gpus")) {
      GpuSpec s;
      s.name = g.at("name").get<std::string>();
      const std::string where = origin + ": GPU " + s.name;
      if (g.contains("memory_mib") == g.contains("memory_bytes"))
        throw InputError(where + ": give exactly one of memory_mib and memory_bytes");
      if (g.contains("memory_mib")) {
        const uint64_t mib = g.at("memory_mib").get<uint64_t>();
        if (mib == 0 || mib > (uint64_t{1} << 40)) throw InputError(where + " has an implausible memory_mib");
        s.memory_bytes = mib << 20;
      } else {
        s.memory_bytes = g.at("memory_bytes").get<uint64_t>();
        if (s.memory_bytes < (uint64_t{1} << 20) || s.memory_bytes > (uint64_t{1} << 60))
          throw InputError(where + " has an implausible memory_bytes");
      }
      s.vendor = g.value("vendor", "");
      s.memory_kind = g.value("memory_kind", "");
      s.memory_source = g.value("memory_source", "");
      if (!g.contains("compute_capability"))
        throw InputError(where + " has no compute_capability (MAJOR.MINOR, e.g. \"8.6\"; it decides the cuBLAS workspace)");
      parse_compute_capability(g.at("compute_capability").get<std::string>(), where, s);
      s.compute_capability_source = g.value("compute_capability_source", "");
      if (g.contains("multiprocessors")) {
        const int64_t sms = g.at("multiprocessors").get<int64_t>();
        if (sms < 1 || sms > 100000)
          throw InputError(where + " has multiprocessors " + std::to_string(sms) + ": expected the GPU's count, 1 or more");
        s.multiprocessors = static_cast<int>(sms);
      }
      s.multiprocessors_source = g.value("multiprocessors_source", "");
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

GpuCatalog gpu_catalog_from(const std::string& path) { return path.empty() ? builtin_gpu_catalog() : load_gpu_catalog(path); }

namespace {

// "H100 (79.1 GiB - 1 GiB context reserve - 384 MiB NCCL buffers)": what the budget took off the card.
std::string budget_source(const GpuSpec& gpu, uint64_t context_bytes, uint64_t nccl_bytes) {
  std::string s = fmt::format("{} ({} - {} context reserve", gpu.name, format_bytes(gpu.memory_bytes),
                              format_bytes(context_bytes));
  if (nccl_bytes > 0) s += fmt::format(" - {} NCCL buffers", format_bytes(nccl_bytes));
  return s + ")";
}

}  // namespace

FitBudget gpu_budget(const GpuSpec& gpu, uint64_t reserve_bytes) {
  return {gpu.memory_bytes > reserve_bytes ? gpu.memory_bytes - reserve_bytes : 0,
          budget_source(gpu, reserve_bytes, 0)};
}

FitBudget gpu_budget(const GpuSpec& gpu, const OutsideAllocator& outside) {
  FitBudget b = gpu_budget(gpu, outside.total());
  b.source = budget_source(gpu, outside.context_bytes, outside.nccl.bytes);
  return b;
}

uint64_t apply_headroom(uint64_t budget, double headroom_percent) {
  return static_cast<uint64_t>(static_cast<double>(budget) * (1.0 - headroom_percent / 100.0));
}

void apply_gpu_architecture(const GpuSpec& gpu, EstimateOptions& options) {
  options.execution.cuda_arch_major = gpu.cc_major;
  options.execution.multiprocessors = gpu.multiprocessors;
}

}  // namespace memplan
