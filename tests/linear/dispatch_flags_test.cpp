// The CLI's dispatch flags (src/cli/dispatch_flags.cpp) parsed by a real CLI11 app, with an injected
// environment. The cli sources are linked only into the `nvfp4` executable, so this test compiles the one
// small translation unit it needs directly.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <map>
#include <string>
#include <vector>

#include "cli/dispatch_flags.cpp"  // NOLINT: see above

namespace nvfp4::cli {
namespace {

GetEnvFn env_of(std::map<std::string, std::string> vars) {
  auto holder = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [holder](const char* name) -> const char* {
    auto it = holder->find(name);
    return it == holder->end() ? nullptr : it->second.c_str();
  };
}

// Parses args (after the program name) with the dispatch flags and one positional PATH.
DispatchFlags parse_flags(std::vector<std::string> args, std::string* path = nullptr) {
  CLI::App app{"test"};
  DispatchFlags f;
  std::string p;
  app.add_option("PATH", p);
  add_dispatch_flags(app, &f);
  std::vector<std::string> rev(args.rbegin(), args.rend());
  app.parse(rev);  // CLI11 takes the arguments reversed
  if (path) *path = p;
  return f;
}

TEST(DispatchFlags, ParsesEachFlag) {
  std::string path;
  DispatchFlags f = parse_flags({"--device", "cuda:1", "--linear-backend", "cpu", "--emulation=vllm", "dir"}, &path);
  EXPECT_EQ(f.device, "cuda:1");
  EXPECT_EQ(f.linear_backend, "cpu");
  EXPECT_EQ(f.emulation, "vllm");
  EXPECT_EQ(path, "dir");
  const Overrides o = dispatch_overrides(f, env_of({}));
  ASSERT_TRUE(o.device && o.executor && o.emulation && o.flavor);
  EXPECT_EQ(o.device->index, 1);
  EXPECT_EQ(*o.executor, Executor::Cpu);
  EXPECT_TRUE(*o.emulation);
  EXPECT_EQ(*o.flavor, EmulationFlavor::Vllm);
  EXPECT_EQ(o.flavor_from, "--emulation=vllm");
}

TEST(DispatchFlags, BareEmulationTakesNoArgumentAndLeavesFlavourToEnvironment) {
  std::string path;
  DispatchFlags f = parse_flags({"--emulation", "dir"}, &path);
  EXPECT_EQ(path, "dir");  // not swallowed as a flavour
  EXPECT_EQ(f.emulation, "on");
  Overrides o = dispatch_overrides(f, env_of({{"NVFP4_EMULATION_FLAVOR", "vllm"}}));
  ASSERT_TRUE(o.emulation && o.flavor);
  EXPECT_EQ(*o.flavor, EmulationFlavor::Vllm);
  o = dispatch_overrides(f, env_of({}));
  EXPECT_FALSE(o.flavor);  // default native, decided by select_linear
  // An explicit flavour beats the environment's.
  f = parse_flags({"--emulation=native"});
  o = dispatch_overrides(f, env_of({{"NVFP4_EMULATION_FLAVOR", "vllm"}}));
  EXPECT_EQ(*o.flavor, EmulationFlavor::Native);
}

TEST(DispatchFlags, FlagBeatsEnvironment) {
  const DispatchFlags f = parse_flags({"--linear-backend", "cuda", "--device", "cpu"});
  const Overrides o = dispatch_overrides(
      f, env_of({{"NVFP4_LINEAR_BACKEND", "cpu"}, {"NVFP4_DEVICE", "cuda:0"}, {"NVFP4_USE_EMULATION", "1"}}));
  EXPECT_EQ(*o.executor, Executor::Cuda);
  EXPECT_EQ(o.executor_from, "--linear-backend cuda");
  EXPECT_TRUE(o.device->cpu);
  EXPECT_EQ(o.emulation_from, "NVFP4_USE_EMULATION=1");
}

TEST(DispatchFlags, BadValuesAreParseErrorsListingValidValues) {
  EXPECT_THROW(parse_flags({"--linear-backend", "tensorrt"}), CLI::ValidationError);
  EXPECT_THROW(parse_flags({"--device", "gpu"}), CLI::ValidationError);
  EXPECT_THROW(parse_flags({"--emulation=marlin"}), CLI::ValidationError);
  try {
    parse_flags({"--device", "cuda:"});
    ADD_FAILURE() << "accepted --device cuda:";
  } catch (const CLI::ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("valid: cpu, cuda, cuda:N"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nvfp4::cli
