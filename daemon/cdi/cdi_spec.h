// Container Device Interface (CDI) spec files: the parser (pure, text in), the registry
// that merges the specs of cdi.spec_dirs into fully qualified device names, and the reader
// of those directories (cdi_reader.cpp, the only part that touches the file system).
//
// What gpu-devwatch takes from a spec: cdiVersion (0.3.0 to 0.8.0), kind
// ("vendor.com/class"), each device's name and containerEdits.deviceNodes, and the
// spec-level containerEdits.deviceNodes (applied with every device of the spec). Every
// other edit (env, mounts, hooks) is not about device access and is ignored. Spec files
// are written by root (drivers, nvidia-ctk) into root-owned directories: trusted input,
// still parsed defensively (bounded size and depth, every field type checked).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/model.h"
#include "core/result.h"

namespace gdw {

enum class CdiFormat { kJson, kYaml };
// By file name: *.json is JSON, everything else YAML.
CdiFormat cdi_format_of(std::string_view file_name);
// Whether a directory entry is a spec file: *.json, *.yaml or *.yml, not hidden (tools
// write dot-prefixed temporaries and rename them into place).
bool is_cdi_spec_file_name(std::string_view file_name);

struct CdiSpec {
  std::string version;  // cdiVersion
  std::string kind;     // "vendor.com/class"
  std::vector<CdiDeviceNode> spec_nodes;                       // spec-level containerEdits
  std::map<std::string, std::vector<CdiDeviceNode>> devices;  // device name → its own nodes
  // Nodes left out because their type is not a character device ("b", "p"), as
  // "<device>: <path> (type b)".
  std::vector<std::string> skipped;
};

// A spec file's text. Errors say what and where in the document ("devices[2].containerEdits
// .deviceNodes[0].major: ..."); the caller names the file.
Result<CdiSpec> parse_cdi_spec(std::string_view text, CdiFormat format);

struct CdiSpecFile {
  std::string path;
  std::string text;
};

struct CdiRegistry {
  // "vendor.com/class=device" → the device's nodes followed by its spec's.
  std::map<std::string, std::vector<CdiDeviceNode>> devices;
  std::map<std::string, std::string> defined_in;  // the same names → the spec file used
  std::vector<std::string> errors;                // "<file>: <problem>"; those files are left out
  std::size_t spec_files = 0;                     // files that parsed
};

// `files` in priority order: a device defined again in a later file replaces the earlier
// definition (CDI: later directories win). A file that does not parse is reported in
// `errors` and the others still apply.
CdiRegistry build_cdi_registry(const std::vector<CdiSpecFile>& files);

// The reader: every spec file of `dirs` (a missing directory is no error), directories in
// the given order and files by name within each, at most 4 MiB and 1024 files each.
// Problems reading a file land in `errors` (named by path).
std::vector<CdiSpecFile> read_cdi_spec_files(const std::vector<std::string>& dirs, std::vector<std::string>& errors);

// read_cdi_spec_files + build_cdi_registry.
CdiRegistry load_cdi_registry(const std::vector<std::string>& dirs);

}  // namespace gdw
