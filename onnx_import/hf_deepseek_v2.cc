// deepseek_v2 (DeepSeek-V2, DeepSeek-V2-Lite; onnx_import/hf_deepseek.h): the rotary DeepseekV2Attention applies
// otherwise than deepseek_v3, apply_rotary_emb, as torch.onnx.export (torch 1.13, opset 17) writes
// tests/models/hf_deepseek_v2.py. The rest is hf_deepseek.cc's (the latent attention, mla_attention), llama_graph.cc's
// (the rotary tables, without the cat to d), hf_deepseek_router.cc's (DeepseekV2MoEGate) and hf_moe.cc's (experts).
#include <string>

#include "onnx_import/decoder_builder.h"

namespace memplan {

// apply_rotary_emb (transformers models/deepseek_v2/modeling_deepseek_v2.py at 0233e509) multiplies
// view_as_complex(x.float().reshape(b, h, s, d/2, 2)) by freqs_cis and takes view_as_real(...).flatten(3)
// .type_as(x). torch.onnx.export cannot write complex tensors, so this is the one place where the graph follows
// the twin (tests/models/hf_deepseek_v2.py complex_rotary) rather than an export of transformers' code: the same
// values in real arithmetic, allocating what transformers allocates (the float32 copy, x itself in float32; the
// rotated float32 result, here the stacked (b, h, s, d/2, 2); the cast back, a no-op in float32). So: the pairs
// (re, im) = x.reshape(b, h, s, d/2, 2)[..., 0] and [..., 1] (select: Gather on the pooled index), re·cos - im·sin
// and re·sin + im·cos on the half-width tables (freqs_cis' real and imaginary parts), torch.stack(dim=-1) (each
// Unsqueezed on its own axes Constant, Concat) and the reshape back to (b, h, s, d) (flatten(3)'s sizes; for the
// shared rope key, the list the JIT built beside its view: mla_attention's rope_key_list_).
std::string LlamaBuilder::mla_complex_rotary(const std::string& x, int64_t heads) {
  const int64_t d = c_.qk_rope_head_dim;
  e_.note(heads), e_.note(d / 2), e_.note(2);
  const std::string five = e_.size_list({b_, e_.pooled(heads), s_, e_.pooled(d / 2), e_.pooled(2)});
  const std::string pairs = reshape(x, five);
  const std::string re = e_.op("Gather", {pairs, e_.pooled(0)});
  e_.i("axis", 4);
  const std::string im = e_.op("Gather", {pairs, e_.pooled(1)});
  e_.i("axis", 4);
  const std::string real = e_.op("Sub", {e_.op("Mul", {re, cos_}), e_.op("Mul", {im, sin_})});
  const std::string imag = e_.op("Add", {e_.op("Mul", {re, sin_}), e_.op("Mul", {im, cos_})});
  const std::string first = e_.op("Unsqueeze", {real, e_.const_i64({-1}, false)});
  const std::string second = e_.op("Unsqueeze", {imag, e_.const_i64({-1}, false)});
  const std::string stacked = e_.op("Concat", {first, second});
  e_.i("axis", -1);
  return reshape(stacked, heads == 1 ? rope_key_list_ : e_.size_list({b_, e_.pooled(heads), s_, e_.pooled(d)}));
}

}  // namespace memplan
