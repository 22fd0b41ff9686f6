// serve --engine sglang's answer over the vLLM analysis (report/serve_engines.h says which of the analysis's terms
// each engine takes): SGLang's token pool (cost_models/sglang_engine.h), its hybrid sliding-window pool
// (cost_models/sglang_swa.h), multi-head latent attention (cost_models/sglang_mla.h) and its quantized weights
// (cost_models/sglang_weights.h, and gpt-oss's MXFP4 experts: cost_models/mxfp4_experts.h).
#pragma once

#include <string>

#include "report/serve_engine_answer.h"

namespace memplan {

// SGLang's start-up answer on a GPU of compute capability `capability` (`cuda` false: ROCm). Throws InputError.
EngineAnswer sglang_answer(const VllmAnswer& v, const ServeSettings& s, int capability, bool cuda,
                           const std::string& model_type);

}  // namespace memplan
