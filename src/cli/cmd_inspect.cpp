// nvfp4 inspect PATH [--json] [--device D] [--linear-backend B] [--emulation[=F]] [--explain-device]
// What a checkpoint holds: format, scheme per layer, counts and sizes, ignored modules, and the problems
// found (NaN block scales, +inf global scales, shape mismatches) as warnings. Exit 0 when the checkpoint
// could be read (problems included), 1 when it could not.
// Also, per quantized layer, the semantics and executor it would get on this machine (linear/select.h) with
// the dispatch flags and environment, and with --explain-device the device, build and rules applied.
//
// Structure: build_layer_rows() makes one LayerRow per linear module; the text table and the JSON are
// printed from the rows generically, so a new per-layer field is added in one place (LayerRow::extra).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cli/dispatch_flags.h"
#include "cli/verbs.h"
#include "common/error.h"
#include "io/checkpoint.h"
#include "linear/select.h"

namespace nvfp4::cli {
namespace {

using json = nlohmann::ordered_json;

// One row of the per-layer table.
struct LayerRow {
  std::string name;          // module name
  std::string scheme;        // "nvfp4", "nvfp4a16", "none"
  int64_t out_features = 0;  // N
  int64_t in_features = 0;   // K
  std::string weight_dtype;  // "U8" (packed NVFP4) or the float dtype
  bool bias = false;
  bool ignored = false;      // matched by the config's ignore list
  uint64_t bytes = 0;        // bytes of all the module's tensors
  // Further columns, in order: (header / JSON key, value). Filled by build_layer_rows.
  std::vector<std::pair<std::string, std::string>> extra;
};

uint64_t module_bytes(const io::Checkpoint& ck, const std::string& module) {
  // Every tensor a linear module can have in either format, each counted once.
  std::set<std::string> parts = {io::kWeightSuffix, io::kBiasSuffix};
  for (const io::LinearTensorSuffixes& s : {io::kCompressedTensorsSuffixes, io::kModelOptSuffixes})
    parts.insert({s.codes, s.block_scales, s.weight_global, s.input_global});
  uint64_t b = 0;
  for (const std::string& p : parts)
    if (const io::TensorView* v = ck.tensors().find(module + p)) b += v->nbytes;
  return b;
}

// The per-layer rows of `inspect`. Add new per-layer fields here (as LayerRow::extra entries).
std::vector<LayerRow> build_layer_rows(const io::Checkpoint& ck) {
  std::vector<LayerRow> rows;
  for (const io::LinearInfo& li : ck.linears()) {
    LayerRow r;
    r.name = li.name;
    r.scheme = io::scheme_name(li.scheme);
    r.out_features = li.out_features;
    r.in_features = li.in_features;
    r.weight_dtype = dtype_name(li.weight_dtype);
    r.bias = li.has_bias;
    r.ignored = ck.quant().ignored(li.name);
    r.bytes = module_bytes(ck, li.name);
    rows.push_back(std::move(r));
  }
  return rows;
}


// Dispatch (linear/select.h): the semantics and executor each quantized layer would get on this machine with
// these overrides, as extra columns. A layer whose settings cannot run here shows "error" and the reason.
void add_dispatch_columns(const io::Checkpoint& ck, const DeviceInfo& dev, const BuildInfo& build,
                          const Overrides& ov, std::vector<LayerRow>* rows, std::vector<std::string>* warnings) {
  for (LayerRow& r : *rows) {
    const io::LinearInfo* li = ck.find_linear(r.name);
    const bool quantized = li && li->scheme != io::QuantScheme::None;
    if (!quantized) {
      r.extra.push_back({"semantics", "dense"});
      r.extra.push_back({"executor", "-"});
      r.extra.push_back({"reason", "not quantized"});
      continue;
    }
    const LayerScheme scheme = li->scheme == io::QuantScheme::NVFP4 ? LayerScheme::W4A4 : LayerScheme::W4A16;
    try {
      const Selection sel = select_linear(dev, build, scheme, ov);
      std::string exec = executor_name(sel.executor);
      if (sel.executor != Executor::Cpu) exec += ":" + std::to_string(sel.device);
      r.extra.push_back({"semantics", semantics_name(sel.semantics)});
      r.extra.push_back({"executor", exec});
      r.extra.push_back({"reason", sel.reason});
      if (!sel.warning.empty() && std::find(warnings->begin(), warnings->end(), sel.warning) == warnings->end())
        warnings->push_back(sel.warning);
    } catch (const Error& e) {
      r.extra.push_back({"semantics", "error"});
      r.extra.push_back({"executor", "-"});
      r.extra.push_back({"reason", e.what()});
    }
  }
}

const char* scheme_words(io::QuantScheme s) {
  switch (s) {
    case io::QuantScheme::NVFP4: return "nvfp4 (W4A4: NVFP4 weights and activations)";
    case io::QuantScheme::NVFP4A16: return "nvfp4a16 (W4A16: NVFP4 weights, 16-bit activations)";
    default: return "none";
  }
}

bool looks_like_device(const std::string& s) {
  return s == "cpu" || (s.size() > 3 && s.compare(0, 3, "sm_") == 0 &&
                        s.find_first_not_of("0123456789", 3) == std::string::npos);
}

// A device described by name for --explain-device: "cpu" or "sm_XY" (compute capability X.Y). Nothing is
// queried: the build's architecture list decides whether this binary carries code for it.
DeviceInfo hypothetical_device(const std::string& s) {
  if (s == "cpu") return DeviceInfo::cpu("hypothetical: no GPU");
  if (!looks_like_device(s) || s.size() < 5 || s.size() > 6)
    throw UsageError("--explain-device: '" + s + "' is not a device; expected sm_80, sm_86, sm_89, sm_90, sm_100, "
                     "sm_103, sm_120, sm_121 (any sm_XY) or cpu");
  const int cc = std::stoi(s.substr(3));
  return DeviceInfo::gpu("hypothetical " + s + " device", cc / 10, cc % 10);
}

int run_inspect(int argc, char** argv) {
  CLI::App app{"Show what a checkpoint holds: format, per-layer scheme, sizes, problems"};
  std::string path;
  bool as_json = false, verbose = false;
  std::string explain_target;
  DispatchFlags df;
  app.add_option("PATH", path, "model directory or .safetensors file");
  app.add_flag("--json", as_json, "machine-readable output");
  app.add_flag("-v,--verbose", verbose, "debug messages");
  add_dispatch_flags(app, &df);
  CLI::Option* explain_opt =
      app.add_option("--explain-device", explain_target,
                     "also print the device, build (CUDA/cuBLASLt versions) and how the dispatch rules apply; with a "
                     "value, for a hypothetical device instead of this machine (sm_80, sm_86, sm_89, sm_90, sm_100, "
                     "sm_103, sm_120, sm_121 or cpu), and the per-layer decisions follow it")
          ->expected(0, 1);
  if (int rc = parse(app, argc, argv); rc >= 0) return rc;
  const bool explain = explain_opt->count() > 0;
  // `inspect --explain-device PATH`: the option took the path as its value.
  if (path.empty() && !explain_target.empty() && !looks_like_device(explain_target)) std::swap(path, explain_target);
  if (path.empty()) throw UsageError("inspect: PATH is required");
  const Overrides ov = dispatch_overrides(df);
  const DeviceInfo dev = explain_target.empty() ? detect_device(ov) : hypothetical_device(explain_target);
  const BuildInfo build = query_build();

  // Problems are listed in the output, so the reporter does not repeat them on stderr.
  auto ck = io::Checkpoint::open(path, Reporter{});
  std::vector<LayerRow> rows = build_layer_rows(*ck);
  std::vector<std::string> dispatch_warnings;
  add_dispatch_columns(*ck, dev, build, ov, &rows, &dispatch_warnings);
  const io::ModelConfig& cfg = ck->config();
  std::map<std::string, size_t> per_scheme;
  for (const auto& r : rows) per_scheme[r.scheme]++;
  const uint64_t total_bytes = ck->tensors().total_bytes();

  if (as_json) {
    json j;
    j["path"] = path;
    j["format"] = io::format_name(ck->format());
    j["scheme"] = io::scheme_name(ck->scheme());
    j["architecture"] = cfg.architecture;
    j["model_type"] = cfg.model_type;
    j["dtype"] = dtype_name(cfg.dtype);
    j["has_config"] = ck->has_config();
    j["files"] = ck->tensors().files().size();
    j["tensors"] = ck->tensors().names().size();
    j["tensor_bytes"] = total_bytes;
    j["ignore"] = ck->quant().ignore;
    j["targets"] = ck->quant().targets;
    json counts = json::object();
    for (const auto& kv : per_scheme) counts[kv.first] = kv.second;
    j["linear_counts"] = counts;
    json layers = json::array();
    for (const auto& r : rows) {
      json l;
      l["name"] = r.name;
      l["scheme"] = r.scheme;
      l["out_features"] = r.out_features;
      l["in_features"] = r.in_features;
      l["weight_dtype"] = r.weight_dtype;
      l["bias"] = r.bias;
      l["ignored"] = r.ignored;
      l["bytes"] = r.bytes;
      for (const auto& e : r.extra) l[e.first] = e.second;
      layers.push_back(l);
    }
    j["layers"] = layers;
    json probs = json::array();
    for (const auto& p : ck->problems()) probs.push_back({{"tensor", p.tensor}, {"message", p.message}});
    j["problems"] = probs;
    j["device"] = {{"name", dev.describe()}, {"gpu", dev.is_gpu}, {"compute_capability", dev.is_gpu ? dev.cc_string() : ""},
                   {"build_archs", build.archs_string()}, {"cublaslt", cublaslt_version_string(build.cublaslt_version)}};
    j["dispatch_warnings"] = dispatch_warnings;
    if (explain) j["explain_device"] = explain_dispatch(dev, build, ov);
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }

  std::printf("path:          %s\n", path.c_str());
  std::printf("format:        %s%s\n", io::format_name(ck->format()),
              ck->format() == io::CheckpointFormat::CompressedTensors ? " (nvfp4-pack-quantized)" : "");
  std::printf("scheme:        %s\n", scheme_words(ck->scheme()));
  std::printf("model:         %s%s%s, dtype %s", cfg.architecture.empty() ? "?" : cfg.architecture.c_str(),
              cfg.model_type.empty() ? "" : " / ", cfg.model_type.c_str(), dtype_name(cfg.dtype));
  if (cfg.hidden_size) std::printf(", hidden %lld", static_cast<long long>(cfg.hidden_size));
  if (cfg.num_hidden_layers) std::printf(", %lld layers", static_cast<long long>(cfg.num_hidden_layers));
  std::printf("%s\n", ck->has_config() ? "" : " (no config.json)");
  std::printf("tensors:       %zu in %zu file%s, %s\n", ck->tensors().names().size(), ck->tensors().files().size(),
              ck->tensors().files().size() == 1 ? "" : "s", human_bytes(total_bytes).c_str());
  std::printf("linear:        %zu modules (", rows.size());
  bool first = true;
  for (const auto& kv : per_scheme) {
    std::printf("%s%s %zu", first ? "" : ", ", kv.first.c_str(), kv.second);
    first = false;
  }
  std::printf(")\n");
  std::printf("ignore:        ");
  for (size_t i = 0; i < ck->quant().ignore.size(); ++i)
    std::printf("%s%s", i ? ", " : "", ck->quant().ignore[i].c_str());
  std::printf("%s\n", ck->quant().ignore.empty() ? "(none)" : "");

  std::vector<std::string> plain;
  for (const auto& r : rows)
    if (r.scheme == "none") plain.push_back(r.name);
  std::printf("unquantized:   ");
  for (size_t i = 0; i < plain.size() && i < 12; ++i) std::printf("%s%s", i ? ", " : "", plain[i].c_str());
  if (plain.size() > 12) std::printf(", ... (%zu in all)", plain.size());
  std::printf("%s\n", plain.empty() ? "(none)" : "");

  // Table: fixed columns, then the extra ones.
  size_t wname = 6;
  for (const auto& r : rows) wname = std::max(wname, r.name.size());
  std::vector<std::string> extra_hdr;
  if (!rows.empty())
    for (const auto& e : rows[0].extra)
      if (e.first != "reason") extra_hdr.push_back(e.first);
  std::printf("\n%-*s  %-8s  %7s  %7s  %-7s  %-4s  %10s", static_cast<int>(wname), "module", "scheme", "N", "K",
              "weight", "bias", "bytes");
  for (const auto& h : extra_hdr) std::printf("  %s", h.c_str());
  std::printf("\n");
  for (const auto& r : rows) {
    std::printf("%-*s  %-8s  %7lld  %7lld  %-7s  %-4s  %10llu", static_cast<int>(wname), r.name.c_str(),
                r.scheme.c_str(), static_cast<long long>(r.out_features), static_cast<long long>(r.in_features),
                r.weight_dtype.c_str(), r.bias ? "yes" : "no", static_cast<unsigned long long>(r.bytes));
    for (const auto& e : r.extra)
      if (e.first != "reason") std::printf("  %s", e.second.c_str());
    std::printf("\n");
  }
  // Dispatch on this machine: each distinct decision once, then the warnings a run would log.
  std::vector<std::string> decisions;
  for (const auto& r : rows) {
    std::string sem, exec, why;
    for (const auto& e : r.extra) {
      if (e.first == "semantics") sem = e.second;
      if (e.first == "executor") exec = e.second;
      if (e.first == "reason") why = e.second;
    }
    if (sem == "dense") continue;
    const std::string d = sem == "error" ? "error: " + why : sem + " on " + exec + " (" + why + ")";
    if (std::find(decisions.begin(), decisions.end(), d) == decisions.end()) decisions.push_back(d);
  }
  std::printf("\ndevice:        %s\n", dev.describe().c_str());
  for (const auto& d : decisions) std::printf("dispatch:      %s\n", d.c_str());
  for (const auto& w : dispatch_warnings) std::printf("warning:       %s\n", w.c_str());
  if (explain) std::printf("\n%s", explain_dispatch(dev, build, ov).c_str());
  if (!ck->problems().empty()) {
    std::printf("\nproblems (%zu):\n", ck->problems().size());
    for (const auto& p : ck->problems()) std::printf("  warning: %s\n", p.message.c_str());
  }
  return 0;
}

}  // namespace

NVFP4_REGISTER_VERB("inspect", "show a checkpoint's format, per-layer scheme, sizes and problems", run_inspect);

}  // namespace nvfp4::cli
