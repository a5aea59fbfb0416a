#include "support/runc_container.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace gdw::test {
namespace fs = std::filesystem;

namespace {

const char* binary_of(OciRuntime runtime) { return runtime == OciRuntime::kCrun ? "/usr/bin/crun" : "/usr/sbin/runc"; }

std::vector<std::string> in_private_mount_namespace(const std::string& setup) {
  return {"unshare", "-m", "--propagation", "private", "sh", "-c", setup + " && exec \"$0\" \"$@\""};
}

}  // namespace

std::string to_string(OciRuntime runtime) { return runtime == OciRuntime::kCrun ? "crun" : "runc"; }

std::vector<std::string> cgroup_v2_wrapper() {
  return in_private_mount_namespace("mount --bind /sys/fs/cgroup/unified /sys/fs/cgroup");
}

std::vector<std::string> cgroup_v1_only_wrapper() {
  return in_private_mount_namespace("{ ! mountpoint -q /sys/fs/cgroup/unified || umount /sys/fs/cgroup/unified; }");
}

bool OciContainer::available(OciRuntime runtime) {
  return ::geteuid() == 0 && ::access(binary_of(runtime), X_OK) == 0 && ::access("/bin/busybox", X_OK) == 0;
}

CommandResult OciContainer::cli(const std::vector<std::string>& args) {
  std::vector<std::string> argv = options_.wrapper;
  if (options_.runtime == OciRuntime::kCrun)
    argv.insert(argv.end(), {"env", "LD_PRELOAD=" + (options_.memlock_shim.empty() ? std::string(GDW_MEMLOCK_SHIM)
                                                                                  : options_.memlock_shim)});
  const std::string root = options_.runtime_state_dir.empty() ? state_.path() : options_.runtime_state_dir;
  argv.insert(argv.end(), {to_string(options_.runtime), "--root", root});
  if (options_.systemd_cgroup) argv.push_back("--systemd-cgroup");
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, std::chrono::seconds(60));
}

OciContainer::OciContainer(Options options) : options_(std::move(options)) { start(); }

void OciContainer::start() {
  const std::string rootfs = options_.bundle_dir + "/rootfs";
  make_dirs(rootfs + "/bin");
  for (const char* d : {"proc", "sys", "dev", "tmp", "gpu"}) make_dirs(rootfs + "/" + d);
  fs::copy_file("/bin/busybox", rootfs + "/bin/busybox", fs::copy_options::overwrite_existing);
  for (const auto& node : options_.nodes) {
    std::string p = rootfs + node.path;
    make_dirs(fs::path(p).parent_path());
    ::mknod(p.c_str(), S_IFCHR | 0666, makedev(node.major, node.minor));
  }
  // The spec comes from the runtime's own template, on the host.
  auto spec = run_command({binary_of(options_.runtime), "spec", "--bundle", options_.bundle_dir});
  if (spec.exit_code != 0) {
    start_error_ = to_string(options_.runtime) + " spec: " + spec.err;
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
  const std::string bundle = options_.runtime_bundle_dir.empty() ? options_.bundle_dir : options_.runtime_bundle_dir;
  // As containerd's shim asks: the pid file, written once the create has ended.
  auto run = cli({"run", "-d", "--pid-file", bundle + "/init.pid", "--bundle", bundle, options_.id});
  started_ = run.exit_code == 0;
  if (!started_) start_error_ = to_string(options_.runtime) + " run: " + run.out + run.err;
}

OciContainer::~OciContainer() {
  if (!started_) return;
  cli({"kill", options_.id, "KILL"});
  for (int i = 0; i < 50 && cli({"delete", "--force", options_.id}).exit_code != 0; ++i) ::usleep(20000);
}

int OciContainer::open_errno(const std::string& path) {
  // dd opens `path` for reading and copies nothing: no wait on a device that has a driver.
  auto r = cli({"exec", options_.id, "/bin/busybox", "dd", "if=" + path, "of=/dev/null", "bs=1", "count=0"});
  const std::string out = r.out + r.err;
  if (out.find("No such device or address") != std::string::npos) return ENXIO;
  if (out.find("Operation not permitted") != std::string::npos) return EPERM;
  if (r.exit_code == 0) return 0;
  return -1;
}

}  // namespace gdw::test
