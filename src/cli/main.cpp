// nvfp4: run NVFP4 checkpoints on the hardware you have. Exit codes: 0 ok, 1 runtime error, 2 usage error.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "cli/verbs.h"
#include "common/error.h"
#include "common/parallel.h"

#include <unistd.h>

namespace nvfp4::cli {

namespace {
std::vector<Verb>& registry() {
  static std::vector<Verb> v;
  return v;
}
}  // namespace

bool register_verb(const Verb& v) {
  registry().push_back(v);
  return true;
}

const std::vector<Verb>& verbs() {
  auto& v = registry();
  std::sort(v.begin(), v.end(), [](const Verb& a, const Verb& b) { return std::strcmp(a.name, b.name) < 0; });
  return v;
}

Reporter stderr_reporter(bool verbose) {
  Reporter r;
  r.log = [verbose](LogLevel lvl, const std::string& msg) {
    if (lvl == LogLevel::Debug && !verbose) return;
    const char* tag = lvl == LogLevel::Warning ? "warning: " : lvl == LogLevel::Error ? "error: " : "";
    std::fprintf(stderr, "nvfp4: %s%s\n", tag, msg.c_str());
  };
  const bool tty = isatty(2);
  r.progress = [tty](const ProgressEvent& e) {
    if (tty) {
      const int width = 30;
      const int fill = e.total ? static_cast<int>(width * e.done / e.total) : 0;
      std::fprintf(stderr, "\r[%.*s%*s] %zu/%zu %-48.48s", fill, "##############################", width - fill, "",
                   e.done, e.total, e.what.c_str());
      if (e.total && e.done == e.total) std::fprintf(stderr, "\n");
    } else if (e.total == 0 || e.done == e.total || e.done % std::max<size_t>(1, e.total / 10) == 0) {
      std::fprintf(stderr, "nvfp4: [%zu/%zu] %s\n", e.done, e.total, e.what.c_str());
    }
  };
  return r;
}

int parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return -1;
}

}  // namespace nvfp4::cli

static void usage(FILE* f) {
  std::fprintf(f, "usage: nvfp4 <verb> [options]   (nvfp4 <verb> --help for its options)\n\nverbs:\n");
  for (const auto& v : nvfp4::cli::verbs()) std::fprintf(f, "  %-10s %s\n", v.name, v.summary);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const std::string verb = argv[1];
  if (verb == "--help" || verb == "-h" || verb == "help") {
    usage(stdout);
    return 0;
  }
  if (verb == "--version") {
    std::printf("nvfp4 0.1.0\n");
    return 0;
  }
  for (const auto& v : nvfp4::cli::verbs()) {
    if (verb != v.name) continue;
    // The thread pool cannot report a bad NVFP4_NUM_THREADS (it falls back to every core); refuse it here.
    if (const char* t = std::getenv("NVFP4_NUM_THREADS"); t && *t) {
      int n = 0;
      if (!nvfp4::parse_thread_count(t, &n)) {
        std::fprintf(stderr, "error: NVFP4_NUM_THREADS: invalid value '%s' (valid: an integer from 1 to %d)\n", t,
                     nvfp4::kMaxThreads);
        return 2;
      }
    }
    std::string prog = std::string("nvfp4 ") + v.name;
    std::vector<char*> args(argv + 1, argv + argc);
    args[0] = prog.data();
    try {
      return v.run(static_cast<int>(args.size()), args.data());
    } catch (const nvfp4::UsageError& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 2;
    } catch (const nvfp4::Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "error: out of memory\n");
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "error: unknown verb '%s'\n", verb.c_str());
  usage(stderr);
  return 2;
}
