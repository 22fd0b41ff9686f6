#include "tests/cost_models/deepspeed3_fixture.h"

#include "tests/cost_models/graph_builder.h"

namespace memplan::testing {

Graph deepspeed3_mlp(bool scoped) {
  GraphBuilder b;
  const int32_t x = b.input("x", {4, 8});
  const int32_t h = b.node1("Gemm", {x, b.weight("l1.weight", {16, 8}), b.weight("l1.bias", {16})}, "h", {4, 16},
                            {{"transB", int_attr(1)}});
  const int32_t r = b.node1("Relu", {h}, "r", {4, 16});
  const int32_t y = b.node1("Gemm", {r, b.weight("l2.weight", {2, 16}), b.weight("l2.bias", {2})}, "y", {4, 2},
                            {{"transB", int_attr(1)}});
  b.output(y);
  Graph g = b.graph();
  if (scoped) {
    g.nodes[0].name = "/l1/Gemm";
    g.nodes[1].name = "/act/Relu";
    g.nodes[2].name = "/l2/Gemm";
  }
  return g;
}

TrainingRun deepspeed3_mlp_run() {
  TrainingRun o;
  o.runtime = Runtime::Ideal;
  o.optimizer = Optimizer::Adam;
  o.loss = LossKind::CrossEntropy;
  o.gpus = 3;
  o.shard = Sharding::Zero3;
  o.deepspeed.enabled = true;
  o.deepspeed.stage = 3;
  o.deepspeed.reduce_bucket_size = 40;
  o.deepspeed.overlap_comm = true;
  o.deepspeed.prefetch_bucket_size = 0;
  o.deepspeed.param_persistence_threshold = 2;
  o.deepspeed.max_reuse_distance = 0;
  return o;
}

std::vector<std::string> coordinator_steps(const Program& p) {
  std::vector<std::string> out;
  for (const Step& st : p.steps)
    for (const char* kind : {"deepspeed:fetch", "deepspeed:wait", "deepspeed:prefetch", "deepspeed:release"})
      if (st.name.rfind(kind, 0) == 0) out.push_back(st.name);
  return out;
}

}  // namespace memplan::testing
