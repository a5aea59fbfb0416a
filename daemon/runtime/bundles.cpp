#include "runtime/bundles.h"

#include <dirent.h>
#include <sys/stat.h>

#include <fstream>
#include <set>
#include <sstream>

namespace gdw {
namespace {

// Bounded: a real config.json is tens of KiB; anything huge is not a bundle we trust.
constexpr off_t kMaxConfigSize = 8 << 20;

std::vector<std::string> list_dirs(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return names;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (e->d_type == DT_DIR || e->d_type == DT_UNKNOWN) names.push_back(std::move(name));
  }
  ::closedir(d);
  return names;
}

}  // namespace

BundleIndex::BundleIndex(std::vector<std::string> state_dirs) : state_dirs_(std::move(state_dirs)) {}

bool BundleIndex::load(const std::string& dir, const std::string& id) {
  // The layout says which runtime wrote the file (oci_config.h, rule 1).
  static constexpr std::pair<const char*, RuntimeKind> kLayouts[] = {{"/config.json", RuntimeKind::kContainerd},
                                                                     {"/userdata/config.json", RuntimeKind::kCrio}};
  for (const auto& [rel, layout] : kLayouts) {
    std::string path = dir + "/" + id + rel;
    struct stat st{};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    Stamp stamp{st.st_ino, st.st_size, st.st_mtim.tv_sec * 1'000'000'000L + st.st_mtim.tv_nsec};
    if (auto it = bundles_.find(id); it != bundles_.end() && it->second.stamp == stamp &&
                                     it->second.bundle.config_path == path) {
      return true;
    }
    if (st.st_size > kMaxConfigSize) {
      problems_[path] = "larger than 8 MiB";
      return false;
    }
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) {
      problems_[path] = "cannot read";
      return false;
    }
    auto info = parse_oci_config(text.str(), layout);
    if (!info) {
      problems_[path] = info.error().message;
      return false;
    }
    problems_.erase(path);
    bundles_[id] = Entry{Bundle{id, path, std::move(*info)}, stamp};
    ++generation_;
    return true;
  }
  return false;
}

void BundleIndex::refresh() {
  std::set<std::string> seen;
  for (const auto& dir : state_dirs_) {
    for (const auto& id : list_dirs(dir)) {
      if (load(dir, id)) seen.insert(id);
    }
  }
  generation_ += std::erase_if(bundles_, [&](const auto& kv) { return !seen.count(kv.first); });
  std::erase_if(problems_, [&](const auto& kv) {
    struct stat st{};
    return ::stat(kv.first.c_str(), &st) != 0;
  });
}

std::vector<const Bundle*> BundleIndex::all() const {
  std::vector<const Bundle*> out;
  out.reserve(bundles_.size());
  for (const auto& [id, entry] : bundles_) out.push_back(&entry.bundle);
  return out;
}

const Bundle* BundleIndex::find(const std::string& container_id) const {
  auto it = bundles_.find(container_id);
  return it == bundles_.end() ? nullptr : &it->second.bundle;
}

const Bundle* BundleIndex::find_or_load(const std::string& container_id) {
  if (const Bundle* b = find(container_id)) return b;
  for (const auto& dir : state_dirs_) {
    if (load(dir, container_id)) return find(container_id);
  }
  return nullptr;
}

}  // namespace gdw
