// Training step (PyTorch eager): forward ops keeping what autograd saves, the loss, backward ops in
// reverse order (recomputing checkpointed segments first), then the optimizer step. One Program per
// GPU; the graph's batch is one micro-batch. Rules and sources: docs/cost-models.md.
#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <set>
#include <string>

#include "cost_models/checkpoint_plan.h"
#include "cost_models/cost_model.h"
#include "cost_models/graph_facts.h"
#include "cost_models/program_peak.h"
#include "cost_models/runtime_constants.h"
#include "cost_models/runtime_rules.h"
#include "cost_models/training_context.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {
namespace {

enum class Mode { Save, NoSave, Recompute };

uint64_t ceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

class TrainingBuilder {
 public:
  // `boundary_ops` end checkpointed segments. The first segment starts at the first op (sqrt, every:K,
  // auto: checkpoint_sequential) or, for at:, at the first boundary (the ops before it run normally).
  TrainingBuilder(const TrainingContext& c, std::vector<int32_t> boundary_ops)
      : c_(c), g_(*c.graph), o_(c.options), boundaries_(std::move(boundary_ops)) {
    const size_t nt = g_.tensors.size();
    fwd_buf_.assign(nt, -1);
    rec_buf_.assign(nt, -1);
    cast_cache_.assign(nt, -1);
    grad_buf_.assign(nt, -1);
    grad_consumed_.assign(nt, false);
    param_grad_.assign(nt, -1);
    grad_is_view_.assign(nt, false);
    contiguous_.assign(nt, true);
    saved_.resize(c_.ops.size());
    cast_inputs_.resize(c_.ops.size());
    segment_of_.assign(c_.ops.size(), -1);
    const bool from_first_boundary = o_.checkpoint.mode == CheckpointMode::At && !boundaries_.empty();
    int32_t start = from_first_boundary ? boundaries_[0] + 1 : 0;
    for (size_t s = from_first_boundary ? 1 : 0; s < boundaries_.size(); ++s) {
      for (int32_t i = start; i <= boundaries_[s]; ++i) segment_of_[i] = static_cast<int32_t>(s);
      start = boundaries_[s] + 1;
    }
  }

  TrainingResult build() {
    add_parameters();
    add_inputs();
    add_persistent_grads();
    add_optimizer_states_if_steady();
    add_cublas_workspaces_if_steady();
    for (size_t i = 0; i < c_.ops.size(); ++i)
      emit_forward(static_cast<int32_t>(i), segment_of_[i] >= 0 ? Mode::NoSave : Mode::Save);
    emit_loss();
    for (int32_t i = static_cast<int32_t>(c_.ops.size()) - 1; i >= 0; --i) {
      if (segment_of_[i] >= 0 && is_segment_end(i)) recompute_segment(segment_of_[i], i);
      emit_backward(i);
      if (segment_of_[i] >= 0 && (i == 0 || segment_of_[i - 1] != segment_of_[i])) end_segment_backward(i);
    }
    emit_optimizer();
    fill_result();
    return std::move(r_);
  }

 private:
  // ---- buffers ----
  Program& prog() { return r_.program; }
  const Program& prog() const { return r_.program; }

  int32_t new_buffer(const std::string& name, uint64_t bytes, Category category) {
    Buffer b;
    b.name = name;
    b.bytes = bytes;
    b.category = category;
    prog().buffers.push_back(std::move(b));
    return static_cast<int32_t>(prog().buffers.size() - 1);
  }

  uint64_t bytes_in(int32_t t, DType d) const { return bytes_as(g_.tensors[t], d); }
  uint64_t bytes_of(int32_t t) const { return bytes_in(t, c_.dtype[t]); }
  bool zero3() const { return o_.shard == Sharding::Zero3; }
  bool shard_grads() const { return o_.shard == Sharding::Zero2 || o_.shard == Sharding::Zero3; }
  bool shard_states() const { return o_.shard == Sharding::Zero1 || shard_grads(); }
  uint64_t shard(uint64_t bytes) const { return ceil_div(bytes, static_cast<uint64_t>(o_.gpus)); }

  int32_t lookup(int32_t t) const {
    if (recomputing_ && rec_buf_[t] >= 0) return rec_buf_[t];
    return fwd_buf_[t];
  }
  void set_buffer(int32_t t, int32_t b) { (recomputing_ ? rec_buf_ : fwd_buf_)[t] = b; }

  static void add_unique(std::vector<int32_t>& v, int32_t b) {
    if (b >= 0 && std::find(v.begin(), v.end(), b) == v.end()) v.push_back(b);
  }

  // Parameters and buffers (BatchNorm statistics, float constants): resident. ZeRO-3 keeps 1/N of each
  // trainable parameter. Small integer constants that only feed shape math, and Constant-node scalars,
  // are Python values.
  void add_parameters() {
    for (size_t t = 0; t < g_.tensors.size(); ++t) {
      const int32_t id = static_cast<int32_t>(t);
      if (!is_constant(g_, id) || constant_only_in_shape_math(g_, id, c_.shape) || is_python_scalar(g_, id) ||
          c_.tied_to[t] >= 0)
        continue;
      uint64_t bytes = bytes_of(id);
      if (c_.is_param[t] && zero3()) bytes = shard(bytes);
      const int32_t b = new_buffer(g_.tensors[t].name, bytes, Category::Weight);
      prog().buffers[b].resident = true;
      fwd_buf_[t] = b;
      if (c_.is_param[t]) r_.param_bytes = checked_add(r_.param_bytes, bytes, "parameter bytes");
    }
    for (size_t t = 0; t < g_.tensors.size(); ++t)
      if (c_.tied_to[t] >= 0) fwd_buf_[t] = fwd_buf_[c_.tied_to[t]];  // the same storage, transposed
  }

  void add_inputs() {
    for (int32_t t : g_.inputs) {
      if (fwd_buf_[t] >= 0) continue;
      const int32_t b = new_buffer(g_.tensors[t].name, bytes_of(t), Category::Activation);
      prog().buffers[b].live_at_start = true;
      fwd_buf_[t] = b;
    }
  }

  // Grads that exist before the step: with gradient accumulation the grads of earlier micro-batches
  // (this program is a later micro-batch plus the optimizer step); with DDP gradient_as_bucket_view the
  // grads are views of the buckets, allocated when DDP is constructed. DDP's own buckets otherwise
  // hold a second copy of every grad (torch/nn/parallel/distributed.py, reducer.cpp).
  void add_persistent_grads() {
    const bool resident_grads = o_.grad_accum > 1 || (o_.shard == Sharding::Ddp && o_.gradient_as_bucket_view);
    if (resident_grads) {
      for (int32_t p : c_.params) {
        const uint64_t bytes = shard_grads() ? shard(bytes_of(p)) : bytes_of(p);
        const int32_t b = new_buffer("grad:" + g_.tensors[p].name, bytes, Category::Gradient);
        prog().buffers[b].resident = true;
        param_grad_[p] = b;
        r_.grad_bytes = checked_add(r_.grad_bytes, bytes, "gradient bytes");
      }
    }
    if (o_.shard == Sharding::Ddp && !o_.gradient_as_bucket_view) add_ddp_buckets();
  }

  // Buckets fill in reverse parameter order; the first is capped at 1 MiB
  // (dist._DEFAULT_FIRST_BUCKET_BYTES), the rest at bucket_cap_mb = 25 MiB.
  void add_ddp_buckets() {
    uint64_t cap = 1024 * 1024, filled = 0;
    int index = 0;
    auto flush = [&] {
      if (filled == 0) return;
      const int32_t b = new_buffer("ddp_bucket_" + std::to_string(index++), filled, Category::Gradient);
      prog().buffers[b].resident = true;
      filled = 0;
      cap = kDdpBucketBytes;
    };
    for (auto it = c_.params.rbegin(); it != c_.params.rend(); ++it) {
      const uint64_t bytes = bytes_of(*it);
      if (filled > 0 && filled + bytes > cap) flush();
      filled = checked_add(filled, bytes, "DDP bucket bytes");
    }
    flush();
  }

  int states_per_param() const {
    switch (o_.optimizer) {
      case Optimizer::Sgd: return 0;
      case Optimizer::Momentum: return 1;
      case Optimizer::Adam:
      case Optimizer::AdamW: return 2;
    }
    return 0;
  }

  uint64_t state_bytes(int32_t p) const { return shard_states() ? shard(bytes_of(p)) : bytes_of(p); }

  std::vector<int32_t> new_states(bool resident) {
    static const char* names[] = {"exp_avg", "exp_avg_sq"};
    std::vector<int32_t> ids;
    for (int32_t p : c_.params)
      for (int s = 0; s < states_per_param(); ++s) {
        const std::string what = o_.optimizer == Optimizer::Momentum ? "momentum_buffer" : names[s];
        const int32_t b = new_buffer(what + ":" + g_.tensors[p].name, state_bytes(p), Category::OptimizerState);
        prog().buffers[b].resident = resident;
        prog().buffers[b].live_at_end = !resident;
        r_.optimizer_state_bytes = checked_add(r_.optimizer_state_bytes, state_bytes(p), "optimizer state bytes");
        ids.push_back(b);
      }
    return ids;
  }

  void add_optimizer_states_if_steady() {
    if (o_.steady_state) new_states(/*resident=*/true);
  }

  // ---- cuBLAS workspaces ----
  // One per (handle, stream) (CublasHandlePool.cpp); handles are per thread, and autograd runs CUDA
  // backward on its own device thread (torch/csrc/autograd/engine.cpp), so forward and backward each
  // own one. Allocated at the first cuBLAS call of each and kept: resident in a later iteration.
  static bool uses_cublas(const FusedOp& op) {
    if (op.kind == OpKind::Linear) return true;
    return op.kind == OpKind::Node && (op.op == "MatMul" || op.op == "Gemm" || op.op == "Einsum");
  }

  bool models_cublas() const {
    if (o_.runtime != Runtime::PyTorch) return false;
    for (const FusedOp& op : c_.ops)
      if (uses_cublas(op)) return true;
    return false;
  }

  void add_cublas_workspaces_if_steady() {
    if (!models_cublas() || !o_.steady_state) return;
    for (int32_t* ws : {&cublas_forward_, &cublas_backward_}) {
      *ws = new_buffer(ws == &cublas_forward_ ? "cublas_workspace" : "cublas_workspace:autograd",
                       cublas_workspace_bytes(o_.cuda_arch_major), Category::Workspace);
      prog().buffers[*ws].resident = true;
    }
  }

  // First iteration: the workspace appears at the first cuBLAS op of the thread and stays.
  void touch_cublas(const FusedOp& op, Step& st, bool backward) {
    if (!uses_cublas(op) || !models_cublas()) return;
    int32_t& ws = backward ? cublas_backward_ : cublas_forward_;
    if (ws >= 0) return;
    ws = new_buffer(backward ? "cublas_workspace:autograd" : "cublas_workspace", cublas_workspace_bytes(o_.cuda_arch_major),
                    Category::Workspace);
    prog().buffers[ws].live_at_end = true;
    st.writes.push_back(ws);
  }

  // ---- forward ----
  bool is_segment_end(int32_t i) const {
    return std::find(boundaries_.begin(), boundaries_.end(), i) != boundaries_.end();
  }

  // The type an input is cast to before the op under autocast (Undefined: no cast).
  DType autocast_target(const FusedOp& op, int32_t t) const {
    if (!is_amp(o_.precision) || is_scalar_constant(g_, t)) return DType::Undefined;
    const DType have = c_.dtype[t];
    const DType low = low_precision_dtype(o_.precision);
    if (have != DType::Float32 && have != low) return DType::Undefined;
    switch (autocast_class(op)) {
      case AutocastClass::LowPrecision: return have == DType::Float32 ? low : DType::Undefined;
      case AutocastClass::Float32: return have == low ? DType::Float32 : DType::Undefined;
      case AutocastClass::Promote: return DType::Undefined;
    }
    return DType::Undefined;
  }

  // PyTorch in place, as torchvision writes its blocks (runtime_rules.h).
  bool in_place(const FusedOp& op) const {
    if (op.kind != OpKind::Node || op.inputs.empty()) return false;
    const Node& n = g_.nodes[op.nodes.back()];
    if (n.inputs.empty() || n.inputs[0] < 0 || n.outputs.empty() || n.outputs[0] < 0) return false;
    const int32_t in = n.inputs[0];
    const Tensor& x = g_.tensors[in];
    const int32_t b = lookup(in);
    if (x.producer < 0 || b < 0 || sole_consumer(g_, in) != op.nodes.back() || prog().buffers[b].resident ||
        prog().buffers[b].live_at_start || c_.dtype[in] != c_.dtype[n.outputs[0]])
      return false;
    return is_pytorch_in_place(n.op_type, g_.nodes[x.producer].op_type) && g_.tensors[n.outputs[0]].shape == x.shape;
  }

  // The input buffer the op's first output shares (views, in-place ops), or -1.
  int32_t aliased_input(const FusedOp& op) const {
    if (op.kind != OpKind::Node) return -1;
    const Node& n = g_.nodes[op.nodes.back()];
    if (n.inputs.empty() || n.inputs[0] < 0 || lookup(n.inputs[0]) < 0) return -1;
    if (n.outputs.empty() || n.outputs[0] < 0) return -1;  // first output omitted (GRU's Y): nothing to alias
    const int32_t in = n.inputs[0];
    if (c_.dtype[in] != c_.dtype[n.outputs[0]]) return -1;
    if (n.op_type == "Dropout") return -1;  // training dropout writes a fresh output
    if (is_alias_op(n.op_type)) {
      if ((n.op_type == "Reshape" || n.op_type == "Flatten") && !contiguous_[in]) return -1;
      return lookup(in);
    }
    if (is_pytorch_strided_view(n.op_type) || in_place(op)) return lookup(in);
    return -1;
  }

  void emit_forward(int32_t i, Mode mode) {
    const FusedOp& op = c_.ops[i];
    const AutogradRule& rule = c_.rules[i];
    Step st;
    st.name = (mode == Mode::Recompute ? "recompute:" : "") + op.name;
    st.op = op.op;
    st.phase = mode == Mode::Recompute ? Phase::Backward : Phase::Forward;
    st.flops = c_.op_flops[i];
    std::map<int32_t, int32_t> effective;  // tensor -> the buffer the op actually consumes
    for (int32_t t : op.inputs) {
      const int32_t b = lookup(t);
      if (b < 0) continue;
      add_unique(st.reads, b);
      if (c_.is_param[t] && zero3()) {  // ZeRO-3 / FSDP all-gathers the full parameter for the op
        const int32_t full = new_buffer(g_.tensors[t].name + ":gathered", bytes_of(t), Category::Weight);
        st.writes.push_back(full);
        effective[t] = full;
      }
      const DType target = autocast_target(op, t);
      if (target == DType::Undefined) continue;
      cast_inputs_[i].insert(t);
      if (is_constant(g_, t)) {
        // The autocast weight cache: one low-precision copy per parameter, made at its first use in
        // this forward (or recomputation) and kept until every op that saved it has run backward.
        auto& cache = recomputing_ ? rec_cast_ : cast_cache_;
        if (cache[t] < 0) {
          cache[t] = new_buffer(g_.tensors[t].name + ":autocast", bytes_in(t, target), Category::Weight);
          st.writes.push_back(cache[t]);
          if (!recomputing_) forward_casts_.push_back(cache[t]);
        } else {
          add_unique(st.reads, cache[t]);
        }
        effective[t] = cache[t];
      } else {
        const int32_t copy = new_buffer(g_.tensors[t].name + ":autocast", bytes_in(t, target), Category::Activation);
        st.writes.push_back(copy);
        effective[t] = copy;
      }
    }
    const int32_t alias = aliased_input(op);
    const Node& n = g_.nodes[op.nodes.back()];
    for (int32_t t : op.outputs) {
      if (c_.shape[t]) continue;
      const bool first = op.kind != OpKind::Node || t == n.outputs[0] || n.op_type == "Split";
      if (alias >= 0 && first) {
        set_buffer(t, alias);
        contiguous_[t] = !is_pytorch_strided_view(n.op_type) && contiguous_[n.inputs[0]];
        continue;
      }
      const int32_t b = new_buffer(g_.tensors[t].name, bytes_of(t), Category::Activation);
      set_buffer(t, b);
      st.writes.push_back(b);
    }
    const bool keep = mode != Mode::NoSave;
    std::vector<int32_t> saved;
    for (int32_t t : rule.saved_tensors) {
      if (c_.is_param[t] && zero3()) continue;  // FSDP frees the gathered copy and gathers again in backward
      auto it = effective.find(t);
      add_unique(saved, it != effective.end() ? it->second : lookup(t));
    }
    for (const SavedExtra& e : rule.saved_extras) {
      const int32_t b = new_buffer(op.name + e.suffix, e.bytes, Category::Activation);
      st.writes.push_back(b);
      saved.push_back(b);
    }
    if (keep) saved_[i] = std::move(saved);  // NoSave: extras die at their own step
    touch_cublas(op, st, /*backward=*/mode == Mode::Recompute);
    prog().steps.push_back(std::move(st));
  }

  // Reentrant checkpoint (torch 1.13's default; HuggingFace's gradient_checkpointing default):
  // CheckpointFunction.backward recomputes the segment, then runs torch.autograd.backward on the
  // recomputed outputs with the incoming grads, holding both until the segment's backward is done.
  void recompute_segment(int32_t segment, int32_t end_op) {
    recomputing_ = true;
    rec_cast_.assign(g_.tensors.size(), -1);
    for (size_t i = 0; i < c_.ops.size(); ++i)
      if (segment_of_[i] == segment) emit_forward(static_cast<int32_t>(i), Mode::Recompute);
    recomputing_ = false;
    held_by_checkpoint_.clear();
    for (int32_t t : c_.ops[end_op].outputs) {
      add_unique(held_by_checkpoint_, rec_buf_[t]);
      add_unique(held_by_checkpoint_, grad_buf_[t]);
    }
  }

  void end_segment_backward(int32_t first_op) {
    Step st{"checkpoint_end:" + c_.ops[first_op].name, "checkpoint_backward", Phase::Backward, held_by_checkpoint_, {}, 0};
    held_by_checkpoint_.clear();
    prog().steps.push_back(std::move(st));
  }

  // ---- loss ----
  void emit_loss() {
    if (g_.outputs.empty()) throw InputError("model '" + g_.model_path + "' has no outputs to train");
    const int32_t out = g_.outputs.back();
    if (fwd_buf_[out] < 0) throw InputError("training output '" + g_.tensors[out].name + "' has no buffer");
    if (!c_.requires_grad[out])
      throw InputError("output '" + g_.tensors[out].name + "' of model '" + g_.model_path +
                       "' does not depend on any trainable parameter");
    const Tensor& logits = g_.tensors[out];
    const DType loss_dtype = is_amp(o_.precision) ? DType::Float32 : c_.dtype[out];
    const uint64_t scalar = static_cast<uint64_t>(dtype_bits(loss_dtype) / 8);
    // The training loop's `output = model(x)` holds the output through backward and the optimizer step.
    prog().buffers[fwd_buf_[out]].live_at_end = true;
    Step st;
    st.phase = Phase::Forward;
    st.reads = {fwd_buf_[out]};
    for (int32_t b : forward_casts_) add_unique(st.reads, b);  // the autocast cache lives through the forward
    int32_t loss_input = fwd_buf_[out];
    if (is_amp(o_.precision) && c_.dtype[out] != DType::Float32) {  // losses autocast to float32
      loss_input = new_buffer(logits.name + ":autocast", bytes_in(out, DType::Float32), Category::Activation);
      st.writes.push_back(loss_input);
    }
    switch (o_.loss) {
      case LossKind::CrossEntropy: {
        if (logits.shape.empty() || logits.shape.back() <= 0)
          throw InputError("cross-entropy needs class logits as the last output of model '" + g_.model_path + "'");
        const uint64_t rows = logits.elements() / static_cast<uint64_t>(logits.shape.back());
        const int32_t targets = new_buffer("targets", checked_mul(rows, 8, "targets"), Category::Activation);
        prog().buffers[targets].live_at_start = true;
        st.name = "loss:cross_entropy";
        st.op = "cross_entropy";
        st.flops = checked_mul(logits.elements(), 3, "FLOP count");
        // cross_entropy = log_softmax (saves its output) + nll_loss (saves target and total_weight).
        log_softmax_ = new_buffer(logits.name + ":log_softmax", bytes_in(out, loss_dtype), Category::Activation);
        total_weight_ = new_buffer("loss:total_weight", scalar, Category::Activation);
        loss_ = new_buffer("loss", scalar, Category::Activation);
        prog().buffers[loss_].live_at_end = true;
        st.writes.insert(st.writes.end(), {log_softmax_, total_weight_, loss_});
        st.reads.push_back(targets);
        loss_target_ = targets;
        break;
      }
      case LossKind::Mse: {
        const int32_t target = new_buffer("targets", bytes_in(out, c_.dtype[out]), Category::Activation);
        prog().buffers[target].live_at_start = true;
        st.name = "loss:mse";
        st.op = "mse_loss";
        st.flops = checked_mul(logits.elements(), 3, "FLOP count");
        loss_ = new_buffer("loss", scalar, Category::Activation);
        prog().buffers[loss_].live_at_end = true;
        st.writes.push_back(loss_);
        st.reads.push_back(target);
        loss_target_ = target;
        mse_input_ = loss_input;  // mse_loss saves its input and target
        break;
      }
      case LossKind::None: {
        st.name = "loss:none";
        st.op = "backward_seed";
        break;
      }
    }
    prog().steps.push_back(std::move(st));
    seed_output_grad(out);
  }

  // The grad that enters the model's last output.
  void seed_output_grad(int32_t out) {
    const uint64_t bytes = bytes_of(out);
    const std::string gname = "grad:" + g_.tensors[out].name;
    if (o_.loss == LossKind::CrossEntropy) {
      Step nll{"backward:nll_loss", "nll_loss_backward", Phase::Backward, {}, {}, 0};
      const uint64_t scalar = prog().buffers[loss_].bytes;
      const int32_t seed = new_buffer("grad:loss", scalar, Category::ActivationGrad);  // torch.ones_like(loss)
      const int32_t grad_logsm = new_buffer("grad:" + g_.tensors[out].name + ":log_softmax",
                                            prog().buffers[log_softmax_].bytes, Category::ActivationGrad);
      nll.writes = {seed, grad_logsm};
      nll.reads = {loss_target_, total_weight_};
      prog().steps.push_back(std::move(nll));
      Step lsm{"backward:log_softmax", "log_softmax_backward", Phase::Backward, {log_softmax_, grad_logsm}, {}, 0};
      if (is_amp(o_.precision) && c_.dtype[out] != DType::Float32) {
        // The float32 grad of the autocast copy, then its cast back to the logits' type.
        lsm.writes.push_back(new_buffer(gname + ":float32", prog().buffers[log_softmax_].bytes, Category::ActivationGrad));
      }
      set_grad(out, new_buffer(gname, bytes, Category::ActivationGrad));
      lsm.writes.push_back(grad_buf_[out]);
      prog().steps.push_back(std::move(lsm));
      return;
    }
    Step st{o_.loss == LossKind::Mse ? "backward:mse_loss" : "backward:seed", "backward_seed", Phase::Backward, {}, {}, 0};
    if (o_.loss == LossKind::Mse) st.reads = {mse_input_, loss_target_};
    set_grad(out, new_buffer(gname, bytes, Category::ActivationGrad));
    st.writes.push_back(grad_buf_[out]);
    prog().steps.push_back(std::move(st));
  }

  // ---- backward ----
  // A grad for `t` arrives (fresh: allocated by this backward; else a view of another grad). Autograd's
  // InputBuffer keeps the first, adds later ones in place into an unshared buffer, or out of place.
  // In-place accumulation needs the old grad to be unshared (engine's can_accumulate_inplace: use_count 1):
  // it is shared while another tensor whose backward has not run yet holds the same buffer as its grad.
  void accumulate(int32_t t, int32_t incoming, bool fresh, Step& st) {
    const int32_t old = grad_buf_[t];
    if (fresh) st.writes.push_back(incoming);
    if (old < 0) {
      set_grad(t, incoming);
      return;
    }
    add_unique(st.reads, old);
    if (fresh && !grad_shared_by_others(t, old)) return;  // old.add_(incoming); incoming freed
    const int32_t sum = new_buffer("grad:" + g_.tensors[t].name, bytes_of(t), Category::ActivationGrad);
    st.writes.push_back(sum);
    set_grad(t, sum);
  }

  void set_grad(int32_t t, int32_t buffer) {
    grad_buf_[t] = buffer;
    grad_holders_[buffer].push_back(t);
  }

  bool grad_shared_by_others(int32_t t, int32_t buffer) const {
    auto it = grad_holders_.find(buffer);
    if (it == grad_holders_.end()) return false;
    for (int32_t other : it->second)
      if (other != t && grad_buf_[other] == buffer && !grad_consumed_[other]) return true;
    return false;
  }

  // A parameter's grad. Contributions meet in the InputBuffer of the parameter's AccumulateGrad node
  // (torch/csrc/autograd/input_buffer.cpp), which then steals the sum as .grad (accumulate_grad.h):
  //  - a later contribution is added in place into the buffered one, unless that one is a view (a grad
  //    that reached the parameter through transpose/reshape, e.g. a tied output embedding): a view's
  //    base keeps its storage shared, so `old + new` allocates the sum and frees the old one;
  //  - with grads already resident (accumulation across micro-batches) every contribution is added in
  //    place into .grad; ZeRO-2/3 first hold the full grad, then keep their shard.
  void param_grad(int32_t p, bool was_cast, bool via_view, Step& st) {
    const std::string name = "grad:" + g_.tensors[p].name;
    if (was_cast)  // the low-precision grad of the autocast copy, before ToCopyBackward makes it float32
      st.writes.push_back(new_buffer(name + ":autocast", bytes_in(p, low_precision_dtype(o_.precision)), Category::ActivationGrad));
    if (zero3())
      st.writes.push_back(new_buffer(g_.tensors[p].name + ":gathered", bytes_of(p), Category::Weight));
    const uint64_t full = bytes_of(p);
    const int32_t old = param_grad_[p];
    if (old >= 0 || shard_grads())
      st.writes.push_back(new_buffer(name + ":partial", full, Category::ActivationGrad));
    if (old >= 0) {
      add_unique(st.reads, old);
      Buffer& held = prog().buffers[old];
      if (!grad_is_view_[p] || held.resident || shard_grads()) return;
      held.live_at_end = false;  // replaced by the out-of-place sum
      param_grad_[p] = new_buffer(name, full, Category::Gradient);
      prog().buffers[param_grad_[p]].live_at_end = true;
      st.writes.push_back(param_grad_[p]);
      grad_is_view_[p] = false;
      return;
    }
    const uint64_t bytes = shard_grads() ? shard(full) : full;
    param_grad_[p] = new_buffer(name, bytes, Category::Gradient);
    prog().buffers[param_grad_[p]].live_at_end = true;
    st.writes.push_back(param_grad_[p]);
    grad_is_view_[p] = via_view;
    r_.grad_bytes = checked_add(r_.grad_bytes, bytes, "gradient bytes");
  }

  void emit_backward(int32_t i) {
    const FusedOp& op = c_.ops[i];
    const AutogradRule& rule = c_.rules[i];
    Step st;
    st.name = "backward:" + op.name;
    st.op = op.op + "_backward";
    st.phase = Phase::Backward;
    st.flops = checked_mul(c_.op_flops[i], 2, "FLOP count");
    int32_t out_grad = -1;
    for (int32_t t : op.outputs)
      if (grad_buf_[t] >= 0) {
        add_unique(st.reads, grad_buf_[t]);
        if (out_grad < 0) out_grad = grad_buf_[t];
      }
    if (out_grad < 0) return;  // nothing downstream reached the loss
    for (int32_t t : op.outputs) grad_consumed_[t] = true;
    bool any_input = false;
    std::set<int32_t> done;
    for (int32_t t : op.inputs) any_input |= c_.requires_grad[t];
    if (!any_input) return;
    for (int32_t b : saved_[i]) add_unique(st.reads, b);
    for (int32_t t : op.inputs) {
      if (!c_.requires_grad[t] || !done.insert(t).second) continue;
      const bool was_cast = cast_inputs_[i].count(t) > 0;
      if (c_.tied_to[t] >= 0) {  // the grad of a transposed view of the embedding
        param_grad(c_.tied_to[t], was_cast, /*via_view=*/true, st);
        continue;
      }
      if (c_.is_param[t]) {
        const bool via_view = std::find(rule.passthrough_inputs.begin(), rule.passthrough_inputs.end(), t) !=
                              rule.passthrough_inputs.end();
        param_grad(t, was_cast, via_view, st);
        continue;
      }
      if (was_cast)
        st.writes.push_back(new_buffer("grad:" + g_.tensors[t].name + ":autocast", bytes_in(t, autocast_target(op, t)),
                                       Category::ActivationGrad));
      const bool passthrough = !was_cast && std::find(rule.passthrough_inputs.begin(), rule.passthrough_inputs.end(), t) !=
                                                rule.passthrough_inputs.end();
      if (passthrough) {
        accumulate(t, out_grad, /*fresh=*/false, st);
      } else {
        accumulate(t, new_buffer("grad:" + g_.tensors[t].name, bytes_of(t), Category::ActivationGrad), true, st);
      }
    }
    for (const SavedExtra& e : rule.backward_temporaries)
      st.writes.push_back(new_buffer(op.name + e.suffix, e.bytes, Category::Workspace));
    touch_cublas(op, st, /*backward=*/true);
    prog().steps.push_back(std::move(st));
  }

  // ---- optimizer ----
  void emit_optimizer() {
    if (!o_.steady_state && states_per_param() > 0) {
      Step init{"optimizer:init_state", "zeros_like", Phase::Optimizer, {}, new_states(/*resident=*/false), 0};
      prog().steps.push_back(std::move(init));
    }
    Step st{"optimizer:step", std::string(optimizer_name()), Phase::Optimizer, {}, {}, 0};
    for (int32_t p : c_.params)
      if (param_grad_[p] >= 0) add_unique(st.reads, param_grad_[p]);
    const bool adam = o_.optimizer == Optimizer::Adam || o_.optimizer == Optimizer::AdamW;
    if (adam && o_.optimizer_impl == OptimizerImpl::SingleTensor) {
      // _single_tensor_adam: per parameter, (exp_avg_sq.sqrt() / bias_correction2_sqrt) holds the sqrt
      // and the quotient at once; both are freed before the next parameter.
      prog().steps.push_back(std::move(st));
      for (int32_t p : c_.params) {
        if (param_grad_[p] < 0) continue;
        const std::string& name = g_.tensors[p].name;
        Step one{"optimizer:" + name, std::string(optimizer_name()), Phase::Optimizer, {param_grad_[p]}, {}, 0};
        one.writes = {new_buffer("exp_avg_sq_sqrt:" + name, state_bytes(p), Category::Workspace),
                      new_buffer("denom:" + name, state_bytes(p), Category::Workspace)};
        prog().steps.push_back(std::move(one));
      }
      return;
    }
    if (adam && o_.optimizer_impl != OptimizerImpl::Fused) {
      // _multi_tensor_adam: torch._foreach_sqrt(exp_avg_sqs) allocates one tensor per parameter of the
      // device/dtype group, all alive together; torch 1.13 then adds eps out of place (a second set).
      const int sets = o_.optimizer_impl == OptimizerImpl::ForeachTorch1 ? 2 : 1;
      for (int set = 0; set < sets; ++set)
        for (int32_t p : c_.params)
          if (param_grad_[p] >= 0)
            st.writes.push_back(new_buffer((set == 0 ? "exp_avg_sq_sqrt:" : "denom:") + g_.tensors[p].name,
                                           state_bytes(p), Category::Workspace));
    }
    prog().steps.push_back(std::move(st));
  }

  const char* optimizer_name() const {
    switch (o_.optimizer) {
      case Optimizer::Sgd: return "sgd";
      case Optimizer::Momentum: return "sgd_momentum";
      case Optimizer::Adam: return "adam";
      case Optimizer::AdamW: return "adamw";
    }
    return "sgd";
  }

  void fill_result() {
    for (size_t i = 0; i < c_.ops.size(); ++i) {
      r_.forward_flops = checked_add(r_.forward_flops, c_.op_flops[i], "FLOP count");
      if (segment_of_[i] >= 0) r_.recompute_flops = checked_add(r_.recompute_flops, c_.op_flops[i], "FLOP count");
    }
    if (r_.forward_flops > 0)
      r_.recompute_percent = 100.0 * static_cast<double>(r_.recompute_flops) / static_cast<double>(r_.forward_flops);
  }

  const TrainingContext& c_;
  const Graph& g_;
  const TrainingOptions& o_;
  std::vector<int32_t> boundaries_;           // op indices ending checkpointed segments, ascending
  TrainingResult r_;
  std::vector<int32_t> fwd_buf_, rec_buf_;    // tensor -> buffer (forward, current recomputation)
  std::vector<int32_t> cast_cache_, rec_cast_;  // parameter -> autocast copy
  std::vector<int32_t> forward_casts_;
  std::vector<int32_t> grad_buf_;             // tensor -> its grad's buffer
  std::map<int32_t, std::vector<int32_t>> grad_holders_;  // grad buffer -> tensors it is the grad of
  std::vector<bool> grad_consumed_;           // the backward that reads this tensor's grad has run
  std::vector<int32_t> param_grad_;           // parameter -> .grad buffer
  std::vector<bool> grad_is_view_;            // parameter -> its buffered grad reached it through a view
  std::vector<bool> contiguous_;
  std::vector<std::vector<int32_t>> saved_;   // op -> buffers its backward reads
  std::vector<std::set<int32_t>> cast_inputs_;  // op -> inputs autocast copied
  std::vector<int32_t> segment_of_;           // op -> checkpointed segment (-1: none)
  bool recomputing_ = false;
  std::vector<int32_t> held_by_checkpoint_;   // buffers CheckpointFunction.backward holds (see recompute_segment)
  int32_t cublas_forward_ = -1, cublas_backward_ = -1;
  int32_t log_softmax_ = -1, total_weight_ = -1, loss_ = -1, loss_target_ = -1, mse_input_ = -1;
};

std::vector<int32_t> boundary_ops(const TrainingContext& c, const std::vector<int32_t>& chosen) {
  std::vector<int32_t> ops;
  for (int32_t i : chosen) ops.push_back(c.separators[i].op);
  return ops;
}

// --checkpoint auto: the fewest recomputed FLOPs whose peak (lower bound + resident) fits the budget.
// Recompute is the forward FLOPs up to the last boundary, so try last boundaries from the first
// candidate onwards; for each, boundaries every K candidates ending there, K from a small ladder.
std::vector<int32_t> auto_boundaries(const TrainingContext& c, std::vector<std::string>& notes) {
  const uint64_t budget = c.options.checkpoint.budget_bytes;
  if (budget == 0) throw InputError("--checkpoint auto needs --budget SIZE");
  if (program_peak(TrainingBuilder(c, {}).build().program).total() <= budget) return {};
  const int32_t n = static_cast<int32_t>(c.separators.size());
  std::vector<int32_t> best;
  uint64_t best_peak = UINT64_MAX;
  for (int32_t last = 0; last < n; ++last) {
    std::vector<int32_t> fitting;
    uint64_t fitting_peak = UINT64_MAX;
    for (int32_t k : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32}) {
      if (k > last + 1 && k != 1) break;
      const std::vector<int32_t> chosen = every_k_ending_at(last, k);
      const uint64_t peak = program_peak(TrainingBuilder(c, boundary_ops(c, chosen)).build().program).total();
      if (peak < best_peak) { best_peak = peak; best = chosen; }
      if (peak <= budget && peak < fitting_peak) { fitting_peak = peak; fitting = chosen; }
    }
    if (!fitting.empty()) return fitting;
  }
  notes.push_back("No checkpoint boundary set fits the budget of " + std::to_string(budget) +
                  " bytes; using the lowest-peak set found.");
  return best;
}

}  // namespace

TrainingResult build_training_program(const Graph& graph, const TrainingOptions& options) {
  const TrainingContext context = make_training_context(graph, options);
  std::vector<std::string> notes = context.notes;
  std::vector<int32_t> chosen = options.checkpoint.mode == CheckpointMode::Auto
                                    ? auto_boundaries(context, notes)
                                    : choose_boundaries(graph, context.separators, options.checkpoint);
  TrainingResult result = TrainingBuilder(context, boundary_ops(context, chosen)).build();
  for (const Separator& s : context.separators) result.candidate_boundaries.push_back(graph.tensors[s.tensor].name);
  for (int32_t i : chosen) result.checkpoint_boundaries.push_back(graph.tensors[context.separators[i].tensor].name);
  if (options.checkpoint.mode != CheckpointMode::None && context.separators.empty())
    notes.push_back("The graph has no tensor that separates it: nothing can be checkpointed.");
  if (options.shard == Sharding::Zero3)
    notes.push_back("ZeRO-3: each op gathers its full parameters in forward and again in backward (transient).");
  if (options.grad_accum > 1)
    notes.push_back("Gradient accumulation: this is one micro-batch of " + std::to_string(options.grad_accum) +
                    " with the grads of earlier micro-batches resident, plus the optimizer step.");
  if (options.optimizer == Optimizer::Adam || options.optimizer == Optimizer::AdamW) {
    static const char* impl[] = {
        "foreach (PyTorch 2.x default on CUDA): one parameter-sized temporary per parameter during step()",
        "foreach as in torch 1.13: two parameter-sized temporaries per parameter during step()",
        "single-tensor: two temporaries of one parameter's size at a time", "fused: no temporaries"};
    notes.push_back(std::string("Adam update: ") + impl[static_cast<int>(options.optimizer_impl)] +
                    "; Adam (not AdamW) with weight_decay > 0 would add a grad-sized set.");
  }
  if (options.runtime == Runtime::PyTorch)
    notes.push_back("Matmuls use two cuBLAS workspaces: the forward thread's and autograd's backward thread's (CublasHandlePool.cpp).");
  notes.push_back(options.steady_state ? "Steady state: optimizer states exist from the start (a later iteration)."
                                       : "First iteration: optimizer states are created inside the optimizer step.");
  result.notes.insert(result.notes.begin(), notes.begin(), notes.end());
  return result;
}

}  // namespace memplan
