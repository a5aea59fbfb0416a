#include "runtime/bundles.h"

#include <sys/stat.h>

#include <ctime>
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

// A directory's mtime tells a later change only when that change cannot fall in the same
// timestamp tick (filesystems stamp with a coarse clock, a jiffy or so): a directory
// modified this recently before its listing began is listed again next time.
constexpr long kStampSettledNs = 100'000'000;

long to_ns(const struct timespec& t) { return t.tv_sec * 1'000'000'000L + t.tv_nsec; }

}  // namespace

BundleIndex::BundleIndex(std::vector<std::string> state_dirs)
    : state_dirs_(std::move(state_dirs)), listings_(state_dirs_.size()) {}

bool BundleIndex::load(std::size_t dir_index, int dir_fd, std::string_view id) {
  const std::string& dir = state_dirs_[dir_index];
  for (std::size_t layout = 0; layout < std::size(kLayouts); ++layout) {
    // Relative to the open state directory in refresh() (a two-name lookup, not the whole
    // path's); the path itself only when the file is new or changed.
    std::string rel = dir_fd == AT_FDCWD ? dir + "/" : std::string();
    rel.append(id).append(kLayouts[layout].first);
    struct stat st{};
    if (::fstatat(dir_fd, rel.c_str(), &st, 0) != 0 || !S_ISREG(st.st_mode)) continue;
    Stamp stamp{st.st_ino, st.st_size, to_ns(st.st_mtim), to_ns(st.st_ctim)};
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

void BundleIndex::refresh(BundleRefreshDepth depth) {
  ++refreshes_;  // what a listing does not see again is gone
  std::vector<bool> listed(state_dirs_.size());
  last_listed_dirs_ = 0;
  for (std::size_t i = 0; i < state_dirs_.size(); ++i) {
    // The periodic resync need not compare 500 config.json stamps (two path lookups each,
    // an eighth of its time) to learn nothing: a runtime writes a bundle's config.json
    // once, before the container's cgroup exists, and never rewrites it while the
    // container runs. A new or removed bundle changes its state directory's listing, so
    // its mtime; a config.json that was missing or bad is looked at again every time.
    // What only a rewrite in place would change is read again at startup, SIGHUP and
    // after an inotify overflow (kEveryStamp).
    Listing& listing = listings_[i];
    struct stat st{};
    const bool unchanged = depth == BundleRefreshDepth::kChangedListings && listing.stamp &&
                           ::stat(state_dirs_[i].c_str(), &st) == 0 &&
                           *listing.stamp == Stamp{st.st_ino, st.st_size, to_ns(st.st_mtim), to_ns(st.st_ctim)};
    if (!unchanged) {
      relist(i);
      listed[i] = true;
      ++last_listed_dirs_;
      continue;
    }
    std::erase_if(listing.unloaded, [&](const std::string& id) { return load(i, AT_FDCWD, id); });
  }
  // Only a listed directory says what is gone (find_or_load may have indexed a bundle of
  // an unlisted one since).
  generation_ += std::erase_if(bundles_, [&](const auto& kv) {
    return kv.second.seen != refreshes_ && listed[kv.second.source / std::size(kLayouts)];
  });
  std::erase_if(problems_, [&](const auto& kv) {
    struct stat st{};
    return ::stat(kv.first.c_str(), &st) != 0;
  });
}

void BundleIndex::relist(std::size_t i) {
  Listing& listing = listings_[i];
  listing.unloaded.clear();
  listing.stamp.reset();
  struct timespec began{};
  ::clock_gettime(CLOCK_REALTIME, &began);
  DirFd dir(open_dir(state_dirs_[i].c_str()));
  struct stat st{};
  // Stamped before it is read: a change during the listing moves the mtime past this one.
  const bool stamped = dir.get() >= 0 && ::fstat(dir.get(), &st) == 0;
  for_each_dir_entry(dir.get(), [&](std::string_view id, unsigned char type) {
    if ((type == DT_DIR || type == DT_UNKNOWN) && !load(i, dir.get(), id)) listing.unloaded.emplace_back(id);
  });
  if (stamped && to_ns(began) - to_ns(st.st_mtim) >= kStampSettledNs && to_ns(began) - to_ns(st.st_ctim) >= kStampSettledNs)
    listing.stamp = Stamp{st.st_ino, st.st_size, to_ns(st.st_mtim), to_ns(st.st_ctim)};
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

std::string create_pid_file(const Bundle& bundle) {
  const std::size_t slash = bundle.config_path.rfind('/');
  if (slash == std::string::npos) return {};
  const std::string dir = bundle.config_path.substr(0, slash);
  switch (bundle.info.runtime) {
    case RuntimeKind::kContainerd: return dir + "/init.pid";
    case RuntimeKind::kCrio: return dir + "/pidfile";
    default: return {};
  }
}

}  // namespace gdw
