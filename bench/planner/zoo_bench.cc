// Arena / lower bound for every zoo model at batch 1 and 8 (inference and training programs), with the
// memory-aware schedule's gain and the planning time. Every plan passes the invariant checker
// (summarize_planning throws otherwise). Usage: memplan_planner_zoo_bench [models_dir]
#include <cmath>
#include <cstdio>
#include <ctime>
#include <exception>
#include <string>

#include "planner/summary.h"
#include "zoo_programs.h"

namespace {
double mib(uint64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }
}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : MEMPLAN_ZOO_DIR;
  std::printf("%-24s %5s %7s %7s %11s %11s %8s %8s %-18s %11s %7s %8s\n", "model", "batch", "steps", "buffers",
              "bound MiB", "arena MiB", "/bound", "/aligned", "algorithm", "sched. MiB", "gain", "plan ms");
  double log_sum = 0, worst = 0;
  int rows = 0;
  for (const memplan::ZooModel& model : memplan::zoo_models(dir)) {
    for (int64_t batch : {1, 8}) {
      memplan::Program program;
      try {
        program = memplan::zoo_program(model, batch);
      } catch (const std::exception& e) {
        std::printf("%-24s %5lld  skipped: %s\n", model.name.c_str(), static_cast<long long>(batch), e.what());
        continue;
      }
      const std::clock_t start = std::clock();
      const memplan::PlannerSummary s = memplan::summarize_planning(program);
      const double ms = 1000.0 * static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
      const double ratio = static_cast<double>(s.best_arena_bytes) / static_cast<double>(s.lower_bound_bytes);
      const double aligned = static_cast<double>(s.best_arena_bytes) / static_cast<double>(s.aligned_lower_bound_bytes);
      log_sum += std::log(ratio);
      worst = std::max(worst, ratio);
      ++rows;
      std::printf("%-24s %5lld %7zu %7zu %11.2f %11.2f %8.4f %8.4f %-18s %11.2f %7.4f %8.1f\n", model.name.c_str(),
                  static_cast<long long>(batch), program.steps.size(), program.buffers.size(), mib(s.lower_bound_bytes),
                  mib(s.best_arena_bytes), ratio, aligned, memplan::packing_algorithm_name(s.best_algorithm),
                  mib(s.scheduled_lower_bound_bytes),
                  static_cast<double>(s.lower_bound_bytes) / static_cast<double>(s.scheduled_lower_bound_bytes), ms);
    }
  }
  if (rows > 0)
    std::printf("\narena / lower bound over %d programs: geometric mean %.4f, worst %.4f\n", rows,
                std::exp(log_sum / rows), worst);
  return 0;
}
