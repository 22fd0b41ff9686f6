// Training, loss phase: the loss on the last output and the grad that seeds backward.
#include "cost_models/training_step.h"
#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {
namespace {

// A half type, whose outputs accelerate's and Fabric's wrappers return as float32 copies.
bool half_type(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

}  // namespace

// ---- loss ----
void TrainingStep::emit_loss() {
  if (graph_.outputs.empty()) throw InputError("model '" + graph_.model_path + "' has no outputs to train");
  const int32_t out = graph_.outputs.back();
  if (options_.loss == LossKind::FusedLinearCrossEntropy) {  // the head and the loss in one op (training_loss_fused.cc)
    emit_fused_loss();
    return;
  }
  if (forward_buffer_[out] < 0) throw InputError("training output '" + graph_.tensors[out].name + "' has no buffer");
  if (!context_.requires_grad[out])
    throw InputError("output '" + graph_.tensors[out].name + "' of model '" + graph_.model_path +
                     "' does not depend on any trainable parameter");
  const Tensor& logits = graph_.tensors[out];
  const DType loss_dtype = loss_in_float32() ? DType::Float32 : layout().dtype[out];
  const uint64_t scalar = static_cast<uint64_t>(dtype_bits(loss_dtype) / 8);
  // The training loop's `output = model(x)` holds the output through backward and the optimizer step, unless
  // the loop drops it with the loss (--free-output), or holds accelerate's float32 copy instead (--outputs-to-fp32),
  // or Fabric's (--outputs-to-default-dtype).
  const bool converted = options_.outputs_to_fp32 && half_type(layout().dtype[out]);
  program().buffers[forward_buffer_[out]].live_at_end = !options_.free_output && !converted && !fabric_converts(out);
  if (options_.loss == LossKind::ChunkedCrossEntropy) {  // its own steps and backward (training_loss_chunked.cc)
    emit_chunked_loss(out);
    return;
  }
  if (options_.loss == LossKind::ChunkedCrossEntropyTokens) {  // training_loss_chunked_tokens.cc
    emit_token_chunked_loss(out);
    return;
  }
  if (options_.loss == LossKind::ChunkedCrossEntropyRows) {  // training_loss_chunked_rows.cc
    emit_row_chunked_loss(out);
    return;
  }
  Step st;
  st.phase = Phase::Forward;
  st.reads = {forward_buffer_[out]};
  for (int32_t b : forward_autocast_copies_) add_unique(st.reads, b);  // the autocast cache lives through the forward
  int32_t loss_input = forward_buffer_[out];
  // Losses autocast to float32, and transformers' ForCausalLMLoss upcasts the logits itself (--upcast loss:
  // logits = logits.float(), src/transformers/loss/loss_utils.py): a float32 copy the loss reads, which nothing
  // keeps (ToCopyBackward0 saves no tensor). With no loss (`output.backward(grad)`) nothing is cast.
  if (options_.loss != LossKind::None && loss_in_float32() && layout().dtype[out] != DType::Float32) {
    loss_input = writer_.new_buffer(logits.name + (is_amp(options_.precision) ? ":autocast" : ":float32"),
                                    bytes_in(out, DType::Float32), Category::Activation);
    st.writes.push_back(loss_input);
  }
  switch (options_.loss) {
    case LossKind::CrossEntropy: {
      if (logits.shape.empty() || logits.shape.back() <= 0)
        throw InputError("cross-entropy needs class logits as the last output of model '" + graph_.model_path + "'");
      const uint64_t rows = logits.elements() / static_cast<uint64_t>(logits.shape.back());
      const int32_t targets = add_batch_tensor("targets", checked_mul(rows, 8, "targets"));
      st.name = "loss:cross_entropy";
      st.op = "cross_entropy";
      st.flops = checked_mul(logits.elements(), 3, "FLOP count");
      uint64_t loss_bytes = bytes_in(out, loss_dtype);
      if (options_.upcast.logits) {
        // transformers up to 4.45 (LlamaForCausalLM.forward): shift_logits = logits[..., :-1, :].contiguous() and
        // shift_labels = labels[..., 1:].contiguous(), copies the loss reads; neither is kept for backward.
        const int64_t seq = logits.shape.size() >= 3 ? logits.shape[logits.shape.size() - 2] : 0;
        if (seq < 2)
          throw InputError("--upcast logits shifts the logits along the sequence: output '" + logits.name + "' of model '" +
                           graph_.model_path + "' is not [batch, seq >= 2, vocab]");
        const uint64_t s = static_cast<uint64_t>(seq);
        loss_bytes = loss_bytes / s * (s - 1);
        loss_input = writer_.new_buffer(logits.name + ":shifted", loss_bytes, Category::Activation);
        st.writes.push_back(loss_input);
        st.writes.push_back(writer_.new_buffer("targets:shifted", checked_mul(rows / s * (s - 1), 8, "targets"),
                                               Category::Activation));
      }
      // cross_entropy = log_softmax (saves its output) + nll_loss (saves target and total_weight).
      log_softmax_buffer_ = writer_.new_buffer(logits.name + ":log_softmax", loss_bytes, Category::Activation);
      total_weight_buffer_ = writer_.new_buffer("loss:total_weight", scalar, Category::Activation);
      loss_buffer_ = writer_.new_buffer("loss", scalar, Category::Activation);
      program().buffers[loss_buffer_].live_at_end = true;
      st.writes.insert(st.writes.end(), {log_softmax_buffer_, total_weight_buffer_, loss_buffer_});
      st.reads.push_back(targets);
      loss_target_buffer_ = targets;
      break;
    }
    case LossKind::Mse: {
      const int32_t target = add_batch_tensor("targets", bytes_in(out, layout().dtype[out]));
      st.name = "loss:mse";
      st.op = "mse_loss";
      st.flops = checked_mul(logits.elements(), 3, "FLOP count");
      loss_buffer_ = writer_.new_buffer("loss", scalar, Category::Activation);
      program().buffers[loss_buffer_].live_at_end = true;
      st.writes.push_back(loss_buffer_);
      st.reads.push_back(target);
      loss_target_buffer_ = target;
      mse_input_buffer_ = loss_input;  // mse_loss saves its input and target
      break;
    }
    case LossKind::ChunkedCrossEntropy:
    case LossKind::ChunkedCrossEntropyTokens:
    case LossKind::ChunkedCrossEntropyRows:
    case LossKind::FusedLinearCrossEntropy:
      throw InternalError("the chunked and fused losses have their own steps");
    case LossKind::None: {
      st.name = "loss:none";
      st.op = "backward_seed";
      break;
    }
  }
  program().steps.push_back(std::move(st));
  if (converted) emit_output_to_fp32(out);
  seed_output_grad(out);
}

// accelerate's convert_outputs_to_fp32 (--outputs-to-fp32): under mixed precision Accelerator.prepare_model wraps the
// model's forward in torch.autocast and then in ConvertOutputsToFp32, which returns every float16/bfloat16 tensor of
// the output as tensor.float() (src/accelerate/accelerator.py prepare_model, utils/operations.py convert_to_fp32;
// huggingface/accelerate v1.14.0, beb0672a). The model computed its loss inside that forward (transformers'
// ForCausalLM with labels), so the copy comes after the loss step and after autocast has exited (its weight cache is
// gone). The half output is then held by nothing and dies at this step; the copy takes its place: through backward
// under a plain loop, dropped with the outputs by the Trainer's compute_loss (--free-output). Backward starts from
// the loss and never passes through the copy. Only the last output (the logits) is modelled.
void TrainingStep::emit_output_to_fp32(int32_t out) {
  const int32_t copy = writer_.new_buffer(graph_.tensors[out].name + ":to_fp32", bytes_in(out, DType::Float32),
                                          Category::Activation);
  program().buffers[copy].live_at_end = !options_.free_output;
  program().steps.push_back(Step{"convert_outputs_to_fp32", "to_copy", Phase::Forward, {forward_buffer_[out]}, {copy}, 0});
}

// Lightning Fabric's output conversion (--outputs-to-default-dtype). _FabricModule.forward (src/lightning/fabric/
// wrappers.py, Lightning 2.6.1, 655a3a91; litgpt v0.5.13 requires lightning>=2.6.1) runs the model inside
// precision.forward_context() and then `output = precision.convert_output(output)`; HalfPrecision (bf16-true,
// 16-true: plugins/precision/half.py), MixedPrecision (bf16-mixed, 16-mixed: amp.py) and BitsandbytesPrecision
// (bitsandbytes.py) all write it as apply_to_collection(data, function=_convert_fp_tensor, dtype=Tensor,
// dst_type=torch.get_default_dtype()): each floating tensor of the output, a list's included (a new list), becomes
// tensor.to(dst_type) (plugins/precision/utils.py _convert_fp_tensor), float32 once forward_context (HalfPrecision's
// _DtypeContextManager, autocast) has exited; 32-true's Precision returns the data as it is. So the copy follows the
// forward, and autocast's weight cache is gone by then (it dies at its last reader in the forward), and precedes the
// loop's loss, which reads the copy. The half output dies here: rebinding `output` drops the model's list once every
// copy exists. The copy lives as the output would have: through backward under a loop that keeps `output`, else
// until the loss has read it. _to_copy saves no tensor (tools/autograd/derivatives.yaml: _to_copy_backward(grad,
// self.options())), so backward casts the copy's grad back to the half type; the loss emits that.
bool TrainingStep::fabric_converts(int32_t out) const {
  return options_.outputs_to_default_dtype && half_type(layout().dtype[out]);
}

int32_t TrainingStep::emit_convert_output(int32_t out) {
  const int32_t copy = writer_.new_buffer(graph_.tensors[out].name + ":to_default_dtype", bytes_in(out, DType::Float32),
                                          Category::Activation);
  program().buffers[copy].live_at_end = !options_.free_output;
  program().steps.push_back(Step{"fabric:convert_output", "to_copy", Phase::Forward, {forward_buffer_[out]}, {copy}, 0});
  return copy;
}

// A pipeline stage before the last: its outputs are sent to the next stage (isend reads the tensor itself),
// whose data Megatron-LM then frees (deallocate_output_tensor, megatron/core/pipeline_parallel/schedules.py:
// only the autograd graph is kept). Backward starts from the grads received for them, one fresh tensor each.
void TrainingStep::emit_stage_send() {
  Step send{"p2p_send", "send", Phase::Forward, {}, {}, 0};
  for (int32_t t : context_.sent) add_unique(send.reads, forward_buffer_[t]);
  for (int32_t b : forward_autocast_copies_) add_unique(send.reads, b);  // the autocast cache lives through the forward
  program().steps.push_back(std::move(send));
  Step recv{"backward:p2p_recv_grad", "recv", Phase::Backward, {}, {}, 0};
  for (int32_t t : context_.sent) {
    if (!context_.requires_grad[t]) continue;
    set_grad(t, writer_.new_buffer("p2p_recv_grad:" + graph_.tensors[t].name, bytes_of(t), Category::ActivationGrad));
    recv.writes.push_back(grad_buffer_[t]);
  }
  program().steps.push_back(std::move(recv));
}

// The grad that enters the model's last output.
void TrainingStep::seed_output_grad(int32_t out) {
  const uint64_t bytes = bytes_of(out);
  const std::string gname = "grad:" + graph_.tensors[out].name;
  if (options_.loss == LossKind::CrossEntropy) {
    Step nll{"backward:nll_loss", "nll_loss_backward", Phase::Backward, {}, {}, 0};
    const uint64_t scalar = program().buffers[loss_buffer_].bytes;
    const int32_t seed = writer_.new_buffer("grad:loss", scalar, Category::ActivationGrad);  // torch.ones_like(loss)
    const int32_t grad_logsm = writer_.new_buffer("grad:" + graph_.tensors[out].name + ":log_softmax",
                                          program().buffers[log_softmax_buffer_].bytes, Category::ActivationGrad);
    nll.writes = {seed, grad_logsm};
    nll.reads = {loss_target_buffer_, total_weight_buffer_};
    program().steps.push_back(std::move(nll));
    Step lsm{"backward:log_softmax", "log_softmax_backward", Phase::Backward, {log_softmax_buffer_, grad_logsm}, {}, 0};
    // Each copy the loss made is a node of its own in backward, run after the engine has released the node before
    // it (torch/csrc/autograd/engine.cpp, evaluate_function: release_variables after the call without keep_graph):
    // the shifted copy's grad, then SliceBackward0's full-size grad (zeros, the slice copied in).
    if (options_.upcast.logits) {
      const int32_t shifted = writer_.new_buffer(gname + ":shifted", program().buffers[log_softmax_buffer_].bytes,
                                                 Category::ActivationGrad);
      lsm.writes.push_back(shifted);
      program().steps.push_back(std::move(lsm));
      lsm = Step{"backward:slice", "slice_backward", Phase::Backward, {shifted}, {}, 0};
    }
    if (loss_in_float32() && layout().dtype[out] != DType::Float32) {
      // The float32 grad of the float32 copy, then (ToCopyBackward0) its cast back to the logits' type.
      const int32_t grad32 = writer_.new_buffer(gname + ":float32", bytes_in(out, DType::Float32),
                                                Category::ActivationGrad);
      lsm.writes.push_back(grad32);
      program().steps.push_back(std::move(lsm));
      lsm = Step{"backward:to_copy", "to_copy_backward", Phase::Backward, {grad32}, {}, 0};
    }
    set_grad(out, writer_.new_buffer(gname, bytes, Category::ActivationGrad));
    lsm.writes.push_back(grad_buffer_[out]);
    program().steps.push_back(std::move(lsm));
    return;
  }
  Step st{options_.loss == LossKind::Mse ? "backward:mse_loss" : "backward:seed", "backward_seed", Phase::Backward, {}, {}, 0};
  if (options_.loss == LossKind::Mse) st.reads = {mse_input_buffer_, loss_target_buffer_};
  set_grad(out, writer_.new_buffer(gname, bytes, Category::ActivationGrad));
  st.writes.push_back(grad_buffer_[out]);
  program().steps.push_back(std::move(st));
}

}  // namespace memplan
