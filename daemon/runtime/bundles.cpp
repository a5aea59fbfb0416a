#include "runtime/bundles.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "runtime/dir_entries.h"

namespace gdw {
namespace {

// Bounded: a real config.json is tens of KiB; anything huge is not a bundle we trust.
constexpr off_t kMaxConfigSize = 8 << 20;

// The layout says which runtime wrote the file (oci_config.h, rule 1).
constexpr std::pair<const char*, RuntimeKind> kLayouts[] = {{"/config.json", RuntimeKind::kContainerd},
                                                            {"/userdata/config.json", RuntimeKind::kCrio}};

}  // namespace

BundleIndex::BundleIndex(std::vector<std::string> state_dirs) : state_dirs_(std::move(state_dirs)) {}

bool BundleIndex::load(std::size_t dir_index, int dir_fd, std::string_view id) {
  const std::string& dir = state_dirs_[dir_index];
  for (std::size_t layout = 0; layout < std::size(kLayouts); ++layout) {
    // Relative to the open state directory in refresh() (a two-name lookup, not the whole
    // path's); the path itself only when the file is new or changed.
    std::string rel = dir_fd == AT_FDCWD ? dir + "/" : std::string();
    rel.append(id).append(kLayouts[layout].first);
    struct stat st{};
    if (::fstatat(dir_fd, rel.c_str(), &st, 0) != 0 || !S_ISREG(st.st_mode)) continue;
    Stamp stamp{st.st_ino, st.st_size, st.st_mtim.tv_sec * 1'000'000'000L + st.st_mtim.tv_nsec};
    const std::size_t source = dir_index * std::size(kLayouts) + layout;
    if (auto it = bundles_.find(id); it != bundles_.end() && it->second.stamp == stamp && it->second.source == source) {
      it->second.seen = refreshes_;
      return true;
    }
    std::string path = dir + "/";
    path.append(id).append(kLayouts[layout].first);
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
    auto info = parse_oci_config(text.str(), kLayouts[layout].second);
    if (!info) {
      problems_[path] = info.error().message;
      return false;
    }
    problems_.erase(path);
    std::string key(id);
    bundles_.insert_or_assign(key, Entry{Bundle{key, std::move(path), std::move(*info)}, stamp, source, refreshes_});
    ++generation_;
    return true;
  }
  return false;
}

void BundleIndex::refresh() {
  ++refreshes_;  // what this pass does not see again is gone
  for (std::size_t i = 0; i < state_dirs_.size(); ++i) {
    DirFd dir(open_dir(state_dirs_[i].c_str()));
    for_each_dir_entry(dir.get(), [&](std::string_view id, unsigned char type) {
      if (type == DT_DIR || type == DT_UNKNOWN) load(i, dir.get(), id);
    });
  }
  generation_ += std::erase_if(bundles_, [&](const auto& kv) { return kv.second.seen != refreshes_; });
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
  for (std::size_t i = 0; i < state_dirs_.size(); ++i) {
    if (load(i, AT_FDCWD, container_id)) return find(container_id);
  }
  return nullptr;
}

}  // namespace gdw
