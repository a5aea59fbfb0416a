// The container image (scripts/build-image.sh), unpacked by umoci and run by runc the way
// deploy/kubernetes/daemonset.yaml runs it: privileged, the host's PID namespace, its own
// network namespace (the pod network), a read-only root, /sys/fs/cgroup from the host,
// the node's /dev and /proc at /host/dev and /host/proc, the kubelet and runtime state
// directories at their own paths, the configuration where the ConfigMap goes and a tmpfs
// at /tmp. The node is a sandbox node: its /dev and /proc are the sandbox's fixture trees
// (this machine has no GPU), everything else is the host's. A GPU container's rule is
// revoked; the daemon in the image grants it back, proven by open() from inside the GPU
// container's cgroup.
//
// The image is multi-arch (amd64 and arm64, the arm64 binary from the cross-build in
// build-arm64): its index names each architecture's image, and each one, unpacked, runs
// its own binary's --version in its own root (arm64 under qemu-user, through binfmt_misc).
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "support/metrics_text.h"
#include "support/process.h"
#include "support/runc_container.h"
#include "support/sandbox_node.h"

namespace gdw::test {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

struct BuiltImage {
  std::string layout;  // OCI image layout directory
  std::string tag;     // the project version: the index; "<tag>-<arch>" each architecture's image
  std::vector<std::string> arches;  // in the index
  std::string error;
  bool download_failed = false;
};

#if defined(__aarch64__)
constexpr const char* kHostArch = "arm64";
#else
constexpr const char* kHostArch = "amd64";
#endif

// The arm64 daemon of the cross-build (scripts/build.sh --arch arm64), when there is one.
std::string arm64_binary() {
#ifdef GDW_ARM64_BINARY
  if (::access(GDW_ARM64_BINARY, X_OK) == 0) return GDW_ARM64_BINARY;
#endif
  return "";
}

std::string first_word(const std::string& s) { return s.substr(0, s.find_first_of(" \n")); }

// scripts/build-image.sh, once per binary + script + default configuration: the result is
// kept in <cache>/image-<hash> (the debootstrapped root file system is cached by the
// script itself), so only the first run on a machine pays for debootstrap.
BuiltImage ensure_image() {
  BuiltImage image;
  const char* cache_env = std::getenv("GDW_TEST_ROOTFS_CACHE");
  const std::string cache = cache_env != nullptr && *cache_env != '\0' ? cache_env : "/var/cache/gdw-test";
  const std::string script = std::string(GDW_SOURCE_DIR) + "/scripts/build-image.sh";
  std::vector<std::string> binaries = {GDW_BINARY};
  image.arches = {kHostArch};
  if (const std::string arm64 = arm64_binary(); !arm64.empty() && std::string(kHostArch) != "arm64") {
    binaries.push_back(arm64);
    image.arches.push_back("arm64");
  }
  std::vector<std::string> hash_argv = {"sh", "-c", "cat \"$@\" | sha256sum", "sh", script,
                                        std::string(GDW_SOURCE_DIR) + "/config/gpu-devwatch.yaml"};
  hash_argv.insert(hash_argv.end(), binaries.begin(), binaries.end());
  auto hashed = run_command(hash_argv);
  if (hashed.exit_code != 0) {
    image.error = "hashing the image inputs failed: " + hashed.err;
    return image;
  }
  const std::string dir = cache + "/image-" + first_word(hashed.out).substr(0, 16);
  const std::string marker = dir + "/complete";
  fs::create_directories(cache);
  const int lock = ::open((cache + "/image.lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (lock < 0 || ::flock(lock, LOCK_EX) != 0) {
    image.error = "cannot lock " + cache + "/image.lock";
    if (lock >= 0) ::close(lock);
    return image;
  }
  struct Unlock {
    int fd;
    ~Unlock() { ::close(fd); }
  } unlock{lock};
  if (::access(marker.c_str(), F_OK) != 0) {
    // Images of earlier binaries are of no further use; the debootstrapped root file
    // systems (image-rootfs, one per architecture and package set) are.
    for (const auto& e : fs::directory_iterator(cache)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("image-", 0) == 0 && name != "image-rootfs" && e.is_directory()) fs::remove_all(e.path());
    }
    std::vector<std::string> argv = {script, "--output", dir};
    for (const auto& binary : binaries) argv.insert(argv.end(), {"--binary", binary});
    // The first arm64 root file system is debootstrapped under qemu-user: minutes.
    auto built = run_command(argv, 840s, {"GDW_IMAGE_CACHE=" + cache + "/image-rootfs"});
    if (built.exit_code != 0) {
      const std::string output = built.out + built.err;
      image.download_failed = output.find("debootstrap failed") != std::string::npos &&
                              (output.find("Failed getting release file") != std::string::npos ||
                               output.find("Couldn't download") != std::string::npos ||
                               output.find("Temporary failure") != std::string::npos);
      image.error = "scripts/build-image.sh failed (exit " + std::to_string(built.exit_code) + "): " + output;
      return image;
    }
    write_file(marker, built.out);
  }
  image.layout = dir + "/oci";
  auto version = run_command({GDW_BINARY, "version"});
  image.tag = version.out.substr(version.out.find(' ') + 1);
  image.tag = first_word(image.tag);
  return image;
}

// privileged: true — every capability runc 1.1 knows that this process may pass on (its
// bounding set, as a runtime's privileged containers get).
json all_capabilities() {
  std::uint64_t bounding = 0;
  const std::string status = read_file("/proc/self/status");
  if (auto at = status.find("CapBnd:"); at != std::string::npos) bounding = std::stoull(status.substr(at + 7), nullptr, 16);
  json caps = json::array();
  int bit = 0;
  for (const char* c : {"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
                        "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
                        "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
                        "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
                        "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
                        "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE"})
    if (bounding & (std::uint64_t{1} << bit++)) caps.push_back(std::string("CAP_") + c);
  return caps;
}

json bind_mount(const std::string& source, const std::string& destination, bool read_only) {
  json options = {"rbind", "rslave", read_only ? "ro" : "rw"};
  return {{"destination", destination}, {"type", "bind"}, {"source", source}, {"options", options}};
}

// The DaemonSet's pod spec, as runc config.json edits of the image's own (umoci unpack).
void make_daemonset_like(json& spec, const SandboxNode& node, const std::string& config_dir,
                         const std::string& cgroups_path) {
  spec["process"]["terminal"] = false;
  spec["process"]["user"] = {{"uid", 0}, {"gid", 0}};  // runAsUser: 0
  for (const char* set : {"bounding", "effective", "permitted", "inheritable"})
    spec["process"]["capabilities"][set] = all_capabilities();
  spec["process"]["noNewPrivileges"] = false;
  spec["process"].erase("apparmorProfile");
  spec["root"]["readonly"] = true;  // readOnlyRootFilesystem: true

  json namespaces = json::array();  // hostPID: true; no cgroup namespace (v1 runtimes)
  for (const auto& ns : spec["linux"]["namespaces"])
    if (ns["type"] != "pid" && ns["type"] != "cgroup" && ns["type"] != "network") namespaces.push_back(ns);
  namespaces.push_back({{"type", "network"}});  // hostNetwork: false
  spec["linux"]["namespaces"] = namespaces;
  spec["linux"].erase("seccomp");
  spec["linux"]["maskedPaths"] = json::array();
  spec["linux"]["readonlyPaths"] = json::array();
  spec["linux"]["resources"] = {{"devices", {{{"allow", true}, {"access", "rwm"}}}}};
  spec["linux"]["cgroupsPath"] = cgroups_path;

  json mounts = json::array();
  for (auto m : spec["mounts"]) {
    if (m["destination"] == "/sys/fs/cgroup") continue;
    if (m["destination"] == "/sys") m["options"] = {"nosuid", "noexec", "nodev", "rw"};  // privileged
    mounts.push_back(m);
  }
  const std::string kubelet_dir = fs::path(node.device_plugins_dir()).parent_path();
  mounts.push_back({{"destination", "/tmp"}, {"type", "tmpfs"}, {"source", "tmpfs"},
                    {"options", {"nosuid", "nodev", "size=16m"}}});
  mounts.push_back(bind_mount(config_dir, "/etc/gpu-devwatch", true));
  mounts.push_back(bind_mount("/sys/fs/cgroup", "/sys/fs/cgroup", false));
  mounts.push_back(bind_mount(kubelet_dir, kubelet_dir, true));
  mounts.push_back(bind_mount(node.state_dir(), node.state_dir(), true));
  mounts.push_back(bind_mount(node.proc_root(), "/host/proc", true));
  mounts.push_back(bind_mount(node.dev_root(), "/host/dev", true));
  mounts.push_back(bind_mount("/sys/kernel/btf", "/sys/kernel/btf", true));
  spec["mounts"] = mounts;
}

// The ConfigMap's keys (dev_root /host/dev, proc_root /host/proc, metrics on 0.0.0.0:9477)
// plus where this node's kubepods, checkpoint and bundles are.
std::string daemonset_config(const SandboxNode& node, CgroupSandbox& cgroups) {
  const std::string root = cgroups.hierarchy_root().substr(0, cgroups.hierarchy_root().rfind('/'));
  return "mode: enforce\ncgroup:\n  root: " + root + "\n  version: v1\n  kubepods: " + node.kubepods_rel() +
         "\nkubelet:\n  checkpoint: " + node.checkpoint_path() + "\n  device_plugins_dir: " +
         node.device_plugins_dir() + "\n  pod_resources_socket: " + node.pod_resources_socket() +
         "\nruntime:\n  state_dirs: [" + node.state_dir() +
         "]\ndevices:\n  dev_root: /host/dev\n  proc_root: /host/proc\n  nvml_library: /nonexistent/libnvidia-ml.so.1\n"
         "metrics:\n  listen: 0.0.0.0:9477\nlog:\n  level: debug\n";
}

class ImageUnderRunc : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!SandboxNode::available()) GTEST_SKIP() << "needs root and a writable cgroup v1 devices hierarchy";
    if (!RuncContainer::available()) GTEST_SKIP() << "runc is not installed (scripts/install-deps.sh)";
    if (run_command({"sh", "-c", "command -v umoci && command -v debootstrap"}).exit_code != 0)
      FAIL() << "umoci or debootstrap is not installed: run scripts/install-deps.sh";
    image_ = ensure_image();
    if (image_.download_failed) GTEST_SKIP() << image_.error;
    ASSERT_TRUE(image_.error.empty()) << image_.error;
  }
  void TearDown() override {
    if (!id_.empty()) {
      run_command({"runc", "--root", runc_root_.path(), "kill", id_, "KILL"});
      if (daemon_) daemon_->wait(10s);
      run_command({"runc", "--root", runc_root_.path(), "delete", "--force", id_});
    }
    daemon_.reset();
    // runc made the daemon's cgroup in every v1 controller, below the sandbox's name.
    if (node_) {
      for (const char* ctrl : {"cpu", "cpuacct", "cpuset", "memory", "freezer", "blkio", "pids", "net_cls", "perf_event",
                               "hugetlb", "rdma", "misc", "systemd", "unified"})
        remove_cgroup_tree(std::string("/sys/fs/cgroup/") + ctrl + "/" + node_->cgroups().name());
    }
  }

  BuiltImage image_;
  std::unique_ptr<SandboxNode> node_;
  TempDir work_{"gdw-image"};
  TempDir runc_root_{"gdw-image-runc"};
  std::string id_;
  std::unique_ptr<BackgroundProcess> daemon_;
};

TEST_F(ImageUnderRunc, TheImagesDaemonRepairsARevokedGpuLikeTheDaemonSet) {
  node_ = std::make_unique<SandboxNode>();
  const auto& gpu = node_->add_container(
      {.pod_namespace = "ml", .pod_name = "trainer-0", .container_name = "trainer", .device_ids = {node_->gpu_uuid(0)}});
  node_->write_checkpoint();
  ASSERT_EQ(node_->open_errno(gpu, "nvidia0"), ENXIO) << "the hook granted the GPU at creation";

  const std::string bundle = work_ / "bundle";
  auto unpacked = run_command(
      {"umoci", "unpack", "--image", image_.layout + ":" + image_.tag + "-" + kHostArch, bundle}, 120s);
  ASSERT_EQ(unpacked.exit_code, 0) << unpacked.out << unpacked.err;
  json spec = json::parse(read_file(bundle + "/config.json"));
  EXPECT_EQ(spec["process"]["args"],
            json({"/usr/local/bin/gpu-devwatch", "run", "--config", "/etc/gpu-devwatch/gpu-devwatch.yaml"}))
      << "the image's entry point is the DaemonSet's command";
  const std::string shipped = read_file(bundle + "/rootfs/etc/gpu-devwatch/gpu-devwatch.yaml");
  EXPECT_TRUE(shipped == read_file(std::string(GDW_SOURCE_DIR) + "/config/gpu-devwatch.yaml"))
      << "the image's /etc/gpu-devwatch/gpu-devwatch.yaml is not config/gpu-devwatch.yaml";

  work_.write("config/gpu-devwatch.yaml", daemonset_config(*node_, node_->cgroups()));
  make_daemonset_like(spec, *node_, work_ / "config", "/" + node_->cgroups().name() + "/gpu-devwatch-daemon");
  write_file(bundle + "/config.json", spec.dump(2));

  id_ = "gpu-devwatch-" + random_hex(8);
  daemon_ = std::make_unique<BackgroundProcess>(
      std::vector<std::string>{"runc", "--root", runc_root_.path(), "run", "--bundle", bundle, id_});
  ASSERT_TRUE(daemon_->wait_for_output(" ready", 30s)) << daemon_->output();

  ASSERT_EQ(node_->cgroups().deny(gpu.cgroup_rel, "c 195:0 rw"), 0);  // the GPU revoked
  EXPECT_TRUE(eventually([&] { return node_->open_errno(gpu, "nvidia0") == ENXIO; }, 10s)) << daemon_->output();
  EXPECT_TRUE(daemon_->wait_for_output("granted back nvidia0")) << daemon_->output();
  EXPECT_EQ(node_->open_errno(gpu, "nvidia1"), EPERM) << "never more than the allocation";

  // Metrics on the pod network: the container's own network namespace, port 9477.
  auto state = run_command({"runc", "--root", runc_root_.path(), "state", id_});
  ASSERT_EQ(state.exit_code, 0) << state.err;
  const std::string pid = std::to_string(json::parse(state.out)["pid"].get<int>());
  auto scraped = run_command({"nsenter", "-t", pid, "-n", "curl", "-sf", "http://127.0.0.1:9477/metrics"});
  ASSERT_EQ(scraped.exit_code, 0) << scraped.err;
  EXPECT_GE(metric_value(scraped.out, "gpu_devwatch_regrants_total", {{"result", "success"}}).value_or(0), 1);
  EXPECT_EQ(metric_value(scraped.out, "gpu_devwatch_build_info", {{"version", image_.tag}}), 1) << scraped.out;
}

// What a registry gets from `skopeo copy --all`: tag <version> is an OCI image index with
// one image per architecture, each with its platform; each image's config says the same
// architecture; unpacked, each runs its own binary in its own root (`chroot`: only the
// image's libraries), arm64 under qemu-user, and says the version of the binary it was
// built from.
TEST_F(ImageUnderRunc, TheIndexHasAnImagePerArchitectureAndEachRunsItsVersion) {
  if (image_.arches.size() < 2)
    GTEST_SKIP() << "no arm64 cross-build beside this amd64 one: scripts/build.sh --arch arm64 (scripts/test.sh "
                    "builds it)";
  auto blob = [&](const std::string& digest) {
    return json::parse(read_file(image_.layout + "/blobs/sha256/" + digest.substr(digest.find(':') + 1)));
  };
  const json top = json::parse(read_file(image_.layout + "/index.json"));
  json index_descriptor;
  std::map<std::string, std::string> tag_digests;  // "<version>-<arch>" -> manifest digest
  for (const auto& d : top["manifests"]) {
    const std::string name = d["annotations"].value("org.opencontainers.image.ref.name", "");
    if (name == image_.tag) index_descriptor = d;
    tag_digests[name] = d["digest"];
  }
  ASSERT_FALSE(index_descriptor.is_null()) << "no tag " << image_.tag << " in " << top.dump(2);
  EXPECT_EQ(index_descriptor["mediaType"], "application/vnd.oci.image.index.v1+json");
  const json index = blob(index_descriptor["digest"]);
  ASSERT_EQ(index["manifests"].size(), 2u) << index.dump(2);

  std::set<std::string> seen;
  for (const auto& m : index["manifests"]) {
    const std::string arch = m["platform"]["architecture"];
    SCOPED_TRACE(arch);
    seen.insert(arch);
    EXPECT_EQ(m["platform"]["os"], "linux");
    EXPECT_EQ(m["mediaType"], "application/vnd.oci.image.manifest.v1+json");
    EXPECT_EQ(m["digest"], tag_digests[image_.tag + "-" + arch]) << "the index's image is the tag's";
    const json config = blob(blob(m["digest"])["config"]["digest"]);
    EXPECT_EQ(config["architecture"], arch);
    EXPECT_EQ(config["config"]["Entrypoint"], json({"/usr/local/bin/gpu-devwatch"}));

    const std::string bundle = work_ / ("bundle-" + arch);
    auto unpacked = run_command({"umoci", "unpack", "--image", image_.layout + ":" + image_.tag + "-" + arch, bundle}, 120s);
    ASSERT_EQ(unpacked.exit_code, 0) << unpacked.out << unpacked.err;
    auto file = run_command({"readelf", "-h", bundle + "/rootfs/usr/local/bin/gpu-devwatch"});
    EXPECT_NE(file.out.find(arch == "arm64" ? "AArch64" : "X86-64"), std::string::npos) << file.out;
    auto ran = run_command({"chroot", bundle + "/rootfs", "/usr/local/bin/gpu-devwatch", "--version"}, 60s);
    EXPECT_EQ(ran.exit_code, 0) << ran.out << ran.err;
    const std::string built_from = arch == kHostArch ? GDW_BINARY : arm64_binary();
    auto expected = run_command({built_from, "version"});
    EXPECT_EQ(ran.out, expected.out) << "the image's binary is the one it was built from";
    EXPECT_EQ(ran.out.rfind("gpu-devwatch " + image_.tag + " ", 0), 0u) << ran.out;
  }
  EXPECT_EQ(seen, (std::set<std::string>{"amd64", "arm64"}));
}

}  // namespace
}  // namespace gdw::test
