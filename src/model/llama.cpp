#include "model/llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <type_traits>

#include "common/error.h"
#include "common/parallel.h"
#include "format/numerics.h"
#include "linear/linear.h"

#ifdef NVFP4_HAVE_CUDA
#include "backends/cuda/ops/decoder_ops.h"
#include "backends/cuda/ops/device_memory.h"
#endif

namespace nvfp4::model {

namespace {

// A fused gate/up linear's rows alternate in blocks of this many (interleave_linear_outputs): a 16-row weight tile
// of the decode kernel holds 8 features' gate rows and then their up rows, so that its epilogue can compute SwiGLU
// (Epilogue::Swiglu).
constexpr int64_t kGluBlock = 8;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::string();
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void read_ids(const nlohmann::json& v, std::vector<int32_t>* out) {
  if (v.is_number_integer()) out->push_back(v.get<int32_t>());
  else if (v.is_array())
    for (const auto& e : v)
      if (e.is_number_integer()) out->push_back(e.get<int32_t>());
}

}  // namespace

LlamaConfig llama_config_from(const io::ModelConfig& mc, const std::string& dir) {
  const std::string path = dir + "/config.json";
  static const char* kArchs[] = {"LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM"};
  bool known = mc.architecture.empty();
  for (const char* a : kArchs) known = known || mc.architecture == a;
  if (!known) {
    fail(path + ": architecture '" + mc.architecture +
         "' is not supported (expected LlamaForCausalLM, Qwen2ForCausalLM or MistralForCausalLM)");
  }
  LlamaConfig c;
  c.hidden = mc.hidden_size;
  c.intermediate = mc.intermediate_size;
  c.n_layers = mc.num_hidden_layers;
  c.n_heads = mc.num_attention_heads;
  c.n_kv_heads = mc.num_key_value_heads ? mc.num_key_value_heads : mc.num_attention_heads;
  c.head_dim = mc.head_dim ? mc.head_dim : (c.n_heads ? c.hidden / c.n_heads : 0);
  c.vocab = mc.vocab_size;
  c.max_position = mc.max_position_embeddings ? mc.max_position_embeddings : 2048;
  c.rms_eps = mc.rms_norm_eps;
  c.rope_theta = mc.rope_theta;
  c.tie_embeddings = mc.tie_word_embeddings;
  c.dtype = mc.dtype;
  c.attention_bias = mc.model_type == "qwen2" || mc.architecture == "Qwen2ForCausalLM";
  if (c.hidden <= 0 || c.intermediate <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.vocab <= 0 ||
      c.head_dim <= 0 || c.head_dim % 2 != 0 || c.n_heads % c.n_kv_heads != 0) {
    fail(path + ": incomplete or inconsistent Llama config (hidden_size " + std::to_string(c.hidden) +
         ", intermediate_size " + std::to_string(c.intermediate) + ", layers " + std::to_string(c.n_layers) +
         ", heads " + std::to_string(c.n_heads) + "/" + std::to_string(c.n_kv_heads) + ", head_dim " +
         std::to_string(c.head_dim) + ", vocab " + std::to_string(c.vocab) + ")");
  }
  if (!mc.raw_json.empty()) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(mc.raw_json);
    } catch (const std::exception& e) {
      fail(path + ": invalid JSON: " + e.what());
    }
    if (j.contains("attention_bias") && j["attention_bias"].is_boolean()) c.attention_bias = j["attention_bias"].get<bool>();
    if (j.contains("mlp_bias") && j["mlp_bias"].is_boolean() && j["mlp_bias"].get<bool>()) {
      fail(path + ": mlp_bias=true is not supported");
    }
    if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer()) c.bos_id = j["bos_token_id"].get<int32_t>();
    if (j.contains("eos_token_id")) read_ids(j["eos_token_id"], &c.eos_ids);
    if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
      const auto& r = j["rope_scaling"];
      std::string type = r.value("rope_type", r.value("type", std::string()));
      if (type == "default") type.clear();
      if (!type.empty() && type != "llama3" && type != "linear") {
        fail(path + ": rope_scaling type '" + type + "' is not supported (expected llama3 or linear)");
      }
      c.rope_scaling.type = type;
      c.rope_scaling.factor = r.value("factor", 1.0);
      c.rope_scaling.low_freq_factor = r.value("low_freq_factor", 1.0);
      c.rope_scaling.high_freq_factor = r.value("high_freq_factor", 4.0);
      c.rope_scaling.original_max_position = r.value("original_max_position_embeddings", int64_t(8192));
      if (!(c.rope_scaling.factor > 0) ||
          (type == "llama3" && !(c.rope_scaling.high_freq_factor > c.rope_scaling.low_freq_factor))) {
        fail(path + ": invalid rope_scaling values");
      }
    }
  }
  const std::string gen = slurp(dir + "/generation_config.json");
  if (!gen.empty()) {
    try {
      const auto g = nlohmann::json::parse(gen);
      if (g.contains("eos_token_id")) {
        std::vector<int32_t> ids;
        read_ids(g["eos_token_id"], &ids);
        for (int32_t id : ids)
          if (std::find(c.eos_ids.begin(), c.eos_ids.end(), id) == c.eos_ids.end()) c.eos_ids.push_back(id);
      }
      if (c.bos_id < 0 && g.contains("bos_token_id") && g["bos_token_id"].is_number_integer()) {
        c.bos_id = g["bos_token_id"].get<int32_t>();
      }
    } catch (const nlohmann::json::exception& e) {
      fail(dir + "/generation_config.json: invalid JSON: " + e.what());
    }
  }
  return c;
}

std::vector<float> rope_inv_freq(const LlamaConfig& c) {
  const int64_t h = c.head_dim / 2;
  std::vector<float> f(static_cast<size_t>(h));
  const double pi = 3.14159265358979323846;
  const auto& rs = c.rope_scaling;
  for (int64_t i = 0; i < h; ++i) {
    double v = static_cast<float>(1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(c.head_dim)));
    if (rs.type == "linear") {
      v = v / rs.factor;
    } else if (rs.type == "llama3") {
      const double low_wavelen = static_cast<double>(rs.original_max_position) / rs.low_freq_factor;
      const double high_wavelen = static_cast<double>(rs.original_max_position) / rs.high_freq_factor;
      const double wavelen = 2 * pi / v;
      if (wavelen < high_wavelen) {
        // high frequency: unchanged
      } else if (wavelen > low_wavelen) {
        v = v / rs.factor;
      } else {
        const double smooth = (static_cast<double>(rs.original_max_position) / wavelen - rs.low_freq_factor) /
                              (rs.high_freq_factor - rs.low_freq_factor);
        v = (1 - smooth) * v / rs.factor + smooth * v;
      }
    }
    f[static_cast<size_t>(i)] = static_cast<float>(v);
  }
  return f;
}

// ---- layers ------------------------------------------------------------------------------------------

struct LlamaModel::Linear {
  std::string name;              // module name ("model.layers.0.self_attn.q_proj", "lm_head")
  int64_t n = 0, k = 0;
  // dense
  DenseWeight dense;
  std::vector<uint16_t> bits;    // owned storage for dense.bits (unless read in place from the file or tied)
  std::vector<float> f32;        // owned storage for dense.f32
  std::vector<float> bias;       // (N) values in T; empty when none
  bool round_output = true;      // false for lm_head (f32 logits)
  // quantized: q computes this linear's outputs as its columns col0 .. col0 + n - 1. With --ops cuda the
  // linears of a fused set share one q: q/k/v's outputs side by side (concat_linear_outputs); gate/up's rows
  // alternating in blocks of kGluBlock (interleave_linear_outputs; col0 is then unused), so that the linear's kernel
  // can compute SwiGLU itself. Otherwise q is this linear's alone (col0 0).
  std::shared_ptr<QuantizedLinear> q;
  int64_t col0 = 0;
  bool fused() const { return q && q->out_features() != n; }
};

struct LlamaModel::Layer {
  std::vector<float> in_norm, post_norm;
  Linear q, k, v, o, gate, up, down;
};

#ifdef NVFP4_HAVE_CUDA
namespace {
// One device allocation, freed with its owner; grows on demand.
struct DevBuf {
  void* p = nullptr;
  size_t bytes = 0;
  DevBuf() = default;
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() { cuda_ops::device_free(p); }
  void ensure(size_t b, int device) {
    if (bytes >= b) return;
    cuda_ops::device_free(p);
    p = nullptr;
    bytes = 0;
    p = cuda_ops::device_alloc(b, device);
    bytes = b;
  }
  void upload(const void* src, size_t b, int device) {
    ensure(b, device);
    cuda_ops::copy_to_device(p, src, b);
  }
  float* f() const { return static_cast<float*>(p); }
  uint16_t* u16() const { return static_cast<uint16_t*>(p); }
};
}  // namespace

struct LlamaModel::DeviceState {
  int device = 0;
  std::unique_ptr<cuda_ops::Gemm> gemm;
  DevBuf embed, final_norm, rope, kc, vc;
  bool kv_bits = false;  // the KV cache holds T bit patterns (cuda_ops::KvCache), not f32
  DevBuf attn;  // attention's scratch (cuda_ops::attention_scratch_bytes), zeroed once
  struct LayerNorms {
    DevBuf in_norm, post_norm;
  };
  std::vector<std::unique_ptr<LayerNorms>> norms;
  struct Dense {
    DevBuf w, bias;
  };
  std::map<const Linear*, std::unique_ptr<Dense>> dense;
  DevBuf ids, pos, x, a, tmp, q, att, k, v, g, u, bits_in, bits_out, logits;
  DevBuf qb, kb, vb, gb, ub;  // T bits of the q/k/v and gate/up outputs (layers whose linears are all NVFP4)
  // Every op of a step runs on this stream; one-token steps replay `graph` (LoadOptions::cuda_graphs), which
  // was captured with the buffers `graph_key` lists.
  std::unique_ptr<cuda_ops::Stream> stream;
  bool graphs = true;
  Reporter rep;
  int64_t eager_one_token_steps = 0;
  std::unique_ptr<cuda_ops::StepGraph> graph;
  std::vector<const void*> graph_key;
};
#else
struct LlamaModel::DeviceState {};
#endif

LlamaModel::~LlamaModel() {
#ifdef NVFP4_HAVE_CUDA
  cuda_ops::device_free(dev_x_);
  cuda_ops::device_free(dev_y_);
#endif
}

namespace {

struct Loader {
  const io::Checkpoint& ck;
  DType act;
  const Reporter& rep;
  DeviceInfo dev;
  BuildInfo build;
  const Overrides& ov;
  uint64_t* bytes;
  bool* uses_mapping;  // set when a weight points into the checkpoint's mapped file instead of a copy

  std::vector<float> f32(const std::string& name, std::vector<int64_t> expect) const {
    std::vector<int64_t> shape;
    std::vector<float> v = ck.load_f32(name, &shape);
    if (shape != expect) {
      auto s = [](const std::vector<int64_t>& x) {
        std::string r = "[";
        for (size_t i = 0; i < x.size(); ++i) r += (i ? ", " : "") + std::to_string(x[i]);
        return r + "]";
      };
      fail(ck.path() + ": tensor '" + name + "' has shape " + s(shape) + ", expected " + s(expect));
    }
    *bytes += v.size() * (act == DType::F32 ? 4 : 2);
    return v;
  }

  // Dense storage of a (n, k) tensor in the form dense_matmul reads: T bits when T is 16-bit (read in place
  // from the mapped file when it holds T, 2-byte aligned; else rounded to T from the f32 value into `bits`),
  // f32 when T is F32.
  void store_dense(const std::string& tensor, int64_t n, int64_t k, std::vector<uint16_t>* bits,
                   std::vector<float>* fv, DenseWeight* d) const {
    d->n = n;
    d->k = k;
    const io::TensorView* tv = ck.tensors().find(tensor);
    if (!tv) fail(ck.path() + ": tensor '" + tensor + "' missing");
    if (act == DType::BF16 || act == DType::F16) {
      d->dtype = act;
      if (const uint16_t* in_place = mapped_bits(*tv, {n, k})) {
        d->bits = in_place;
        *bytes += static_cast<uint64_t>(n * k) * 2;
      } else {
        std::vector<float> v = f32(tensor, {n, k});
        bits->resize(v.size());
        for (size_t i = 0; i < v.size(); ++i) (*bits)[i] = to_bits16(act, v[i]);
        d->bits = bits->data();
      }
    } else {
      d->dtype = DType::F32;
      *fv = f32(tensor, {n, k});
      d->f32 = fv->data();
    }
  }

  // The tensor's T bits where the mapped file holds them (dtype T, the expected shape, 2-byte aligned), else
  // nullptr. The pointer lives as long as the checkpoint; the model keeps it open then (LlamaModel::ck_).
  const uint16_t* mapped_bits(const io::TensorView& tv, const std::vector<int64_t>& shape) const {
    if ((act != DType::BF16 && act != DType::F16) || tv.dtype != act || tv.shape != shape ||
        reinterpret_cast<uintptr_t>(tv.data) % alignof(uint16_t) != 0) {
      return nullptr;
    }
    *uses_mapping = true;
    return reinterpret_cast<const uint16_t*>(tv.data);
  }

  bool quantized(const std::string& name) const {
    const io::LinearInfo* info = ck.find_linear(name);
    return info && info->scheme != io::QuantScheme::None;
  }

  // A quantized linear's weights, checked against the expected shape, and its selection (reported).
  LinearWeights load_quantized(const std::string& name, int64_t n, int64_t k, Selection* sel) const {
    LinearWeights w = ck.load_linear(name, rep);
    if (w.out_features() != n || w.in_features() != k) {
      fail(ck.path() + ": quantized linear '" + name + "' is (" + std::to_string(w.out_features()) + ", " +
           std::to_string(w.in_features()) + "), expected (" + std::to_string(n) + ", " + std::to_string(k) + ")");
    }
    *bytes += static_cast<uint64_t>(n * k / 2 + n * k / 16);
    *sel = select_linear(dev, build, scheme_of(w), ov);
    report_selection(*sel, rep);
    return w;
  }

  struct Part {
    std::string name;
    int64_t n;
    LlamaModel::Linear* l;
  };
  // Linears that read the same input (k inputs each). With `fuse`, quantized ones with the same selection and
  // scales become one QuantizedLinear that every part points to (concat_linear_outputs; interleave > 0:
  // interleave_linear_outputs in blocks of that many rows); otherwise, or when they cannot be fused, each is
  // loaded on its own (the reason is logged at debug level).
  void linears(std::initializer_list<Part> parts, int64_t k, bool bias_allowed, bool fuse, int64_t interleave = 0) const {
    for (const Part& p : parts) {
      p.l->name = p.name;
      p.l->n = p.n;
      p.l->k = k;
    }
    bool all_q = fuse && parts.size() > 1;
    for (const Part& p : parts) all_q = all_q && quantized(p.name);
    if (!all_q) {
      for (const Part& p : parts) linear(p.name, p.n, k, bias_allowed, p.l);
      return;
    }
    std::vector<LinearWeights> ws;
    std::vector<Selection> sels(parts.size());
    for (const Part& p : parts) ws.push_back(load_quantized(p.name, p.n, k, &sels[ws.size()]));
    std::string why;
    for (const Selection& sel : sels) {
      if (sel.semantics != sels[0].semantics || sel.executor != sels[0].executor || sel.device != sels[0].device)
        why = "their executors differ";
    }
    LinearWeights f;
    if (why.empty() && (interleave > 0 ? interleave_linear_outputs(&ws, interleave, &f, &why)
                                       : concat_linear_outputs(&ws, &f, &why))) {
      std::shared_ptr<QuantizedLinear> q = QuantizedLinear::create(std::move(f), sels[0], act);
      int64_t col = 0;
      for (const Part& p : parts) {
        p.l->q = q;
        p.l->col0 = col;
        col += p.n;
      }
      return;
    }
    rep.debug("not fused (" + why + "): " + parts.begin()->name + " and the linears beside it");
    size_t i = 0;
    for (const Part& p : parts) {
      p.l->q = QuantizedLinear::create(std::move(ws[i]), sels[i], act);
      ++i;
    }
  }

  void linear(const std::string& name, int64_t n, int64_t k, bool bias_allowed, LlamaModel::Linear* l) const {
    l->name = name;
    l->n = n;
    l->k = k;
    if (quantized(name)) {
      Selection sel;
      LinearWeights w = load_quantized(name, n, k, &sel);
      l->q = QuantizedLinear::create(std::move(w), sel, act);
      return;
    }
    store_dense(name + ".weight", n, k, &l->bits, &l->f32, &l->dense);
    if (ck.tensors().find(name + ".bias")) {
      if (!bias_allowed) rep.warn(ck.path() + ": unexpected bias '" + name + ".bias' is used");
      l->bias = f32(name + ".bias", {n});
      round_to_dtype(l->bias.data(), n, act);
    }
  }
};

}  // namespace

std::unique_ptr<LlamaModel> LlamaModel::load(const std::string& dir, const LoadOptions& opt, const Reporter& rep) {
  auto ck = io::Checkpoint::open(dir, rep);
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  m->cfg_ = llama_config_from(ck->config(), ck->dir());
  const LlamaConfig& c = m->cfg_;
  bool any_quant = false;
  for (const auto& li : ck->linears()) any_quant = any_quant || li.scheme != io::QuantScheme::None;
  m->act_ = c.dtype == DType::F16 ? DType::F16 : (c.dtype == DType::F32 && !any_quant ? DType::F32 : DType::BF16);
  if (c.dtype == DType::F32 && any_quant) rep.warn(dir + ": f32 model with quantized linears: activations run in bf16");
  m->record_amax_ = opt.record_input_amax;

  const DeviceInfo dev = any_quant ? detect_device(opt.overrides) : DeviceInfo::cpu("no quantized linears");
  bool uses_mapping = false;
  Loader L{*ck, m->act_, rep, dev, query_build(), opt.overrides, &m->weight_bytes_, &uses_mapping};
  bool ops_on_device = opt.ops_on_device;
  if (opt.ops_auto && !ops_on_device && any_quant && !opt.record_input_amax && dev.is_gpu && L.build.cuda) {
    // Every quantized linear runs on the GPU when each layer scheme's selection that does not throw (a scheme
    // the checkpoint has cannot throw, or the load fails anyway) names a device executor.
    bool some = false, all = true;
    for (LayerScheme sc : {LayerScheme::W4A4, LayerScheme::W4A16}) {
      try {
        const Selection sel = select_linear(dev, L.build, sc, opt.overrides);
        some = true;
        all = all && sel.executor != Executor::Cpu;
      } catch (const Error&) {
      }
    }
    ops_on_device = some && all;
    rep.debug(std::string("--ops auto: ") + (ops_on_device ? "cuda" : "cpu (a quantized linear runs on the cpu)"));
  }

  const int64_t H = c.hidden, hd = c.head_dim, nh = c.n_heads, nkv = c.n_kv_heads, I = c.intermediate;
  {
    const std::string name = "model.embed_tokens.weight";
    const io::TensorView* tv = ck->tensors().find(name);
    if (const uint16_t* in_place = tv ? L.mapped_bits(*tv, {c.vocab, H}) : nullptr) {
      m->embed_ = in_place;  // already T bits: read from the mapped file
      m->weight_bytes_ += static_cast<uint64_t>(c.vocab * H) * 2;
    } else {
      std::vector<float> e = L.f32(name, {c.vocab, H});
      if (m->act_ == DType::F32) {
        m->embed_f32_ = std::move(e);
      } else {
        m->embed_bits_.resize(e.size());
        for (size_t i = 0; i < e.size(); ++i) m->embed_bits_[i] = to_bits16(m->act_, e[i]);
        m->embed_ = m->embed_bits_.data();
      }
    }
  }
  m->final_norm_ = L.f32("model.norm.weight", {H});
  for (int64_t i = 0; i < c.n_layers; ++i) {
    auto ly = std::make_unique<Layer>();
    const std::string p = "model.layers." + std::to_string(i) + ".";
    ly->in_norm = L.f32(p + "input_layernorm.weight", {H});
    ly->post_norm = L.f32(p + "post_attention_layernorm.weight", {H});
    // --ops cuda runs q/k/v and gate/up as one linear each (one kernel launch instead of three and two) in
    // layers whose seven linears are all quantized (forward_device's 16-bit path) and can be fused.
    bool fuse = ops_on_device && opt.fuse_linears && m->act_ != DType::F32;
    for (const char* s : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"})
      fuse = fuse && L.quantized(p + s);
    L.linears({{p + "self_attn.q_proj", nh * hd, &ly->q},
               {p + "self_attn.k_proj", nkv * hd, &ly->k},
               {p + "self_attn.v_proj", nkv * hd, &ly->v}},
              H, c.attention_bias, fuse);
    L.linear(p + "self_attn.o_proj", H, nh * hd, false, &ly->o);
    L.linears({{p + "mlp.gate_proj", I, &ly->gate}, {p + "mlp.up_proj", I, &ly->up}}, H, false, fuse, kGluBlock);
    L.linear(p + "mlp.down_proj", H, I, false, &ly->down);
    m->layers_.push_back(std::move(ly));
  }
  m->lm_head_ = std::make_unique<Linear>();
  Linear& lm = *m->lm_head_;
  lm.round_output = false;
  const bool has_lm_head = ck->tensors().find("lm_head.weight") || ck->find_linear("lm_head");
  if (has_lm_head) {
    L.linear("lm_head", c.vocab, H, false, &lm);
  } else {
    if (!c.tie_embeddings) rep.warn(dir + ": no lm_head.weight; using the tied input embedding");
    lm.name = "lm_head (tied to model.embed_tokens)";
    lm.n = c.vocab;
    lm.k = H;
    lm.dense.n = c.vocab;
    lm.dense.k = H;
    lm.dense.dtype = m->act_;  // the embedding table's own storage: T bits, or f32
    if (m->act_ == DType::F32) lm.dense.f32 = m->embed_f32_.data();
    else lm.dense.bits = m->embed_;
  }

  m->cap_ = std::max<int64_t>(1, std::min(opt.max_context, c.max_position));
  const std::vector<float> inv = rope_inv_freq(c);
  m->rope_cs_.resize(static_cast<size_t>(m->cap_ * hd));
  for (int64_t p = 0; p < m->cap_; ++p) {
    float* cs = m->rope_cs_.data() + p * hd;
    for (int64_t i = 0; i < hd / 2; ++i) {
      const float ang = static_cast<float>(p) * inv[static_cast<size_t>(i)];  // f32, as HF computes it
      cs[i] = static_cast<float>(std::cos(static_cast<double>(ang)));
      cs[hd / 2 + i] = static_cast<float>(std::sin(static_cast<double>(ang)));
    }
  }
  // 16-bit weights read in place keep the checkpoint (its file mapping) open for the model's lifetime;
  // otherwise it closes here.
  if (uses_mapping) m->ck_ = std::move(ck);
  if (ops_on_device) {
    if (opt.record_input_amax) fail("calibration (input max |x|) runs with CPU ops only");
    DeviceInfo d = any_quant ? dev : detect_device(opt.overrides);
    try {
      m->init_device(d);
    } catch (const Error& e) {
      if (opt.ops_on_device) throw;
      fail(std::string(e.what()) + " (--ops auto put the decoder's ops on the GPU; --ops cpu keeps them on the host)");
    }
#ifdef NVFP4_HAVE_CUDA
    m->dev_->graphs = opt.cuda_graphs;
    m->dev_->rep = rep;
#endif
    return m;  // the KV cache lives on the device
  }
  const size_t kv = static_cast<size_t>(c.n_layers * nkv * m->cap_ * hd);
  if (m->act_ == DType::F32) {
    m->kcache_.assign(kv, 0.0f);
    m->vcache_.assign(kv, 0.0f);
  } else {
    m->kbits_.assign(kv, 0);
    m->vbits_.assign(kv, 0);
  }
  return m;
}

void LlamaModel::init_device(const DeviceInfo& d) {
#ifndef NVFP4_HAVE_CUDA
  (void)d;
  fail("--ops cuda: this binary was built without CUDA");
#else
  if (!d.is_gpu) fail("--ops cuda: no usable CUDA device (" + (d.note.empty() ? std::string("CPU selected") : d.note) + ")");
  int device = d.index < 0 ? 0 : d.index;
  auto check_linear = [&](const Linear& l) {
    if (!l.q) return;
    if (!l.q->on_device()) {
      fail("--ops cuda: quantized linear '" + l.name + "' runs on " + executor_name(l.q->selection().executor) +
           ", expected a device executor (use --device cuda / --linear-backend cuda, or --ops cpu)");
    }
    device = l.q->selection().device < 0 ? device : l.q->selection().device;
  };
  for (const auto& L : layers_)
    for (const Linear* l : {&L->q, &L->k, &L->v, &L->o, &L->gate, &L->up, &L->down}) check_linear(*l);
  check_linear(*lm_head_);
  if (act_ != DType::BF16 && act_ != DType::F32 && act_ != DType::F16) fail("--ops cuda: unsupported activation dtype");
  auto D = std::make_unique<DeviceState>();
  D->device = device;
  D->gemm = cuda_ops::Gemm::create(device);
  D->stream = cuda_ops::Stream::create(device);
  const LlamaConfig& c = cfg_;
  const int64_t hd = c.head_dim, nkv = c.n_kv_heads;
  {
    // The table is f32 on the device; a 16-bit one is converted and uploaded a block of rows at a time, so no
    // f32 copy of the whole table exists on the host.
    const int64_t H = c.hidden, V = c.vocab;
    D->embed.ensure(static_cast<size_t>(V * H) * 4, device);
    if (act_ == DType::F32) {
      cuda_ops::copy_to_device(D->embed.p, embed_f32_.data(), static_cast<size_t>(V * H) * 4);
    } else {
      const int64_t rows = 1024;
      std::vector<float> e(static_cast<size_t>(rows * H));
      for (int64_t r0 = 0; r0 < V; r0 += rows) {
        const size_t cnt = static_cast<size_t>(std::min(rows, V - r0) * H);
        const uint16_t* src = embed_ + static_cast<size_t>(r0 * H);
        for (size_t i = 0; i < cnt; ++i) e[i] = from_bits16(act_, src[i]);
        // synchronous w.r.t. the host (device_memory.h), so `e` can be refilled right away
        cuda_ops::copy_to_device(D->embed.f() + r0 * H, e.data(), cnt * 4);
      }
    }
  }
  D->final_norm.upload(final_norm_.data(), final_norm_.size() * 4, device);
  D->rope.upload(rope_cs_.data(), rope_cs_.size() * 4, device);
  // The KV cache holds T bit patterns in a 16-bit model (cuda_ops::KvCache: half the bytes, the same values).
  D->kv_bits = act_ != DType::F32;
  const size_t kv = static_cast<size_t>(c.n_layers * nkv * cap_ * hd) * (D->kv_bits ? 2 : 4);
  D->kc.ensure(kv, device);
  D->vc.ensure(kv, device);
  const size_t attn = cuda_ops::attention_scratch_bytes(c.n_heads, hd, cap_);
  D->attn.ensure(attn, device);
  cuda_ops::device_zero(D->attn.p, attn);
  auto dense = [&](const Linear& l) {
    if (l.q) return;
    auto dd = std::make_unique<DeviceState::Dense>();
    const size_t nk = static_cast<size_t>(l.n * l.k);
    if (l.dense.dtype == DType::BF16) {
      dd->w.upload(l.dense.bits, nk * 2, device);
    } else if (l.dense.dtype == DType::F16) {
      // cuBLAS runs f16 models' dense linears in f32 (forward_device): widened and uploaded a block at a time
      dd->w.ensure(nk * 4, device);
      std::vector<float> blk(std::min<size_t>(nk, size_t(1) << 20));
      for (size_t i0 = 0; i0 < nk; i0 += blk.size()) {
        const size_t cnt = std::min(blk.size(), nk - i0);
        for (size_t i = 0; i < cnt; ++i) blk[i] = f16_to_f32(l.dense.bits[i0 + i]);
        cuda_ops::copy_to_device(dd->w.f() + i0, blk.data(), cnt * 4);  // synchronous w.r.t. the host
      }
    } else {
      dd->w.upload(l.dense.f32, nk * 4, device);
    }
    if (!l.bias.empty()) dd->bias.upload(l.bias.data(), l.bias.size() * 4, device);
    D->dense[&l] = std::move(dd);
  };
  for (const auto& L : layers_) {
    auto nm = std::make_unique<DeviceState::LayerNorms>();
    nm->in_norm.upload(L->in_norm.data(), L->in_norm.size() * 4, device);
    nm->post_norm.upload(L->post_norm.data(), L->post_norm.size() * 4, device);
    D->norms.push_back(std::move(nm));
    for (const Linear* l : {&L->q, &L->k, &L->v, &L->o, &L->gate, &L->up, &L->down}) dense(*l);
  }
  dense(*lm_head_);
  // The uploads above went through the legacy default stream, which D->stream does not wait for.
  cuda_ops::synchronize(nullptr);
  device_name_ = "cuda:" + std::to_string(device);
  dev_ = std::move(D);
  release_host_weights();
#endif
}

bool LlamaModel::decode_graph_active() const {
#ifdef NVFP4_HAVE_CUDA
  return dev_ && dev_->graph != nullptr;
#else
  return false;
#endif
}

void LlamaModel::release_host_weights() {
  auto drop = [](auto& v) { std::remove_reference_t<decltype(v)>().swap(v); };
  drop(embed_bits_);
  drop(embed_f32_);
  embed_ = nullptr;
  drop(final_norm_);
  drop(rope_cs_);
  auto drop_linear = [&](Linear& l) {
    drop(l.bits);
    drop(l.f32);
    drop(l.bias);
    l.dense.bits = nullptr;  // dense_matmul throws on a null weight instead of reading freed memory
    l.dense.f32 = nullptr;
  };
  for (auto& L : layers_) {
    drop(L->in_norm);
    drop(L->post_norm);
    for (Linear* l : {&L->q, &L->k, &L->v, &L->o, &L->gate, &L->up, &L->down}) drop_linear(*l);
  }
  drop_linear(*lm_head_);
  ck_.reset();  // unmaps the weights read in place (their pointers are nulled above)
}

void LlamaModel::forward_device(const int32_t* tokens, int64_t n, float* logits, bool all_logits) {
#ifndef NVFP4_HAVE_CUDA
  (void)tokens, (void)n, (void)logits, (void)all_logits;
  fail("forward_device: built without CUDA");
#else
  DeviceState& D = *dev_;
  const LlamaConfig& c = cfg_;
  const int64_t H = c.hidden, hd = c.head_dim, nh = c.n_heads, nkv = c.n_kv_heads, I = c.intermediate, V = c.vocab;
  const int dv = D.device;
  const float eps = static_cast<float>(c.rms_eps);
  const size_t f = 4;
  void* const s = D.stream->get();
  D.ids.ensure(static_cast<size_t>(n) * 4, dv);
  D.pos.ensure(4, dv);
  D.x.ensure(n * H * f, dv);
  D.a.ensure(n * H * f, dv);
  D.tmp.ensure(n * H * f, dv);
  D.q.ensure(n * nh * hd * f, dv);
  D.att.ensure(n * nh * hd * f, dv);
  D.k.ensure(n * nkv * hd * f, dv);
  D.v.ensure(n * nkv * hd * f, dv);
  D.g.ensure(n * I * f, dv);
  D.u.ensure(n * I * f, dv);
  const int64_t widest = std::max({H, nh * hd, I, V});
  D.bits_in.ensure(static_cast<size_t>(n * widest) * 2, dv);
  D.bits_out.ensure(static_cast<size_t>(n * widest) * 2, dv);
  const bool bits16 = act_ != DType::F32;  // quantized linears exist only in 16-bit models
  if (bits16) {
    // Room for a fused q/k/v (gate/up) linear's output in qb (gb).
    D.qb.ensure(static_cast<size_t>(n * (nh + 2 * nkv) * hd) * 2, dv);
    D.kb.ensure(static_cast<size_t>(n * nkv * hd) * 2, dv);
    D.vb.ensure(static_cast<size_t>(n * nkv * hd) * 2, dv);
    D.gb.ensure(static_cast<size_t>(n * 2 * I) * 2, dv);
    D.ub.ensure(static_cast<size_t>(n * I) * 2, dv);
  }
  const int64_t first = all_logits ? 0 : n - 1, rows = n - first;
  D.logits.ensure(static_cast<size_t>(rows * V) * f, dv);
  cuda_ops::copy_to_device(D.ids.p, tokens, static_cast<size_t>(n) * 4, s);
  const int32_t pos32 = static_cast<int32_t>(pos_);  // < cap_ <= max_position (int32)
  cuda_ops::copy_to_device(D.pos.p, &pos32, 4, s);

  auto lin = [&](const Linear& l, const float* x, int64_t m, float* y) {
    if (l.q) {
      cuda_ops::to_bits16(x, m * l.k, act_, D.bits_in.u16(), s);
      l.q->forward(D.bits_in.p, m, D.bits_out.p, s);
      cuda_ops::from_bits16(D.bits_out.u16(), m * l.n, act_, y, s);
      return;
    }
    const DeviceState::Dense& d = *D.dense.at(&l);
    if (l.dense.dtype == DType::BF16) {
      cuda_ops::to_bits16(x, m * l.k, DType::BF16, D.bits_in.u16(), s);
      D.gemm->run(D.bits_in.p, m, l.k, d.w.p, DType::BF16, l.n, y, s);
    } else {
      D.gemm->run(x, m, l.k, d.w.p, DType::F32, l.n, y, s);
    }
    if (l.round_output) cuda_ops::round_bias(y, m, l.n, d.bias.p ? d.bias.f() : nullptr, act_, s);
  };

  // h = T(h + l(in)) for o_proj and down_proj (in: their 16-bit input), in the linear's kernel where it can.
  auto add_to_residual = [&](const Linear& l, const uint16_t* in) {
    if (l.q->epilogue_in_kernel(Epilogue::AddToResidual, n))
      return l.q->forward_epilogue(Epilogue::AddToResidual, in, n, D.x.f(), s);
    l.q->forward(in, n, D.bits_out.p, s);
    cuda_ops::residual_add(D.x.f(), D.tmp.f(), n * H, act_, s, D.bits_out.u16());
  };

  // The step's work on stream s. pos_dev null: positions from pos_; else read from D.pos when the kernels run
  // (a replayed graph), pos_max bounding them.
  auto step = [&](const int32_t* pos_dev, int64_t pos_max) {
    cuda_ops::embed(D.embed.f(), static_cast<const int32_t*>(D.ids.p), n, H, D.x.f(), s);
    for (int64_t li = 0; li < c.n_layers; ++li) {
      const Layer& L = *layers_[static_cast<size_t>(li)];
      const DeviceState::LayerNorms& nm = *D.norms[static_cast<size_t>(li)];
      const size_t kv0 = static_cast<size_t>(li * nkv * cap_ * hd) * (D.kv_bits ? 2 : 4);  // this layer's bytes
      const cuda_ops::KvCache kv{static_cast<char*>(D.kc.p) + kv0, static_cast<char*>(D.vc.p) + kv0, D.kv_bits};
      bool all_nvfp4 = bits16;
      for (const Linear* l : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) all_nvfp4 = all_nvfp4 && l->q;
      if (all_nvfp4) {
        // 14 kernels (plus W4A4's quantizers): the ops around the linears read and write their T bits
        // directly, instead of a conversion kernel on each side of every linear.
        uint16_t* const xb = D.bits_in.u16();  // the input bits of the linear(s) next in line
        cuda_ops::rmsnorm(D.x.f(), nm.in_norm.f(), n, H, eps, act_, D.a.f(), s, xb);
        // q alone, or the fused q/k/v linear (Loader::linears): rows of q, k, v side by side
        L.q.q->forward(xb, n, D.qb.p, s);
        cuda_ops::QkvBits qkv{D.qb.u16(), D.kb.u16(), D.vb.u16()};
        if (L.q.fused()) {
          qkv = {D.qb.u16() + L.q.col0, D.qb.u16() + L.k.col0, D.qb.u16() + L.v.col0, L.q.q->out_features()};
        } else {
          L.k.q->forward(xb, n, D.kb.p, s);
          L.v.q->forward(xb, n, D.vb.p, s);
        }
        cuda_ops::rope_store_kv(D.q.f(), D.k.f(), D.v.f(), n, nh, nkv, hd, D.rope.f(), pos_max, kv, cap_, act_, s,
                                pos_dev, qkv);
        cuda_ops::attention(D.q.f(), kv, n, pos_max, nh, nkv, hd, cap_, act_, D.att.f(), s, pos_dev, xb, D.attn.p);
        add_to_residual(L.o, xb);
        cuda_ops::rmsnorm(D.x.f(), nm.post_norm.f(), n, H, eps, act_, D.a.f(), s, xb);
        // gate and up: one linear whose rows alternate in blocks of 8 (its kernel computes SwiGLU where it can,
        // else the op reads the interleaved outputs), or two. SwiGLU's output goes to ub, not xb, which the
        // fused linear's kernel reads until its last block.
        uint16_t* const hb = D.ub.u16();
        if (L.gate.fused() && L.gate.q->epilogue_in_kernel(Epilogue::Swiglu, n)) {
          L.gate.q->forward_epilogue(Epilogue::Swiglu, xb, n, hb, s);
        } else if (L.gate.fused()) {
          L.gate.q->forward(xb, n, D.gb.p, s);
          cuda_ops::silu_mul(D.g.f(), D.u.f(), n * I, act_, s, D.gb.u16(), D.gb.u16() + kGluBlock, hb, kGluBlock,
                             2 * kGluBlock);
        } else {
          L.gate.q->forward(xb, n, D.gb.p, s);
          L.up.q->forward(xb, n, D.bits_out.p, s);
          cuda_ops::silu_mul(D.g.f(), D.u.f(), n * I, act_, s, D.gb.u16(), D.bits_out.u16(), hb);
        }
        add_to_residual(L.down, hb);
        continue;
      }
      cuda_ops::rmsnorm(D.x.f(), nm.in_norm.f(), n, H, eps, act_, D.a.f(), s);
      lin(L.q, D.a.f(), n, D.q.f());
      lin(L.k, D.a.f(), n, D.k.f());
      lin(L.v, D.a.f(), n, D.v.f());
      cuda_ops::rope_store_kv(D.q.f(), D.k.f(), D.v.f(), n, nh, nkv, hd, D.rope.f(), pos_max, kv, cap_, act_, s,
                              pos_dev);
      cuda_ops::attention(D.q.f(), kv, n, pos_max, nh, nkv, hd, cap_, act_, D.att.f(), s, pos_dev, nullptr, D.attn.p);
      lin(L.o, D.att.f(), n, D.tmp.f());
      cuda_ops::residual_add(D.x.f(), D.tmp.f(), n * H, act_, s);
      cuda_ops::rmsnorm(D.x.f(), nm.post_norm.f(), n, H, eps, act_, D.a.f(), s);
      lin(L.gate, D.a.f(), n, D.g.f());
      lin(L.up, D.a.f(), n, D.u.f());
      cuda_ops::silu_mul(D.g.f(), D.u.f(), n * I, act_, s);
      lin(L.down, D.g.f(), n, D.tmp.f());
      cuda_ops::residual_add(D.x.f(), D.tmp.f(), n * H, act_, s);
    }
    cuda_ops::rmsnorm(D.x.f() + first * H, D.final_norm.f(), rows, H, eps, act_, D.a.f(), s);
    lin(*lm_head_, D.a.f(), rows, D.logits.f());
  };

  bool ran = false;
  if (n == 1 && D.graphs) {
    // The buffers a captured step reads and writes (the weights, caches and tables never move).
    const std::vector<const void*> key = {D.ids.p, D.pos.p, D.x.p,       D.a.p,        D.tmp.p, D.q.p,     D.att.p,
                                          D.k.p,   D.v.p,   D.g.p,       D.u.p,        D.bits_in.p, D.bits_out.p,
                                          D.logits.p, D.qb.p,  D.kb.p,  D.vb.p,      D.gb.p,       D.ub.p,
                                          D.attn.p};
    if (D.graph && D.graph_key != key) D.graph.reset();
    if (!D.graph && D.eager_one_token_steps >= 1) {
      try {
        // Sized and checked for the last position of the cache; the kernels read the current one from D.pos.
        D.graph = cuda_ops::StepGraph::capture(s, [&] { step(static_cast<const int32_t*>(D.pos.p), cap_ - 1); });
        D.graph_key = key;
      } catch (const Error& e) {
        D.graphs = false;
        D.rep.warn(std::string("--ops cuda: decoding without CUDA graphs (") + e.what() + ")");
      }
    }
    if (D.graph) {
      D.graph->launch(s);
      ran = true;
    } else {
      ++D.eager_one_token_steps;
    }
  }
  if (!ran) step(nullptr, pos_);
  cuda_ops::copy_to_host(logits, D.logits.p, static_cast<size_t>(rows * V) * f, s);  // waits for the step
  pos_ += n;
#endif
}

void LlamaModel::run_linears(std::initializer_list<LinearOut> group, const float* x, int64_t m) {
  if (group.size() == 0) return;
  const int64_t k = group.begin()->l->k;
  for (const LinearOut& o : group) {
    NVFP4_CHECK(o.l->k == k, "run_linears: linears of one group read the same input");
    NVFP4_CHECK(!o.l->fused(), "run_linears: fused linears run with the ops on the device only");
  }
  if (record_amax_) {
    float a = 0;
    for (int64_t i = 0; i < m * k; ++i) a = std::max(a, std::fabs(x[i]));
    for (const LinearOut& o : group) {
      float& slot = amax_[o.l->name];
      slot = std::max(slot, a);
    }
  }
  // The quantized linears read x as T bits: converted once for the group; uploaded once when some run on a
  // device (the device buffers are sized for the group's widest output before the upload).
  const size_t nx = static_cast<size_t>(m * k);
  bool converted = false, uploaded = false;
  for (const LinearOut& o : group) {
    const Linear& l = *o.l;
    float* y = o.y;
    if (!l.q) {
      dense_matmul(x, m, l.dense, y);
      if (!l.round_output) continue;
      const int64_t n = l.n;
      for (int64_t i = 0; i < m; ++i) {
        float* yi = y + i * n;
        for (int64_t j = 0; j < n; ++j) yi[j] = round_linear_output(act_, yi[j], l.bias.empty() ? nullptr : &l.bias[j]);
      }
      continue;
    }
    const size_t ny = static_cast<size_t>(m * l.n);
    if (!converted) {
      if (xbits_.size() < nx) xbits_.resize(nx);
      for (size_t i = 0; i < nx; ++i) xbits_[i] = to_bits16(act_, x[i]);
      converted = true;
    }
    if (ybits_.size() < ny) ybits_.resize(ny);
    if (l.q->on_device()) {
#ifdef NVFP4_HAVE_CUDA
      if (!uploaded) {
        size_t need = nx * 2;
        for (const LinearOut& g : group)
          if (g.l->q && g.l->q->on_device()) need = std::max(need, static_cast<size_t>(m * g.l->n) * 2);
        if (dev_bytes_ < need) {
          cuda_ops::device_free(dev_x_);
          cuda_ops::device_free(dev_y_);
          dev_x_ = dev_y_ = nullptr;
          dev_bytes_ = 0;
          dev_x_ = cuda_ops::device_alloc(need, l.q->selection().device);
          dev_y_ = cuda_ops::device_alloc(need, l.q->selection().device);
          dev_bytes_ = need;
        }
        cuda_ops::copy_to_device(dev_x_, xbits_.data(), nx * 2);
        uploaded = true;
      }
      l.q->forward(dev_x_, m, dev_y_, nullptr);
      cuda_ops::copy_to_host(ybits_.data(), dev_y_, ny * 2);
#else
      (void)uploaded;
      fail(l.name + ": on-device linear in a build without CUDA");
#endif
    } else {
      l.q->forward(xbits_.data(), m, ybits_.data(), nullptr);
    }
    for (size_t i = 0; i < ny; ++i) y[i] = from_bits16(act_, ybits_[i]);
  }
}

void LlamaModel::forward(const int32_t* tokens, int64_t n, float* logits, bool all_logits) {
  if (n <= 0) return;
  const LlamaConfig& c = cfg_;
  if (pos_ + n > cap_) {
    fail("context full: " + std::to_string(pos_) + " + " + std::to_string(n) + " tokens exceed the KV cache of " +
         std::to_string(cap_));
  }
  const int64_t H = c.hidden, hd = c.head_dim, nh = c.n_heads, nkv = c.n_kv_heads, I = c.intermediate;
  const int64_t group = nh / nkv;
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= c.vocab) {
      fail("token id " + std::to_string(tokens[i]) + " outside the vocabulary of " + std::to_string(c.vocab));
    }
  }
  if (dev_) {
    forward_device(tokens, n, logits, all_logits);
    return;
  }
  const float eps = static_cast<float>(c.rms_eps);
  std::vector<float> x(static_cast<size_t>(n * H)), a(x.size()), tmp(x.size());
  std::vector<float> q(static_cast<size_t>(n * nh * hd)), att(q.size());
  std::vector<float> k(static_cast<size_t>(n * nkv * hd)), v(k.size());
  std::vector<float> g(static_cast<size_t>(n * I)), u(g.size());
  for (int64_t i = 0; i < n; ++i) {
    const int32_t t = tokens[i];  // checked against the vocabulary in forward()
    float* xi = x.data() + i * H;
    if (act_ == DType::F32) {
      std::memcpy(xi, embed_f32_.data() + static_cast<size_t>(t) * H, H * 4);
    } else {
      const uint16_t* e = embed_ + static_cast<size_t>(t) * H;
      for (int64_t j = 0; j < H; ++j) xi[j] = from_bits16(act_, e[j]);
    }
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  for (int64_t li = 0; li < c.n_layers; ++li) {
    Layer& L = *layers_[static_cast<size_t>(li)];
    rmsnorm(x.data(), L.in_norm.data(), n, H, eps, act_, a.data());
    run_linears({{&L.q, q.data()}, {&L.k, k.data()}, {&L.v, v.data()}}, a.data(), n);
    const bool bits = act_ != DType::F32;  // the cache holds T bits (kbits_, vbits_)
    const size_t layer0 = static_cast<size_t>(li * nkv * cap_ * hd);
    float* kc = bits ? nullptr : kcache_.data() + layer0;
    float* vc = bits ? nullptr : vcache_.data() + layer0;
    uint16_t* kcb = bits ? kbits_.data() + layer0 : nullptr;
    uint16_t* vcb = bits ? vbits_.data() + layer0 : nullptr;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t p = pos_ + i;
      const float* cs = rope_cs_.data() + p * hd;
      for (int64_t h = 0; h < nh; ++h) rope_apply(q.data() + (i * nh + h) * hd, cs, hd, act_);
      for (int64_t h = 0; h < nkv; ++h) {
        float* kh = k.data() + (i * nkv + h) * hd;
        const float* vh = v.data() + (i * nkv + h) * hd;
        rope_apply(kh, cs, hd, act_);
        const int64_t at = (h * cap_ + p) * hd;
        if (bits) {
          for (int64_t e = 0; e < hd; ++e) {  // exact: rope_apply and the v linear round to T
            kcb[at + e] = to_bits16(act_, kh[e]);
            vcb[at + e] = to_bits16(act_, vh[e]);
          }
        } else {
          std::memcpy(kc + at, kh, hd * 4);
          std::memcpy(vc + at, vh, hd * 4);
        }
      }
    }
    // Each task reads cache rows once for up to tq queries that share them: a prompt's consecutive tokens of
    // one head, or a one-token step's query heads of one kv head from 256 positions on (SmolLM2 on 2 cores,
    // 3 query heads per kv head: 1% slower at 10-140 positions, 4% faster at 500-630, 6% at 1750-1880; with
    // fewer, larger tasks the threads balance worse where the rows are few).
    const int tq = attention_tokens_per_pass(hd);
    const bool by_heads = n == 1 && group > 1 && pos_ >= 255;
    const int64_t per_kv = (group + tq - 1) / tq;  // tasks per kv head (by_heads)
    const int64_t tasks = by_heads ? nkv * per_kv : (n + tq - 1) / tq * nh;
    parallel_for(static_cast<size_t>(tasks), 1, [&](size_t b, size_t e) {
      std::vector<float> s[kRowsMaxQueries];
      for (size_t w = b; w < e; ++w) {
        const int64_t wi = static_cast<int64_t>(w);
        // queries a < nq: token i0 + a of head h0, or token 0 of head h0 + a (by_heads)
        const int64_t i0 = by_heads ? 0 : wi / nh * tq;
        const int64_t h0 = by_heads ? wi / per_kv * group + wi % per_kv * tq : wi % nh, kvh = h0 / group;
        const int nq = static_cast<int>(by_heads ? std::min<int64_t>(tq, (kvh + 1) * group - h0)
                                                 : std::min<int64_t>(tq, n - i0));
        const float* qs[kRowsMaxQueries];
        float* ws[kRowsMaxQueries];
        float* os[kRowsMaxQueries];
        int64_t count[kRowsMaxQueries];
        for (int a = 0; a < nq; ++a) {
          const int64_t i = by_heads ? 0 : i0 + a, h = by_heads ? h0 + a : h0;
          count[a] = pos_ + i + 1;
          s[a].resize(static_cast<size_t>(count[a]));
          qs[a] = q.data() + (i * nh + h) * hd;
          ws[a] = s[a].data();
          os[a] = att.data() + (i * nh + h) * hd;
        }
        const int64_t head0 = kvh * cap_ * hd;
        if (bits) dot_rows_multi(qs, nq, kcb + head0, act_, hd, count, hd, ws);
        else dot_rows_multi(qs, nq, kc + head0, hd, count, hd, ws);
        for (int a = 0; a < nq; ++a) {
          float* sa = ws[a];
          float mx = -INFINITY;
          for (int64_t t = 0; t < count[a]; ++t) {
            sa[t] = sa[t] * scale;
            mx = std::max(mx, sa[t]);
          }
          // The weights' sum in f64, as four interleaved partial sums (positions t mod 4) added pairwise: one
          // long chain of dependent additions was a tenth of a long prompt's time.
          double part[4] = {0, 0, 0, 0};
          for (int64_t t = 0; t < count[a]; ++t) {
            sa[t] = std::exp(sa[t] - mx);
            part[t & 3] += sa[t];
          }
          const float inv = static_cast<float>(1.0 / ((part[0] + part[1]) + (part[2] + part[3])));
          for (int64_t t = 0; t < count[a]; ++t) sa[t] = sa[t] * inv;  // each position's weight
          std::fill(os[a], os[a] + hd, 0.0f);
        }
        if (bits) axpy_rows_multi(ws, nq, vcb + head0, act_, hd, count, os, hd);
        else axpy_rows_multi(ws, nq, vc + head0, hd, count, os, hd);
        for (int a = 0; a < nq; ++a) round_to_dtype(os[a], hd, act_);
      }
    });
    run_linear(L.o, att.data(), n, tmp.data());
    for (size_t j = 0; j < x.size(); ++j) x[j] = round_to(act_, x[j] + tmp[j]);
    rmsnorm(x.data(), L.post_norm.data(), n, H, eps, act_, a.data());
    run_linears({{&L.gate, g.data()}, {&L.up, u.data()}}, a.data(), n);
    for (size_t j = 0; j < g.size(); ++j) {
      const float gv = g[j];
      const float silu = round_to(act_, static_cast<float>(gv / (1.0 + std::exp(-static_cast<double>(gv)))));
      g[j] = round_to(act_, silu * u[j]);
    }
    run_linear(L.down, g.data(), n, tmp.data());
    for (size_t j = 0; j < x.size(); ++j) x[j] = round_to(act_, x[j] + tmp[j]);
  }
  const int64_t first = all_logits ? 0 : n - 1;
  const int64_t rows = n - first;
  rmsnorm(x.data() + first * H, final_norm_.data(), rows, H, eps, act_, a.data());
  run_linear(*lm_head_, a.data(), rows, logits);
  pos_ += n;
}

std::vector<ExecutorSummary> LlamaModel::executor_summary() const {
  std::vector<ExecutorSummary> out;
  auto add = [&](const std::string& group, const Linear& l) {
    std::string how;
    if (l.q) how = l.q->selection().str() + (l.fused() ? ", fused (q/k/v and gate/up one launch each)" : "");
    else how = std::string("dense ") + dtype_name(dev_ && l.dense.dtype == DType::F16 ? DType::F32 : l.dense.dtype) +
               " on cpu (unquantized)";  // an f16 weight runs in f32 on the device (init_device)
    for (auto& e : out) {
      if (e.group == group && e.how == how) {
        ++e.count;
        return;
      }
    }
    out.push_back({group, how, 1});
  };
  for (const auto& L : layers_) {
    add("attention q/k/v/o", L->q);
    add("attention q/k/v/o", L->k);
    add("attention q/k/v/o", L->v);
    add("attention q/k/v/o", L->o);
    add("mlp gate/up/down", L->gate);
    add("mlp gate/up/down", L->up);
    add("mlp gate/up/down", L->down);
  }
  add("lm_head", *lm_head_);
  if (dev_) {
    for (auto& e : out) {
      const std::string cpu_dense = " on cpu (unquantized)";
      const size_t at = e.how.find(cpu_dense);
      if (at != std::string::npos) e.how = e.how.substr(0, at) + " on " + device_name_ + " (unquantized, cuBLAS)";
    }
    out.push_back({"embedding/norms/rope/attention", "cuda kernels on " + device_name_ + " (activations stay on the device)",
                   static_cast<int>(layers_.size())});
  } else {
    bool hybrid = false;
    for (const auto& L : layers_) hybrid = hybrid || (L->q.q && L->q.q->on_device());
    out.push_back({"embedding/norms/rope/attention", hybrid ? "cpu (host; activations copied to and from the device per linear)" : "cpu (host)",
                   static_cast<int>(layers_.size())});
  }
  return out;
}

}  // namespace nvfp4::model
