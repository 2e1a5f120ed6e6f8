// Llama-family decoder (Llama 2/3, SmolLM2, Qwen2-style q/k/v bias), loaded from a Hugging Face model
// directory (config.json + safetensors) that is either unquantized (bf16/fp16/fp32) or an NVFP4 checkpoint
// (compressed-tensors / ModelOpt, io/checkpoint.h). Every quantized linear runs through
// linear/linear.h QuantizedLinear, with the semantics and executor chosen by linear/select.h; unquantized
// linears (lm_head, or a whole bf16 model) run through the dense CPU matmul of model/cpu_ops.h.
//
// Numerics (HF transformers' LlamaForCausalLM in the model dtype T, activations rounded to T where HF's are):
//   h = embed[tok]
//   per layer: a = rmsnorm(h); q,k,v = linears(a) (+bias); RoPE(q, k); o = softmax(q·kᵀ/sqrt(hd)) v
//              (f32 scores and softmax, GQA: query head j reads kv head j / (H/KV)); h = T(h + o_proj(o));
//              a = rmsnorm(h); h = T(h + down(T(T(silu(gate(a))) · up(a))))
//   logits = lm_head(rmsnorm(h)) in f32 (not rounded to T).
// RoPE: inv_freq[i] = theta^(-2i/hd) (f64, then f32), rescaled by rope_scaling ("llama3": wavelength bands of
// Llama 3.1; "linear": /factor); angles pos·inv_freq in f64, cos/sin stored as f32.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/log.h"
#include "io/checkpoint.h"
#include "linear/select.h"
#include "model/cpu_ops.h"

namespace nvfp4 {
class QuantizedLinear;
}

namespace nvfp4::model {

struct RopeScaling {
  std::string type;                    // "" (none), "llama3", "linear"
  double factor = 1.0;
  double low_freq_factor = 1.0;        // llama3
  double high_freq_factor = 4.0;       // llama3
  int64_t original_max_position = 8192;  // llama3: original_max_position_embeddings
};

struct LlamaConfig {
  int64_t hidden = 0, intermediate = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, vocab = 0;
  int64_t max_position = 2048;
  double rms_eps = 1e-6, rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_embeddings = false;
  bool attention_bias = false;  // q/k/v biases (Qwen2 always has them)
  DType dtype = DType::BF16;    // model dtype (from config.json torch_dtype)
  int32_t bos_id = -1;
  std::vector<int32_t> eos_ids;  // config.json / generation_config.json eos_token_id (int or list)
};

// Reads the Llama-relevant fields of config.json (and generation_config.json next to it when present).
// Throws nvfp4::Error for an unsupported architecture or rope_scaling type, naming the file.
LlamaConfig llama_config_from(const io::ModelConfig& mc, const std::string& dir);

// f32 inverse frequencies (hd/2 values) after rope_scaling. Exposed for tests.
std::vector<float> rope_inv_freq(const LlamaConfig& c);

struct LoadOptions {
  Overrides overrides;            // dispatch of the quantized linears (flags + environment)
  int64_t max_context = 4096;     // KV cache capacity in tokens (capped by max_position)
  bool record_input_amax = false; // calibration: keep max |x| of every linear's input (CPU ops only)
  // Where embedding, norms, RoPE, attention, SwiGLU, residuals and the unquantized (dense) linears run:
  // false = the CPU (quantized linears on a GPU then get their activations copied in and out per call);
  // true = CUDA kernels (backends/cuda/ops) with activations kept on the device; needs a CUDA build, a GPU,
  // and every quantized linear on the device. Throws nvfp4::Error otherwise.
  bool ops_on_device = false;
  // With ops_on_device false: decide at load, true when the model has quantized linears, a GPU is selected and
  // every quantized linear's executor runs there (the CLI's --ops auto, its default), and not calibrating.
  bool ops_auto = false;
  // With ops_on_device: one-token steps (decoding) replay a CUDA graph of the whole step, captured at the
  // second such step (the first runs eagerly and sets up the per-stream buffers it uses) and captured again
  // when a buffer it reads has moved; every launch of the step is then one graph launch. The logits are
  // bit-identical to the eager step's. A capture that fails is reported once and the steps run eagerly.
  bool cuda_graphs = true;
  // With ops_on_device: in layers whose seven linears are all quantized, q/k/v and gate/up run as one linear
  // each (their weights concatenated at load; same scales and executor needed, else they stay apart).
  bool fuse_linears = true;
  // Unquantized model only: quantize nothing, run every linear dense (the default). A quantized checkpoint
  // always runs its quantized linears through QuantizedLinear.
};

// How the layers of one group ran, for `nvfp4 run`'s report.
struct ExecutorSummary {
  std::string group;   // "attention q/k/v/o", "mlp gate/up/down", "lm_head", "norms/rope/attention"
  std::string how;     // "w4a16 on cuda:0 (default: ...)", "dense bf16 on cpu"
  int count = 0;
};

class LlamaModel {
 public:
  // dir: HF model directory. Throws nvfp4::Error. With ops_on_device, a copy of `rep` is kept for the one
  // warning decoding can give (a CUDA graph that could not be captured): its callbacks must outlive the model.
  static std::unique_ptr<LlamaModel> load(const std::string& dir, const LoadOptions& opt, const Reporter& rep);
  ~LlamaModel();

  const LlamaConfig& config() const { return cfg_; }
  DType act_dtype() const { return act_; }
  int64_t context_capacity() const { return cap_; }
  int64_t position() const { return pos_; }  // tokens in the KV cache

  // Runs tokens through the model at positions position()..position()+n-1, appending their keys/values to
  // the cache. logits: (n, vocab) f32 when all_logits, else (1, vocab) for the last token. Throws when the
  // cache would overflow.
  void forward(const int32_t* tokens, int64_t n, float* logits, bool all_logits);
  void reset() { pos_ = 0; }

  std::vector<ExecutorSummary> executor_summary() const;
  // Calibration (record_input_amax): max |x| over everything run so far, per linear module name.
  const std::map<std::string, float>& input_amax() const { return amax_; }
  uint64_t weight_bytes() const { return weight_bytes_; }

  struct Linear;  // one linear layer (dense or quantized), defined in llama.cpp
  struct Layer;
  struct DeviceState;  // device copies and buffers when ops run on the GPU (llama.cpp)
  bool ops_on_device() const { return dev_ != nullptr; }
  // --ops cuda: one-token steps now replay a captured CUDA graph (LoadOptions::cuda_graphs).
  bool decode_graph_active() const;

 private:
  LlamaModel() = default;
  // One linear of a group that reads the same input: l's output y (m, N) f32 (values in T).
  struct LinearOut {
    const Linear* l;
    float* y;
  };
  // Runs the linears of `group` (q/k/v, gate/up, or one alone) on the same input x (m, K) f32 (values in T).
  // Their quantized linears share one 16-bit conversion of x and, on a device, one upload of it.
  void run_linears(std::initializer_list<LinearOut> group, const float* x, int64_t m);
  void run_linear(const Linear& l, const float* x, int64_t m, float* y) { run_linears({{&l, y}}, x, m); }
  void init_device(const DeviceInfo& dev);
  // --ops cuda, after init_device: frees the host copies of everything forward_device reads from the device
  // (embedding, norms, RoPE table, dense weights and biases). The CPU forward cannot run afterwards.
  void release_host_weights();
  void forward_device(const int32_t* tokens, int64_t n, float* logits, bool all_logits);

  LlamaConfig cfg_;
  DType act_ = DType::BF16;
  int64_t cap_ = 0, pos_ = 0;
  // The mapped checkpoint when 16-bit weights are read from it in place (embedding, dense linears whose file
  // dtype is T); null when every weight was copied. Declared before the members that point into it.
  std::unique_ptr<io::Checkpoint> ck_;
  const uint16_t* embed_ = nullptr;    // (vocab, hidden) in T bits when T is 16-bit: embed_bits_ or the file
  std::vector<uint16_t> embed_bits_;   // owned storage for embed_ when the file's dtype is not T
  std::vector<float> embed_f32_;       // (vocab, hidden) when T is F32
  std::vector<float> final_norm_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::unique_ptr<Linear> lm_head_;
  std::vector<float> rope_cs_;         // (cap, hd) : per position hd/2 cos then hd/2 sin
  // The KV cache on the host: (layers, kv_heads, cap, hd), as T bit patterns when T is 16-bit (the cached
  // keys and values are T values), else f32.
  std::vector<uint16_t> kbits_, vbits_;
  std::vector<float> kcache_, vcache_;
  bool record_amax_ = false;
  std::map<std::string, float> amax_;
  uint64_t weight_bytes_ = 0;
  std::vector<uint16_t> xbits_, ybits_;  // scratch for quantized linears
  void* dev_x_ = nullptr;                // device scratch for on-device quantized linears
  void* dev_y_ = nullptr;
  size_t dev_bytes_ = 0;
  std::unique_ptr<DeviceState> dev_;
  std::string device_name_;
};

}  // namespace nvfp4::model
