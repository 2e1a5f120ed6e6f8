// GGUF (llama.cpp) Llama-family model -> Hugging Face model directory in bf16:
//   config.json (LlamaForCausalLM / Qwen2ForCausalLM), model.safetensors (bf16, HF tensor names),
//   tokenizer.json (byte-level BPE from tokenizer.ggml.tokens/merges/token_type), tokenizer_config.json
//   (chat template, special tokens), generation_config.json (bos/eos).
// Tensor names: token_embd -> model.embed_tokens, output_norm -> model.norm, output -> lm_head,
//   blk.N.{attn_norm, ffn_norm} -> model.layers.N.{input_layernorm, post_attention_layernorm},
//   blk.N.attn_{q,k,v,output} -> model.layers.N.self_attn.{q,k,v,o}_proj,
//   blk.N.ffn_{gate,up,down} -> model.layers.N.mlp.{gate,up,down}_proj.
// llama.cpp's converter permutes the rows of q_proj / k_proj (arch "llama" only) from HF's rotate-half
// order to interleaved pairs: HF row (h, i, j) [head h, half i of 2, j < hd/2] is stored at GGUF row
// (h, j, i). The import undoes it (unpermute_rows). Quantized tensors are dequantized (io/gguf.h) and
// rounded to bf16.
#pragma once
#include <cstdint>
#include <string>

#include "common/log.h"
#include "io/gguf.h"

namespace nvfp4::model {

struct ImportSummary {
  std::string architecture;   // "llama", "qwen2"
  int64_t tensors = 0;
  int64_t parameters = 0;
  int64_t vocab = 0;
  std::string pretokenizer;   // tokenizer.ggml.pre
};

// Writes the directory `out_dir` (built in "<out_dir>.partial" and renamed when complete; an existing
// out_dir is replaced only when `overwrite`). Throws nvfp4::Error.
ImportSummary import_gguf(const std::string& gguf_path, const std::string& out_dir, bool overwrite,
                          const Reporter& rep);

// Undoes llama.cpp's q/k permutation on a (rows, cols) row-major matrix with n_head heads of rows/n_head
// rows each. Exposed for tests.
void unpermute_rows(const float* in, int64_t rows, int64_t cols, int64_t n_head, float* out);

// tokenizer.json text for a GGUF "gpt2"-model vocabulary. Exposed for tests.
std::string gguf_tokenizer_json(const io::GgufFile& f);

}  // namespace nvfp4::model
