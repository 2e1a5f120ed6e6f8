// Dispatch as a table (SPEC §6): select_linear() is pure, so every row describes a machine by hand (device,
// build, scheme, overrides) and states the expected semantics, executor, and warning/error text.
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "linear/select.h"

namespace nvfp4 {
namespace {

CudaArch sass(int sm, char variant = 0) {
  CudaArch a;
  a.sm = sm;
  a.variant = variant;
  return a;
}

CudaArch ptx(int sm) {
  CudaArch a = sass(sm);
  a.ptx = true;
  return a;
}

// The default build: -DNVFP4_CUDA_ARCHS="80;90a;100;120;compute_100", CUDA 13.0 runtime, cuBLASLt 13.1.
BuildInfo full_build() {
  BuildInfo b;
  b.cuda = true;
  b.cuda_archs = {sass(80), sass(90, 'a'), sass(100), sass(120), ptx(100)};
  b.cudart_version = 13000;
  b.driver_version = 13000;
  b.cublaslt_version = 130100;
  return b;
}

DeviceInfo b200() { return DeviceInfo::gpu("NVIDIA B200", 10, 0, 148, 192LL << 30); }
DeviceInfo rtx5090() { return DeviceInfo::gpu("NVIDIA GeForce RTX 5090", 12, 0, 170, 32LL << 30); }
DeviceInfo h200() { return DeviceInfo::gpu("NVIDIA H200", 9, 0, 132, 141LL << 30); }
DeviceInfo a100() { return DeviceInfo::gpu("NVIDIA A100-SXM4-80GB", 8, 0, 108, 80LL << 30); }
DeviceInfo rtx4090() { return DeviceInfo::gpu("NVIDIA GeForce RTX 4090", 8, 9, 128, 24LL << 30); }
DeviceInfo t4() { return DeviceInfo::gpu("Tesla T4", 7, 5, 40, 16LL << 30); }
DeviceInfo v100() { return DeviceInfo::gpu("Tesla V100-SXM2-32GB", 7, 0, 80, 32LL << 30); }
DeviceInfo no_gpu() { return DeviceInfo::cpu("this binary was built without CUDA"); }

// A fake environment for overrides_from_env.
GetEnvFn env_of(std::map<std::string, std::string> vars) {
  auto holder = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [holder](const char* name) -> const char* {
    auto it = holder->find(name);
    return it == holder->end() ? nullptr : it->second.c_str();
  };
}
Overrides env(std::map<std::string, std::string> vars) { return overrides_from_env(env_of(std::move(vars))); }

Overrides backend(Executor e) {
  Overrides o;
  o.executor = e;
  o.executor_from = std::string("--linear-backend ") + executor_name(e);
  return o;
}

struct Row {
  const char* name;
  DeviceInfo dev;
  BuildInfo build;
  LayerScheme scheme;
  Overrides ov;
  Semantics sem;
  Executor exec;
  const char* warning_has;  // "" = no warning expected
};

const char* kH200Warning =
    "no native FP4 on NVIDIA H200 (sm_90 < sm_100); running W4A4 checkpoint as W4A16 (FP4 weights, bf16/fp16 "
    "activations). Set NVFP4_USE_EMULATION=1 (or --emulation) for W4A4 numerics.";

std::vector<Row> rows() {
  BuildInfo old_lt = full_build();
  old_lt.cublaslt_version = 120604;  // CUDA 12.6's cuBLASLt: no FP4 block-scaled GEMM
  BuildInfo old_rt = full_build();
  old_rt.cudart_version = 12060;
  BuildInfo hopper_only = full_build();
  hopper_only.cuda_archs = {sass(80), sass(90, 'a')};
  BuildInfo family = full_build();
  family.cuda_archs = {sass(80), sass(90, 'a'), sass(100, 'f'), sass(120, 'f')};
  BuildInfo arch_specific = full_build();  // the default list before it became generic
  arch_specific.cuda_archs = {sass(80), sass(90, 'a'), sass(100, 'a'), sass(120, 'a')};
  BuildInfo no_ptx = full_build();
  no_ptx.cuda_archs = {sass(80), sass(90, 'a'), sass(100), sass(120)};
  BuildInfo cpu_build;  // CPU-only build
  DeviceInfo b200_probe_none = b200();
  b200_probe_none.image_sm = 0;  // the driver found no image (the run-time probe wins over the arch list)
  DeviceInfo b300 = DeviceInfo::gpu("NVIDIA B300", 10, 3);
  DeviceInfo gb10 = DeviceInfo::gpu("NVIDIA GB10", 12, 1);
  DeviceInfo thor = DeviceInfo::gpu("NVIDIA Thor", 11, 0);
  const auto W4A4 = LayerScheme::W4A4;
  const auto W4A16 = LayerScheme::W4A16;
  const auto full = full_build();
  Overrides dev_cpu;
  dev_cpu.device = parse_device_request("cpu", "--device");
  dev_cpu.device_from = "--device cpu";
  Overrides sem_w4a16;
  sem_w4a16.semantics = Semantics::W4A16;
  sem_w4a16.semantics_from = "option semantics=w4a16";
  Overrides sem_w4a4;
  sem_w4a4.semantics = Semantics::W4A4;
  sem_w4a4.semantics_from = "option semantics=w4a4";
  return {
      {"B200 native", b200(), full, W4A4, {}, Semantics::W4A4, Executor::Cublaslt, ""},
      {"RTX 5090 native", rtx5090(), full, W4A4, {}, Semantics::W4A4, Executor::Cublaslt, ""},
      {"B200 W4A16 checkpoint", b200(), full, W4A16, {}, Semantics::W4A16, Executor::Cuda, ""},
      {"B200 cuBLASLt 12.6", b200(), old_lt, W4A4, {}, Semantics::W4A16, Executor::Cuda,
       "no native FP4 on NVIDIA B200 (cuBLASLt 12.6.4 < 12.8)"},
      {"B200 CUDA runtime 12.6", b200(), old_rt, W4A4, {}, Semantics::W4A16, Executor::Cuda,
       "(CUDA runtime 12.6 < 12.8)"},
      // No sm_100 code at all: neither cuBLASLt's quantizer nor our kernels run there, so the CPU.
      {"B200 binary without sm_100", b200(), hopper_only, W4A4, {}, Semantics::W4A16, Executor::Cpu,
       "no native FP4 on NVIDIA B200 (this binary has no sm_100 code)"},
      {"B200 probe finds no image", b200_probe_none, full, W4A4, {}, Semantics::W4A16, Executor::Cpu,
       "this binary has no sm_100 code"},
      {"B300 with the default build", b300, full, W4A4, {}, Semantics::W4A4, Executor::Cublaslt, ""},
      {"B300 W4A16 checkpoint", b300, full, W4A16, {}, Semantics::W4A16, Executor::Cuda, ""},
      {"B300 with sm_100a only", b300, arch_specific, W4A4, {}, Semantics::W4A16, Executor::Cpu, "no sm_103 code"},
      {"B300 with sm_100f", b300, family, W4A4, {}, Semantics::W4A4, Executor::Cublaslt, ""},
      {"GB10 (12.1) with the default build", gb10, full, W4A4, {}, Semantics::W4A4, Executor::Cublaslt, ""},
      {"GB10 W4A16 checkpoint", gb10, full, W4A16, {}, Semantics::W4A16, Executor::Cuda, ""},
      {"GB10 (12.1) with sm_120a only", gb10, arch_specific, W4A4, {}, Semantics::W4A16, Executor::Cpu,
       "no sm_121 code"},
      {"Thor (11.0) with the default build (PTX)", thor, full, W4A4, {}, Semantics::W4A4, Executor::Cublaslt, ""},
      {"Thor W4A16 checkpoint (PTX)", thor, full, W4A16, {}, Semantics::W4A16, Executor::Cuda, ""},
      {"Thor (11.0) without PTX", thor, no_ptx, W4A4, {}, Semantics::W4A16, Executor::Cpu, "no sm_110 code"},
      {"B200 emulation: our kernels", b200(), full, W4A4, env({{"NVFP4_USE_EMULATION", "1"}}), Semantics::W4A4,
       Executor::Cuda, ""},
      {"B200 --linear-backend cuda", b200(), full, W4A4, backend(Executor::Cuda), Semantics::W4A16,
       Executor::Cuda, "(--linear-backend cuda instead of cublaslt)"},
      {"H200 default", h200(), full, W4A4, {}, Semantics::W4A16, Executor::Cuda, kH200Warning},
      {"H200 W4A16 checkpoint", h200(), full, W4A16, {}, Semantics::W4A16, Executor::Cuda, ""},
      {"H200 emulation", h200(), full, W4A4, env({{"NVFP4_USE_EMULATION", "1"}}), Semantics::W4A4, Executor::Cuda,
       ""},
      {"H200 emulation vllm", h200(), full, W4A4,
       env({{"NVFP4_USE_EMULATION", "true"}, {"NVFP4_EMULATION_FLAVOR", "vllm"}}), Semantics::W4A4_VLLM,
       Executor::Cuda, ""},
      {"H200 vLLM alias", h200(), full, W4A4, env({{"VLLM_USE_NVFP4_CT_EMULATIONS", "1"}}), Semantics::W4A4,
       Executor::Cuda, ""},
      {"H200 emulation off", h200(), full, W4A4, env({{"NVFP4_USE_EMULATION", "0"}}), Semantics::W4A16,
       Executor::Cuda, kH200Warning},
      {"H200 flavour without emulation", h200(), full, W4A4, env({{"NVFP4_EMULATION_FLAVOR", "vllm"}}),
       Semantics::W4A16, Executor::Cuda, kH200Warning},
      {"H200 --device cpu", h200(), full, W4A4, dev_cpu, Semantics::W4A16, Executor::Cpu,
       "no native FP4 on the CPU (--device cpu)"},
      {"H200 --linear-backend cpu + emulation", h200(), full, W4A4,
       merge_overrides(backend(Executor::Cpu), env({{"NVFP4_USE_EMULATION", "1"}})), Semantics::W4A4,
       Executor::Cpu, ""},
      {"H200 option w4a16", h200(), full, W4A4, sem_w4a16, Semantics::W4A16, Executor::Cuda, ""},
      {"H200 option w4a4 (emulated)", h200(), full, W4A4, sem_w4a4, Semantics::W4A4, Executor::Cuda, ""},
      {"B200 option w4a4 (native)", b200(), full, W4A4, sem_w4a4, Semantics::W4A4, Executor::Cublaslt, ""},
      {"A100", a100(), full, W4A4, {}, Semantics::W4A16, Executor::Cuda, "no native FP4 on NVIDIA A100-SXM4-80GB (sm_80 < sm_100)"},
      {"RTX 4090 (8.9) runs sm_80 code", rtx4090(), full, W4A4, {}, Semantics::W4A16, Executor::Cuda, "sm_89 < sm_100"},
      {"T4: kernels need sm_80", t4(), full, W4A4, {}, Semantics::W4A16, Executor::Cpu,
       "Tesla T4 (7.5) cannot run this project's CUDA kernels (sm_75 < sm_80)"},
      {"T4 W4A16 checkpoint", t4(), full, W4A16, {}, Semantics::W4A16, Executor::Cpu, "sm_75 < sm_80"},
      {"V100", v100(), full, W4A4, {}, Semantics::W4A16, Executor::Cpu, "no native FP4 on Tesla V100-SXM2-32GB (sm_70 < sm_100)"},
      {"no GPU", no_gpu(), cpu_build, W4A4, {}, Semantics::W4A16, Executor::Cpu,
       "no native FP4 on the CPU (this binary was built without CUDA)"},
      {"no GPU W4A16", no_gpu(), cpu_build, W4A16, {}, Semantics::W4A16, Executor::Cpu, ""},
      {"no GPU emulation", no_gpu(), cpu_build, W4A4, env({{"NVFP4_USE_EMULATION", "1"}}), Semantics::W4A4,
       Executor::Cpu, ""},
      {"no GPU emulation vllm", no_gpu(), cpu_build, W4A4,
       env({{"NVFP4_USE_EMULATION", "1"}, {"NVFP4_EMULATION_FLAVOR", "vllm"}}), Semantics::W4A4_VLLM, Executor::Cpu,
       ""},
  };
}

TEST(Select, Table) {
  for (const Row& r : rows()) {
    SCOPED_TRACE(r.name);
    const Selection s = select_linear(r.dev, r.build, r.scheme, r.ov);
    std::printf("  %-40s -> %s%s%s\n", r.name, s.str().c_str(), s.warning.empty() ? "" : "\n      warning: ",
                s.warning.c_str());
    EXPECT_EQ(semantics_name(s.semantics), std::string(semantics_name(r.sem)));
    EXPECT_EQ(executor_name(s.executor), std::string(executor_name(r.exec)));
    EXPECT_FALSE(s.reason.empty());
    if (std::string(r.warning_has).empty()) {
      EXPECT_EQ(s.warning, "");
    } else {
      EXPECT_NE(s.warning.find(r.warning_has), std::string::npos) << "warning: " << s.warning;
    }
    // Pure: the same inputs give the same answer.
    const Selection again = select_linear(r.dev, r.build, r.scheme, r.ov);
    EXPECT_EQ(again.str(), s.str());
    EXPECT_EQ(again.warning, s.warning);
    // Device ordinal: -1 exactly for the CPU executor.
    EXPECT_EQ(s.device < 0, s.executor == Executor::Cpu);
  }
}

TEST(Select, H200WarningWordingExactly) {
  const Selection s = select_linear(h200(), full_build(), LayerScheme::W4A4, {});
  EXPECT_EQ(s.warning, kH200Warning);
}

// An error whose message must contain `has`.
template <class E, class F>
void expect_error(F f, const std::string& has) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << has;
  } catch (const E& e) {
    std::printf("  error: %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find(has), std::string::npos) << e.what();
  }
}

TEST(Select, ExplicitRequestsThatCannotRunAreErrors) {
  const auto W4A4 = LayerScheme::W4A4;
  expect_error<Error>([&] { select_linear(h200(), full_build(), W4A4, backend(Executor::Cublaslt)); },
                      "--linear-backend cublaslt: cublaslt needs compute capability >= 10.0; this device is "
                      "NVIDIA H200 (9.0)");
  expect_error<Error>([&] { select_linear(h200(), full_build(), LayerScheme::W4A16, backend(Executor::Cublaslt)); },
                      "cublaslt runs only native W4A4");
  BuildInfo old_lt = full_build();
  old_lt.cublaslt_version = 120604;
  expect_error<Error>([&] { select_linear(b200(), old_lt, W4A4, backend(Executor::Cublaslt)); },
                      "cublaslt needs cuBLASLt >= 12.8");
  expect_error<Error>([&] { select_linear(t4(), full_build(), W4A4, backend(Executor::Cuda)); },
                      "kernels need compute capability >= 8.0; this device is Tesla T4 (7.5)");
  expect_error<Error>([&] { select_linear(no_gpu(), BuildInfo{}, W4A4, backend(Executor::Cuda)); },
                      "the cuda executor needs a CUDA device");
  Overrides want_cuda;
  want_cuda.device = parse_device_request("cuda:1", "--device");
  want_cuda.device_from = "--device cuda:1";
  expect_error<Error>([&] { select_linear(no_gpu(), BuildInfo{}, W4A4, want_cuda); },
                      "--device cuda:1 asks for a CUDA device, but this binary was built without CUDA");
  // Emulation flavour vllm cannot run on cuBLASLt (it computes native numerics only).
  Overrides lt_vllm = merge_overrides(backend(Executor::Cublaslt),
                                      env({{"NVFP4_USE_EMULATION", "1"}, {"NVFP4_EMULATION_FLAVOR", "vllm"}}));
  expect_error<Error>([&] { select_linear(b200(), full_build(), W4A4, lt_vllm); }, "cublaslt runs only native W4A4");
}

TEST(Select, W4A16CheckpointAskingForW4A4IsAnError) {
  expect_error<Error>(
      [&] { select_linear(h200(), full_build(), LayerScheme::W4A16, env({{"NVFP4_USE_EMULATION", "1"}})); },
      "NVFP4_USE_EMULATION=1 asks for W4A4 emulation, but the checkpoint is W4A16");
  Overrides o;
  o.semantics = Semantics::W4A4_VLLM;
  o.semantics_from = "option semantics";
  expect_error<Error>([&] { select_linear(b200(), full_build(), LayerScheme::W4A16, o); },
                      "asks for w4a4-vllm, but the checkpoint is W4A16");
}

TEST(Select, InvalidEnvironmentValuesAreUsageErrorsListingValidValues) {
  expect_error<UsageError>([] { env({{"NVFP4_LINEAR_BACKEND", "tensorrt"}}); },
                           "NVFP4_LINEAR_BACKEND: invalid value 'tensorrt' (valid: cpu, cuda, cublaslt)");
  expect_error<UsageError>([] { env({{"NVFP4_USE_EMULATION", "maybe"}}); },
                           "NVFP4_USE_EMULATION: invalid value 'maybe' (valid: 1, 0, true, false");
  expect_error<UsageError>([] { env({{"VLLM_USE_NVFP4_CT_EMULATIONS", "2"}}); }, "VLLM_USE_NVFP4_CT_EMULATIONS");
  expect_error<UsageError>([] { env({{"NVFP4_EMULATION_FLAVOR", "marlin"}}); }, "(valid: native, vllm)");
  expect_error<UsageError>([] { env({{"NVFP4_DEVICE", "gpu"}}); }, "(valid: cpu, cuda, cuda:N)");
  expect_error<UsageError>([] { env({{"NVFP4_DEVICE", "cuda:x"}}); }, "(valid: cpu, cuda, cuda:N)");
  expect_error<UsageError>(
      [] { env({{"NVFP4_USE_EMULATION", "1"}, {"VLLM_USE_NVFP4_CT_EMULATIONS", "0"}}); }, "disagree");
}

TEST(Select, EnvironmentParsing) {
  const Overrides none = env({});
  EXPECT_FALSE(none.executor || none.emulation || none.flavor || none.device || none.semantics);
  const Overrides empty_values = env({{"NVFP4_USE_EMULATION", ""}, {"NVFP4_LINEAR_BACKEND", ""}});
  EXPECT_FALSE(empty_values.emulation || empty_values.executor);  // empty = unset
  const Overrides alias = env({{"VLLM_USE_NVFP4_CT_EMULATIONS", "1"}});
  ASSERT_TRUE(alias.emulation);
  EXPECT_TRUE(*alias.emulation);
  EXPECT_EQ(alias.emulation_from, "VLLM_USE_NVFP4_CT_EMULATIONS=1");
  const Overrides both = env({{"VLLM_USE_NVFP4_CT_EMULATIONS", "1"}, {"NVFP4_USE_EMULATION", "ON"}});
  EXPECT_TRUE(*both.emulation);
  const Overrides d = env({{"NVFP4_DEVICE", "cuda:3"}});
  ASSERT_TRUE(d.device);
  EXPECT_EQ(d.device->index, 3);
  EXPECT_FALSE(d.device->cpu);
}

TEST(Select, FlagBeatsEnvironment) {
  Overrides flags = backend(Executor::Cpu);
  const Overrides m = merge_overrides(flags, env({{"NVFP4_LINEAR_BACKEND", "cuda"}, {"NVFP4_USE_EMULATION", "1"}}));
  ASSERT_TRUE(m.executor);
  EXPECT_EQ(*m.executor, Executor::Cpu);
  EXPECT_EQ(m.executor_from, "--linear-backend cpu");
  ASSERT_TRUE(m.emulation);  // fields the flags leave unset come from the environment
  EXPECT_EQ(m.emulation_from, "NVFP4_USE_EMULATION=1");
  const Selection s = select_linear(h200(), full_build(), LayerScheme::W4A4, m);
  EXPECT_EQ(s.executor, Executor::Cpu);
  EXPECT_EQ(s.semantics, Semantics::W4A4);
}

TEST(Select, ArchCompatibility) {
  EXPECT_TRUE(archs_run_on({sass(80)}, 80));
  EXPECT_TRUE(archs_run_on({sass(80)}, 86));
  EXPECT_TRUE(archs_run_on({sass(80)}, 89));
  EXPECT_FALSE(archs_run_on({sass(86)}, 80));
  EXPECT_FALSE(archs_run_on({sass(80)}, 90));   // SASS does not cross major versions
  EXPECT_TRUE(archs_run_on({sass(90, 'a')}, 90));
  EXPECT_FALSE(archs_run_on({sass(100, 'a')}, 103));  // arch-specific: exact device only
  EXPECT_TRUE(archs_run_on({sass(100, 'f')}, 103));
  EXPECT_FALSE(archs_run_on({sass(100, 'f')}, 120));
  EXPECT_TRUE(archs_run_on({ptx(80)}, 120));  // generic PTX JIT-compiles forward
  EXPECT_TRUE(archs_run_on({ptx(100)}, 110));
  EXPECT_FALSE(archs_run_on({ptx(100)}, 90));
  EXPECT_FALSE(archs_run_on({}, 90));
  EXPECT_TRUE(archs_run_on({sass(100)}, 103));  // generic: the newer minor versions too
  EXPECT_TRUE(archs_run_on({sass(120)}, 121));
  EXPECT_FALSE(archs_run_on({sass(100)}, 110));
  EXPECT_EQ(full_build().archs_string(), "sm_80,sm_90a,sm_100,sm_120,compute_100");
  EXPECT_EQ(cublaslt_version_string(120803), "12.8.3");
  EXPECT_EQ(cudart_version_string(12080), "12.8");
}

TEST(Select, WarningLoggedOncePerProcessNotPerLayer) {
  std::vector<std::string> warnings, infos;
  Reporter rep;
  rep.log = [&](LogLevel l, const std::string& m) { (l == LogLevel::Warning ? warnings : infos).push_back(m); };
  DeviceInfo dev = DeviceInfo::gpu("Test GPU for report_selection", 8, 6);
  const Selection s = select_linear(dev, full_build(), LayerScheme::W4A4, {});
  ASSERT_FALSE(s.warning.empty());
  for (int layer = 0; layer < 50; ++layer) report_selection(s, rep);
  EXPECT_EQ(warnings.size(), 1u);
  EXPECT_EQ(infos.size(), 1u);
  EXPECT_EQ(warnings[0], s.warning);
}

// The kernel the cuda executor runs for M > 32 (and M > 16 on large layers): the wgmma kernel only on 9.0 with
// sm_90a code in the binary.
TEST(Select, WgmmaKernelOnlyOnHopperWithSm90aCode) {
  EXPECT_TRUE(wgmma_kernel_capability(h200(), full_build()).ok);
  BuildInfo generic90 = full_build();
  generic90.cuda_archs = {sass(80), sass(90), sass(100, 'a')};
  const Capability no_a = wgmma_kernel_capability(h200(), generic90);
  EXPECT_FALSE(no_a.ok);
  EXPECT_EQ(no_a.brief, "this binary has no sm_90a code");
  EXPECT_TRUE(cuda_kernels_capability(h200(), generic90).ok);  // the decode kernel still runs
  const Capability blackwell = wgmma_kernel_capability(b200(), full_build());
  EXPECT_FALSE(blackwell.ok);
  EXPECT_EQ(blackwell.brief, "sm_100 is not sm_90");
  EXPECT_FALSE(wgmma_kernel_capability(DeviceInfo::gpu("NVIDIA A100", 8, 0), full_build()).ok);
  EXPECT_FALSE(wgmma_kernel_capability(DeviceInfo::cpu(), full_build()).ok);
  EXPECT_NE(explain_dispatch(h200(), full_build(), {})
                .find("M > 32 (prefill):    Hopper wgmma kernel (also M = 17-32 on layers of >= 20 Mi weights and on "
                      "smaller ones where the decode kernel's grid is estimated slower; on small layers whose decode grid is "
                      "estimated faster to M = 64, from M = 65)"),
            std::string::npos);
  EXPECT_NE(explain_dispatch(h200(), generic90, {}).find("no wgmma kernel: this binary has no sm_90a code"),
            std::string::npos);
}

TEST(Select, ExplainMentionsDeviceBuildAndBothSchemes) {
  const std::string e = explain_dispatch(h200(), full_build(), {});
  std::printf("%s", e.c_str());
  EXPECT_NE(e.find("NVIDIA H200 (9.0)"), std::string::npos);
  EXPECT_NE(e.find("sm_80,sm_90a,sm_100,sm_120,compute_100"), std::string::npos);
  EXPECT_NE(e.find("W4A4 layer:  w4a16 on cuda:0"), std::string::npos);
  EXPECT_NE(e.find("cublaslt needs compute capability >= 10.0"), std::string::npos);
}

}  // namespace
}  // namespace nvfp4

namespace nvfp4 {
namespace {

#ifdef NVFP4_TEST_CUDA_ARCHS
// The library reports the architecture list it was built with (NVFP4_CUDA_ARCHS): an entry X as SASS sm_X, an
// entry compute_X as PTX, in order; the dispatch's "does this binary carry code" rule reads this list.
TEST(RealMachine, BuildRecordsItsArchitectureList) {
  std::string want, item;
  std::stringstream ss(NVFP4_TEST_CUDA_ARCHS);
  while (std::getline(ss, item, ','))
    want += (want.empty() ? "" : ",") + (item.rfind("compute_", 0) == 0 ? item : "sm_" + item);
  EXPECT_EQ(query_build().archs_string(), want);
}
#endif

// This machine, as the library sees it at run time (no GPU here -> the CPU; an H200 -> w4a16 on cuda; a
// Blackwell with cuBLASLt >= 12.8 -> w4a4 on cublaslt). Prints the decision so a test log shows it.
TEST(RealMachine, DispatchOnThisMachine) {
  const DeviceInfo dev = detect_device({});
  const BuildInfo build = query_build();
  std::printf("%s", explain_dispatch(dev, build, {}).c_str());
  const Selection w4a4 = select_linear(dev, build, LayerScheme::W4A4, {});
  const Selection w4a16 = select_linear(dev, build, LayerScheme::W4A16, {});
  EXPECT_EQ(w4a16.semantics, Semantics::W4A16);
  EXPECT_NE(w4a16.executor, Executor::Cublaslt);
  if (!dev.is_gpu) {
    EXPECT_EQ(w4a4.executor, Executor::Cpu);
    EXPECT_FALSE(w4a4.warning.empty());
  }
  if (dev.is_gpu && dev.cc() < 100) {
    EXPECT_NE(w4a4.executor, Executor::Cublaslt) << "dispatch chose cublaslt on " << dev.describe();
    EXPECT_EQ(w4a4.semantics, Semantics::W4A16);
    EXPECT_NE(w4a4.warning.find("no native FP4 on " + dev.name), std::string::npos) << w4a4.warning;
    Overrides lt;
    lt.executor = Executor::Cublaslt;
    lt.executor_from = "--linear-backend cublaslt";
    EXPECT_THROW(select_linear(dev, build, LayerScheme::W4A4, lt), Error);
  }
  if (native_fp4_capability(dev, build).ok) {  // Blackwell with cuBLASLt >= 12.8 and code for it
    EXPECT_EQ(w4a4.executor, Executor::Cublaslt);
    EXPECT_EQ(w4a4.semantics, Semantics::W4A4);
    EXPECT_EQ(w4a4.warning, "");
  }
  if (build.cuda) {
    EXPECT_FALSE(build.cuda_archs.empty()) << "a CUDA build must know what it was compiled for";
  } else {
    EXPECT_EQ(dev.note, "this binary was built without CUDA");
  }
}

}  // namespace
}  // namespace nvfp4
