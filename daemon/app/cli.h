#pragma once

namespace gdw {
// Subcommand dispatch: check | run | version | nvml-query (internal). Returns the exit code.
int cli_main(int argc, char** argv);
}  // namespace gdw
