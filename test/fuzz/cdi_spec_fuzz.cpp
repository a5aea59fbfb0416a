// CDI spec files from arbitrary bytes, as JSON and as YAML: no crash, no exception, and what
// a spec that parses yields holds the parser's promises (a supported version, a kind with a
// vendor and a class, absolute host paths, numbers within dev_t's ranges, non-char nodes
// left out); the registry built from it names every device kind=name.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "cdi/cdi_spec.h"

namespace {

void require(bool condition) {
  if (!condition) std::abort();
}

void check_nodes(const std::vector<gdw::CdiDeviceNode>& nodes) {
  for (const auto& n : nodes) {
    require(!n.host_path.empty() && n.host_path.front() == '/');
    require(n.permissions.find_first_not_of("rwm") == std::string::npos);
    if (n.number) {
      require(n.number->type == gdw::DeviceType::kChar);
      require(n.number->major <= 4095 && n.number->minor <= 1048575);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (auto format : {gdw::CdiFormat::kJson, gdw::CdiFormat::kYaml}) {
    auto spec = gdw::parse_cdi_spec(text, format);
    if (!spec) {
      require(!spec.error().message.empty());
      continue;
    }
    require(spec->version.size() == 5 && spec->version.rfind("0.", 0) == 0);
    require(spec->kind.find('/') != std::string::npos);
    check_nodes(spec->spec_nodes);
    for (const auto& [name, nodes] : spec->devices) {
      require(!name.empty());
      check_nodes(nodes);
    }
    const std::string file = format == gdw::CdiFormat::kJson ? "/etc/cdi/f.json" : "/etc/cdi/f.yaml";
    gdw::CdiRegistry registry = gdw::build_cdi_registry({{file, std::string(text)}});
    require(registry.spec_files == 1 && registry.errors.empty());
    require(registry.devices.size() == spec->devices.size());
    for (const auto& [name, nodes] : spec->devices) {
      const auto& merged = registry.devices.at(spec->kind + "=" + name);
      require(merged.size() == nodes.size() + spec->spec_nodes.size());
    }
  }
  return 0;
}
