#include "planner/program.h"

namespace memplan {

const char* category_name(Category c) {
  switch (c) {
    case Category::Weight: return "weights";
    case Category::Activation: return "activations";
    case Category::Gradient: return "gradients";
    case Category::ActivationGrad: return "activation_grads";
    case Category::OptimizerState: return "optimizer_states";
    case Category::Workspace: return "workspace";
  }
  return "activations";
}

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::Forward: return "forward";
    case Phase::Backward: return "backward";
    case Phase::Optimizer: return "optimizer";
  }
  return "forward";
}

}  // namespace memplan
