#include "support/runc_container.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace gdw::test {
namespace fs = std::filesystem;

bool RuncContainer::available() {
  return ::geteuid() == 0 && ::access("/usr/sbin/runc", X_OK) == 0 && ::access("/bin/busybox", X_OK) == 0;
}

CommandResult RuncContainer::runc(const std::vector<std::string>& args) {
  std::vector<std::string> argv = options_.wrapper;
  argv.insert(argv.end(), {"runc", "--root", root_.path()});
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, std::chrono::seconds(60));
}

RuncContainer::RuncContainer(Options options) : options_(std::move(options)) {
  const std::string rootfs = options_.bundle_dir + "/rootfs";
  make_dirs(rootfs + "/bin");
  for (const char* d : {"proc", "sys", "dev", "tmp", "gpu"}) make_dirs(rootfs + "/" + d);
  fs::copy_file("/bin/busybox", rootfs + "/bin/busybox", fs::copy_options::overwrite_existing);
  for (const auto& node : options_.nodes) {
    std::string p = rootfs + node.path;
    make_dirs(fs::path(p).parent_path());
    ::mknod(p.c_str(), S_IFCHR | 0666, makedev(node.major, node.minor));
  }
  auto spec = run_command({"runc", "spec", "--bundle", options_.bundle_dir});
  if (spec.exit_code != 0) {
    start_error_ = "runc spec: " + spec.err;
    return;
  }
  auto doc = nlohmann::json::parse(read_file(options_.bundle_dir + "/config.json"));
  doc["process"]["terminal"] = false;
  doc["process"]["args"] = {"/bin/busybox", "sleep", "100000"};
  doc["root"]["readonly"] = false;
  doc["linux"]["cgroupsPath"] = options_.cgroups_path;
  for (const auto& [k, v] : options_.annotations) doc["annotations"][k] = v;
  for (const auto& r : options_.allow)
    doc["linux"]["resources"]["devices"].push_back(
        {{"allow", true}, {"type", r.type}, {"major", r.major}, {"minor", r.minor}, {"access", r.access}});
  write_file(options_.bundle_dir + "/config.json", doc.dump(2));
  auto run = runc({"run", "-d", "--bundle", options_.bundle_dir, options_.id});
  started_ = run.exit_code == 0;
  if (!started_) start_error_ = "runc run: " + run.out + run.err;
}

RuncContainer::~RuncContainer() {
  if (!started_) return;
  runc({"kill", options_.id, "KILL"});
  for (int i = 0; i < 50 && runc({"delete", "--force", options_.id}).exit_code != 0; ++i) ::usleep(20000);
}

int RuncContainer::open_errno(const std::string& path) {
  auto r = runc({"exec", options_.id, "/bin/busybox", "cat", path});
  const std::string out = r.out + r.err;
  if (out.find("No such device or address") != std::string::npos) return ENXIO;
  if (out.find("Operation not permitted") != std::string::npos) return EPERM;
  if (r.exit_code == 0) return 0;
  return -1;
}

}  // namespace gdw::test
