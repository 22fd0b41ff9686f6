// The loss rows of the option schema (report/options.h): the loss, what the loop keeps of the output, the copies
// a framework makes of it (accelerate's after the loss, Lightning Fabric's before it) and the float32 islands of a
// half model. In the schema after --grad-accum (report/option_schema.cc).
#include "report/option_choices.h"
#include "report/option_rows.h"

namespace memplan {

// Rows are designated initializers that name only what differs from OptionSpec's defaults; GCC 12's -Wextra
// would warn for every member left to its default member initializer.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
std::vector<OptionSpec> loss_option_rows() {
  using K = OptionKind;
  return {
      {.flag = "--loss", .kind = K::Choice, .commands = kTraining, .scope = Scope::Train,
       .help = "Loss on the last output: none, cross-entropy (int64 targets), mse, chunked-ce:N (torchtune's "
               "CEWithChunkedOutputLoss: N slices of the sequence, each upcast to fp32), chunked-ce-tokens:N (litgpt's "
               "chunked_cross_entropy on its head's chunks of N positions, in the logits' type: no upcast but autocast's), "
               "chunked-ce-rows:N (the same on a whole head, as litgpt's full fine-tune: the shifted logits flattened "
               "to batch x (seq - 1) rows, a copy at batch > 1, in chunks of N rows whose grads are concatenated in "
               "backward) or fused-linear-ce (Liger "
               "Kernel's fused head and cross-entropy: the logits never exist whole; the last op must be the head's "
               "MatMul)",
       .field = FIELD(estimate.loss),
       .choices = kLossChoices.names(), .show_default = true},
      {.flag = "--free-output", .kind = K::Flag, .commands = kTraining, .scope = Scope::Train,
       .help = "The loop keeps no reference to the model's output past the loss, as Hugging Face's Trainer "
               "(compute_loss returns the loss alone): the logits die at their last reader instead of living "
               "through backward",
       .field = FIELD(estimate.free_output),
       .describe = [](const EstimateArgs& a) { return if_set(a.free_output, ", output freed after the loss"); }},
      {.flag = "--outputs-to-fp32", .kind = K::Flag, .commands = kTraining, .scope = Scope::Train,
       .help = "accelerate's convert_outputs_to_fp32 (Accelerator.prepare_model under its mixed precision, as the "
               "Hugging Face Trainer's bf16/fp16 runs it): after the loss the half logits come back as a float32 "
               "copy, which replaces them (with --free-output it dies before backward). --precision amp-*; --loss "
               "cross-entropy or mse",
       .field = FIELD(estimate.outputs_to_fp32),
       .describe = [](const EstimateArgs& a) { return if_set(a.outputs_to_fp32, ", outputs converted to float32"); }},
      {.flag = "--outputs-to-default-dtype", .kind = K::Flag, .commands = kTraining, .scope = Scope::Train,
       .help = "Lightning Fabric's output conversion (_FabricModule.forward returns precision.convert_output(output) "
               "under bf16-true, 16-true, bf16-mixed, 16-mixed and bitsandbytes' precisions, as litgpt's finetune "
               "scripts run it): the model's half logits come back as float32 copies (torch.get_default_dtype()) "
               "that replace them, the loss reads and computes in float32, and backward casts each grad back. "
               "--precision fp16/bf16/amp-*; --loss chunked-ce-tokens:N or chunked-ce-rows:N (litgpt's)",
       .field = FIELD(estimate.outputs_to_default_dtype),
       .describe = [](const EstimateArgs& a) {
         return if_set(a.outputs_to_default_dtype, ", outputs copied to float32 before the loss");
       }},
      {.flag = "--upcast", .kind = K::Text, .commands = kTraining, .scope = Scope::Train,
       .help = "What the framework computes in float32 inside a half-precision model (--precision fp16/bf16): none, "
               "or any of rmsnorm (transformers' LlamaRMSNorm normalises a float32 copy), softmax (eager attention's "
               "softmax(dtype=float32)), loss (ForCausalLMLoss's logits.float()), logits (transformers up to 4.45: the "
               "forward returns logits.float() and the loss copies the shifted logits), comma-separated",
       .field = FIELD(estimate.upcast), .show_default = true,
       .describe = [](const EstimateArgs& a) { return if_set(a.upcast != "none", ", float32 " + a.upcast); }},
  };
}
#pragma GCC diagnostic pop

}  // namespace memplan
