#include "app/cli_args.h"

#include <algorithm>

namespace gdw {
namespace {

bool is_help_flag(std::string_view a) { return a == "--help" || a == "-h"; }

const Flag* find_flag(std::span<const Flag> flags, std::string_view name) {
  auto it = std::find_if(flags.begin(), flags.end(), [&](const Flag& f) { return f.name == name; });
  return it == flags.end() ? nullptr : &*it;
}

std::string flag_with_value(const Flag& f) {
  std::string s(f.name);
  if (f.takes_value()) s.append(" ").append(f.value_name);
  return s;
}

}  // namespace

std::string ParsedArgs::value(std::string_view flag, std::string fallback) const {
  auto it = values.find(flag);
  return it == values.end() ? fallback : it->second;
}

Result<ParsedArgs> parse_args(std::span<const std::string> args, std::span<const Flag> flags) {
  ParsedArgs out;
  if (!args.empty() && args.front() == "help") {
    out.help = true;
    return out;
  }
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (is_help_flag(arg)) {
      out.help = true;
      return out;
    }
    std::string_view name = arg;
    std::optional<std::string> inline_value;
    if (auto eq = arg.find('='); arg.starts_with("--") && eq != std::string::npos) {
      name = std::string_view(arg).substr(0, eq);
      inline_value = arg.substr(eq + 1);
    }
    const Flag* flag = find_flag(flags, name);
    if (!flag) return Error{"unknown option '" + arg + "'"};
    const std::string key(flag->name);
    if (!flag->takes_value()) {
      if (inline_value) return Error{key + " takes no value"};
      out.switches.insert(key);
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= args.size()) return Error{key + " needs a value"};
      inline_value = args[++i];
    }
    out.values[key] = std::move(*inline_value);
  }
  return out;
}

std::string flags_synopsis(std::span<const Flag> flags) {
  std::string s;
  for (const Flag& f : flags) {
    if (!s.empty()) s += ' ';
    s += "[" + flag_with_value(f) + "]";
  }
  return s;
}

std::string flags_help(std::span<const Flag> flags) {
  std::size_t width = 0;
  for (const Flag& f : flags) width = std::max(width, flag_with_value(f).size());
  const std::string indent(2 + width + 2, ' ');
  std::string s;
  for (const Flag& f : flags) {
    std::string head = "  " + flag_with_value(f);
    head.resize(indent.size(), ' ');
    s += head;
    std::string_view help = f.help;
    for (bool first = true; first || !help.empty(); first = false) {
      const auto nl = help.find('\n');
      if (!first) s += indent;
      s.append(help.substr(0, nl)).append("\n");
      help.remove_prefix(nl == std::string_view::npos ? help.size() : nl + 1);
    }
  }
  return s;
}

}  // namespace gdw
