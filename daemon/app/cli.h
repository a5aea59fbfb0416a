// Subcommand dispatch: check | run | version | nvml-query (internal). Each command is one
// row of a table in cli.cpp: its flags (app/cli_args.h), --help text and handler.
#pragma once

#include <span>
#include <string>

#include "app/cli_args.h"

namespace gdw {

// What an invocation asks for: a command to run with its arguments, or text to print
// (help, usage errors) and an exit code (0 help, 2 a bad command or option).
struct CliAction {
  std::string command;  // empty: print `out` and `err`, exit with `exit_code`
  ParsedArgs args;
  int exit_code = 0;
  std::string out;
  std::string err;
};

// `args`: the arguments after the program name. Pure.
CliAction resolve_cli(std::span<const std::string> args);

// Returns the exit code.
int cli_main(int argc, char** argv);

}  // namespace gdw
