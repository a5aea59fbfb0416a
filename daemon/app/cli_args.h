// Command-line options as data: each command lists its flags (name, value name, help) and
// one parser reads every command's arguments from that list; the same list writes the
// usage line and the options section of its --help. Pure: strings in, values out.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace gdw {

struct Flag {
  std::string_view name;        // "--config"
  std::string_view value_name;  // "PATH"; empty for a switch, which takes no value
  std::string_view help;        // may span lines; --help indents the later ones under the first
  bool takes_value() const { return !value_name.empty(); }
};

struct ParsedArgs {
  bool help = false;  // --help or -h anywhere an option may be, or "help" first
  std::set<std::string, std::less<>> switches;
  std::map<std::string, std::string, std::less<>> values;  // a repeated option: the last wins

  bool has(std::string_view flag) const { return switches.count(flag) > 0; }
  std::string value(std::string_view flag, std::string fallback = {}) const;
};

// Reads "--switch", "--name VALUE" and "--name=VALUE". An option not in `flags`, a switch
// given a value and a missing value are errors that say which argument.
Result<ParsedArgs> parse_args(std::span<const std::string> args, std::span<const Flag> flags);

// "[--config PATH] [--json]": the flags for a usage line.
std::string flags_synopsis(std::span<const Flag> flags);

// One line per flag ("  --config PATH  help"), help aligned in one column.
std::string flags_help(std::span<const Flag> flags);

}  // namespace gdw
