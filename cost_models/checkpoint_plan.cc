#include "cost_models/checkpoint_plan.h"

#include <algorithm>
#include <cmath>

#include "onnx_import/errors.h"

namespace memplan {

std::vector<int32_t> every_k_ending_at(int32_t last, int32_t k) {
  std::vector<int32_t> out;
  for (int32_t i = last; i >= 0; i -= std::max(1, k)) out.push_back(i);
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<int32_t> choose_boundaries(const Graph& g, const std::vector<Separator>& candidates,
                                       const CheckpointOptions& options) {
  const int32_t c = static_cast<int32_t>(candidates.size());
  std::vector<int32_t> out;
  switch (options.mode) {
    case CheckpointMode::None:
    case CheckpointMode::Auto:
      return out;
    case CheckpointMode::Sqrt: {
      if (c == 0) return out;
      const int32_t segments = static_cast<int32_t>(std::ceil(std::sqrt(static_cast<double>(c + 1))));
      for (int32_t j = 1; j < segments; ++j) {
        const int32_t index = static_cast<int32_t>(std::lround(static_cast<double>(j) * (c + 1) / segments)) - 1;
        if (index >= 0 && index < c && (out.empty() || out.back() < index)) out.push_back(index);
      }
      return out;
    }
    case CheckpointMode::Every: {
      if (options.every < 1) throw InputError("--checkpoint every:K needs K >= 1");
      for (int32_t i = options.every - 1; i < c; i += options.every) out.push_back(i);
      return out;
    }
    case CheckpointMode::At: {
      for (const std::string& name : options.at) {
        int32_t found = -1;
        for (int32_t i = 0; i < c; ++i)
          if (g.tensors[candidates[i].tensor].name == name) found = i;
        if (found < 0) {
          std::string list;
          for (int32_t i = 0; i < c && i < 50; ++i) list += (i ? ", " : "") + g.tensors[candidates[i].tensor].name;
          throw InputError("--checkpoint at: tensor '" + name + "' does not separate the graph of model '" +
                           g.model_path + "'; valid boundaries: " + (list.empty() ? "(none)" : list));
        }
        out.push_back(found);
      }
      std::sort(out.begin(), out.end());
      out.erase(std::unique(out.begin(), out.end()), out.end());
      return out;
    }
  }
  return out;
}

}  // namespace memplan
