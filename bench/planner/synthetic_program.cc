#include "synthetic_program.h"

#include <random>
#include <string>
#include <vector>

namespace memplan {
namespace {

class Draw {
 public:
  explicit Draw(uint64_t seed) : rng_(seed) {}
  uint64_t below(uint64_t n) { return rng_() % n; }
  bool per_mille(int32_t p) { return static_cast<int32_t>(below(1000)) < p; }
  uint64_t activation_bytes() { return (1 + below(16)) << (10 + below(13)); }
  uint64_t weight_bytes() { return (1 + below(16)) << (8 + below(11)); }

 private:
  std::mt19937_64 rng_;
};

int32_t add_buffer(Program& p, std::string name, uint64_t bytes, Category category) {
  Buffer b;
  b.name = std::move(name);
  b.bytes = bytes;
  b.category = category;
  p.buffers.push_back(std::move(b));
  return static_cast<int32_t>(p.buffers.size()) - 1;
}

}  // namespace

Program synthetic_program(const SyntheticOptions& o) {
  Draw draw(o.seed);
  Program p;
  std::vector<int32_t> outputs;  // activations in production order
  const int32_t input = add_buffer(p, "input", draw.activation_bytes(), Category::Activation);
  p.buffers[input].live_at_start = true;
  outputs.push_back(input);

  for (int32_t s = 0; s < o.steps; ++s) {
    Step step;
    step.name = "node" + std::to_string(s);
    step.op = "Synthetic";
    const auto recent = [&] {
      const uint64_t reach = std::min<uint64_t>(outputs.size(), static_cast<uint64_t>(o.window));
      return outputs[outputs.size() - 1 - draw.below(reach)];
    };
    step.reads.push_back(outputs.back());
    if (draw.per_mille(o.extra_input_per_mille)) step.reads.push_back(recent());
    if (draw.per_mille(o.skip_per_mille)) {
      const uint64_t reach = std::min<uint64_t>(outputs.size(), static_cast<uint64_t>(o.skip_reach));
      step.reads.push_back(outputs[outputs.size() - 1 - draw.below(reach)]);
    }
    if (draw.per_mille(o.weight_per_mille)) {
      const int32_t w = add_buffer(p, step.name + ".weight", draw.weight_bytes(), Category::Weight);
      p.buffers[w].resident = true;
      step.reads.push_back(w);
    }
    const int32_t n_out = draw.per_mille(o.second_output_per_mille) ? 2 : 1;
    for (int32_t k = 0; k < n_out; ++k)
      step.writes.push_back(add_buffer(p, step.name + ".out" + std::to_string(k), draw.activation_bytes(),
                                       Category::Activation));
    if (draw.per_mille(o.workspace_per_mille))
      step.writes.push_back(add_buffer(p, step.name + ".workspace", draw.activation_bytes(), Category::Workspace));
    for (int32_t k = 0; k < n_out; ++k) outputs.push_back(step.writes[k]);
    p.steps.push_back(std::move(step));
  }
  if (!p.steps.empty()) p.buffers[p.steps.back().writes[0]].live_at_end = true;
  return p;
}

}  // namespace memplan
