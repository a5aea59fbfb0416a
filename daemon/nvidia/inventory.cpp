#include "nvidia/inventory.h"

#include "hostfs/bounded_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace gdw {
namespace {

// procfs files report size 0, so they are read to EOF; the real ones are a few KiB, and
// the bound keeps a corrupt or hostile tree from exhausting memory.
constexpr std::size_t kMaxProcFile = 1 << 20;

struct FileText {
  bool missing = false;  // normal on a node without the driver
  std::string text;
};

Result<FileText> read_text_file(const std::string& path) {
  auto text = read_bounded_file(path, {.max_bytes = kMaxProcFile});
  if (!text) {
    if (text.error().code == ENOENT) return FileText{true, {}};  // normal without the driver
    return text.error();
  }
  return FileText{false, std::move(*text)};
}

struct DirNames {
  bool missing = false;  // absent, or something that is not a directory has the name
  std::vector<std::string> names;
};

// Sorted, so that the inventory does not depend on readdir order.
Result<DirNames> list_dir(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (!dir) {
    int err = errno;
    if (err == ENOENT || err == ENOTDIR) return DirNames{true, {}};
    return Error{path + ": " + errno_text(err)};
  }
  DirNames listing;
  while (dirent* entry = ::readdir(dir)) {
    std::string_view name = entry->d_name;
    if (name != "." && name != "..") listing.names.emplace_back(name);
  }
  ::closedir(dir);
  std::sort(listing.names.begin(), listing.names.end());
  return listing;
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// Records <dev_root>/<rel> when it is a character device. A node that vanished between
// listing and stat() is simply absent; when `required` the caller asked for this very name,
// so anything that is not a character device is worth a note.
void stat_node(Inventory& inventory, const std::string& dev_root, const std::string& rel, bool required) {
  std::string path = dev_root + "/" + rel;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    int err = errno;
    if (err != ENOENT) inventory.problems.push_back(path + ": " + errno_text(err));
    return;
  }
  if (!S_ISCHR(st.st_mode)) {
    if (required) inventory.problems.push_back(path + ": not a character device");
    return;
  }
  inventory.dev_nodes[rel] = DeviceNumber{DeviceType::kChar, ::major(st.st_rdev), ::minor(st.st_rdev)};
}

void scan_dev_nodes(Inventory& inventory, const std::string& dev_root) {
  auto names = list_dir(dev_root);
  if (!names) {
    inventory.problems.push_back(names.error().message);
    return;
  }
  if (names->missing) {
    inventory.problems.push_back(dev_root + ": not found");
    return;
  }
  for (const auto& name : names->names)
    if (starts_with(name, "nvidia")) stat_node(inventory, dev_root, name, false);

  std::string caps_dir = dev_root + "/nvidia-caps";
  auto caps = list_dir(caps_dir);
  if (!caps) {
    inventory.problems.push_back(caps.error().message);
    return;
  }
  for (const auto& name : caps->names)
    if (starts_with(name, "nvidia-cap")) stat_node(inventory, dev_root, "nvidia-caps/" + name, false);
}

void read_char_majors(Inventory& inventory, const std::string& proc_root) {
  std::string path = proc_root + "/devices";
  auto text = read_text_file(path);
  if (!text) {
    inventory.problems.push_back(text.error().message);
    return;
  }
  if (text->missing) {
    inventory.problems.push_back(path + ": not found");
    return;
  }
  auto majors = parse_proc_devices(text->text);
  if (!majors) {
    inventory.problems.push_back(with_context(path, majors.error()).message);
    return;
  }
  inventory.char_majors = std::move(*majors);
}

void read_gpus(Inventory& inventory, const std::string& proc_root) {
  std::string gpus_dir = proc_root + "/driver/nvidia/gpus";
  auto buses = list_dir(gpus_dir);
  if (!buses) {
    inventory.problems.push_back(buses.error().message);
    return;
  }
  if (buses->missing) {
    inventory.problems.push_back("no NVIDIA driver loaded: " + gpus_dir + " not found");
    return;
  }
  for (const auto& bus : buses->names) {
    std::string path = gpus_dir + "/" + bus + "/information";
    auto text = read_text_file(path);
    if (!text) {
      inventory.problems.push_back(text.error().message);
      continue;
    }
    if (text->missing) {
      inventory.problems.push_back(path + ": not found");
      continue;
    }
    auto gpu = parse_gpu_information(text->text);
    if (!gpu) {
      inventory.problems.push_back(with_context(path, gpu.error()).message);
      continue;
    }
    inventory.gpus.push_back(std::move(*gpu));
  }
}

void read_mig_minors(Inventory& inventory, const std::string& proc_root) {
  std::string path = proc_root + "/driver/nvidia-caps/mig-minors";
  auto text = read_text_file(path);
  if (!text) {
    inventory.problems.push_back(text.error().message);
    return;
  }
  // Drivers before MIG support (and nodes without the driver) have no such file; nothing
  // then refers to a cap minor, and a MIG that needs one is reported where it is resolved.
  if (text->missing) return;
  auto minors = parse_mig_minors(text->text);
  if (!minors) {
    inventory.problems.push_back(with_context(path, minors.error()).message);
    return;
  }
  inventory.mig_minors = std::move(*minors);
}

// Names come from configuration and DeviceSpecs; one that climbs out of dev_root could
// make the daemon grant a device node planted elsewhere.
bool stays_under_root(std::string_view rel) {
  if (rel.empty() || rel.front() == '/') return false;
  while (!rel.empty()) {
    std::size_t slash = rel.find('/');
    if (rel.substr(0, slash) == "..") return false;
    if (slash == std::string_view::npos) break;
    rel.remove_prefix(slash + 1);
  }
  return true;
}

}  // namespace

Inventory read_inventory(const InventoryOptions& options) {
  Inventory inventory;
  read_char_majors(inventory, options.proc_root);
  read_gpus(inventory, options.proc_root);
  read_mig_minors(inventory, options.proc_root);
  scan_dev_nodes(inventory, options.dev_root);
  inventory.migs = options.mig_map;
  if (!inventory.migs.empty()) inventory.mig_source = "config";
  return inventory;
}

void add_dev_nodes(Inventory& inventory, const std::string& dev_root, const std::vector<std::string>& names) {
  for (const auto& name : names) {
    if (!stays_under_root(name)) {
      inventory.problems.push_back("device node name '" + name + "' is not a path under " + dev_root);
      continue;
    }
    stat_node(inventory, dev_root, name, true);
  }
}

}  // namespace gdw
