#include "node/config_file.h"

#include <unistd.h>

#include "node/node_model.h"

namespace gdw {

Result<Config> load_config_file(const std::string& path) {
  std::string file = path;
  if (file.empty()) {
    if (::access(kDefaultConfigPath, F_OK) != 0) return Config{};
    file = kDefaultConfigPath;
  }
  auto text = read_text_file(file, 1 << 20);
  if (!text) return Error{"cannot read config: " + text.error().message};
  return parse_config(*text, file);
}

}  // namespace gdw
