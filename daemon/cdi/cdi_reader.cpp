// The file-system side of CDI: lists and reads the spec files of cdi.spec_dirs.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cdi/cdi_spec.h"
#include "hostfs/bounded_file.h"

namespace gdw {
namespace {

constexpr std::size_t kMaxSpecBytes = 4 << 20;
constexpr std::size_t kMaxFilesPerDir = 1024;

// nullopt: no such directory (CDI directories are optional).
std::optional<std::vector<std::string>> spec_names(const std::string& dir, std::vector<std::string>& errors) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    if (errno != ENOENT && errno != ENOTDIR) errors.push_back(dir + ": " + errno_text(errno));
    return std::nullopt;
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    if (is_cdi_spec_file_name(e->d_name)) names.emplace_back(e->d_name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  if (names.size() > kMaxFilesPerDir) {
    errors.push_back(dir + ": " + std::to_string(names.size()) + " spec files; only the first " +
                     std::to_string(kMaxFilesPerDir) + " are read");
    names.resize(kMaxFilesPerDir);
  }
  return names;
}

}  // namespace

std::vector<CdiSpecFile> read_cdi_spec_files(const std::vector<std::string>& dirs, std::vector<std::string>& errors) {
  std::vector<CdiSpecFile> files;
  for (const auto& dir : dirs) {
    auto names = spec_names(dir, errors);
    if (!names) continue;
    for (const auto& name : *names) {
      const std::string path = dir + "/" + name;
      auto text = read_bounded_file(path, {.max_bytes = kMaxSpecBytes, .regular_only = true});
      if (!text) {
        errors.push_back(text.error().message);
        continue;
      }
      files.push_back({path, std::move(*text)});
    }
  }
  return files;
}

CdiRegistry load_cdi_registry(const std::vector<std::string>& dirs) {
  std::vector<std::string> read_errors;
  CdiRegistry registry = build_cdi_registry(read_cdi_spec_files(dirs, read_errors));
  registry.errors.insert(registry.errors.begin(), read_errors.begin(), read_errors.end());
  return registry;
}

}  // namespace gdw
