// The verbs of the `nvfp4` command. Each verb is one file cli/cmd_<verb>.cpp that parses its own flags
// (CLI11) and registers itself here; main.cpp dispatches on argv[1].
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/log.h"

namespace CLI { class App; }

namespace nvfp4::cli {

struct Verb {
  const char* name;     // "inspect"
  const char* summary;  // one line for `nvfp4 --help`
  int (*run)(int argc, char** argv);  // argv[0] is "nvfp4 <verb>"; returns the exit code
};

bool register_verb(const Verb& v);
const std::vector<Verb>& verbs();

// Standard callbacks for the command: log lines to stderr ("nvfp4: warning: ..."), progress as a bar on a
// terminal and as occasional lines otherwise. `verbose` shows Debug lines.
Reporter stderr_reporter(bool verbose = false);

// "1.50 GiB", "12.00 MiB", "3.00 KiB", "17 B".
std::string human_bytes(uint64_t bytes);

// The --ops option of the model verbs: where the decoder's non-linear ops and unquantized linears run
// ("cpu" or "cuda"); *ops keeps its default when the flag is absent.
void add_ops_flag(CLI::App& app, std::string* ops);

// Parses argv with a CLI11 app. Returns -1 to go on, otherwise the exit code to return: 0 after --help,
// 2 after a usage error (the message is printed on stderr as "error: ...").
int parse(CLI::App& app, int argc, char** argv);

}  // namespace nvfp4::cli

#define NVFP4_CLI_CONCAT2(a, b) a##b
#define NVFP4_CLI_CONCAT(a, b) NVFP4_CLI_CONCAT2(a, b)
// Registers a verb at static-initialisation time (the cli sources are linked directly into the executable).
#define NVFP4_REGISTER_VERB(name, summary, fn) \
  static const bool NVFP4_CLI_CONCAT(nvfp4_verb_registered_, __LINE__) = ::nvfp4::cli::register_verb({name, summary, fn})
