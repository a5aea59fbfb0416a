#include "support/nspawn_systemd.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "support/cgroup_sandbox.h"
#include "support/temp_dir.h"

namespace gdw::test {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kNspawnRunDir = "/run/systemd/nspawn";

std::string read_or_empty(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  return s;
}

std::string tail(const std::string& s, std::size_t n) { return s.size() <= n ? s : "…" + s.substr(s.size() - n); }

bool on_path(const std::string& tool) {
  return run_command({"sh", "-c", "command -v " + tool}, 10s).exit_code == 0;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, sep)) parts.push_back(part);
  return parts;
}

bool has_controller(const std::string& controllers, const std::string& controller) {
  const auto list = split(controllers, ',');
  return std::find(list.begin(), list.end(), controller) != list.end();
}

// Unmounts whatever is still mounted below `dir` (debootstrap mounts /proc and /sys in its
// target while it runs), then removes the tree without crossing into another file system.
void remove_build_tree(const std::string& dir) {
  std::vector<std::string> mount_points;
  std::istringstream mounts(read_or_empty("/proc/self/mounts"));
  std::string line;
  while (std::getline(mounts, line)) {
    auto fields = split(line, ' ');
    if (fields.size() > 1 && fields[1].rfind(dir + "/", 0) == 0) mount_points.push_back(fields[1]);
  }
  std::sort(mount_points.begin(), mount_points.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (const auto& m : mount_points) ::umount2(m.c_str(), MNT_DETACH);
  std::error_code ec;
  if (fs::exists(dir, ec)) run_command({"rm", "-rf", "--one-file-system", dir}, 120s);
}

bool looks_like_download_failure(const std::string& output) {
  for (const char* sign : {"Failed getting release file", "Couldn't download", "Failed getting", "Temporary failure",
                           "Could not resolve", "unable to resolve", "Network is unreachable", "Connection refused"}) {
    if (output.find(sign) != std::string::npos) return true;
  }
  return false;
}

// One cgroup hierarchy this process is in: where it is mounted and this process's place.
struct Hierarchy {
  std::string controllers;  // "devices", "name=systemd", "" for cgroup2
  std::string mount_point;
  std::string own_path;  // "/" or "/process_api/…"
};

std::vector<Hierarchy> hierarchies_of_self() {
  struct Mount {
    std::string point;
    std::string type;
    std::vector<std::string> options;
  };
  std::vector<Mount> mounts;
  std::istringstream mount_lines(read_or_empty("/proc/self/mounts"));
  std::string line;
  while (std::getline(mount_lines, line)) {
    auto f = split(line, ' ');
    if (f.size() >= 4 && (f[2] == "cgroup" || f[2] == "cgroup2")) mounts.push_back({f[1], f[2], split(f[3], ',')});
  }
  std::vector<Hierarchy> result;
  // Read once: /proc/self/cgroup changes as this process moves.
  std::istringstream cgroup_lines(read_or_empty("/proc/self/cgroup"));
  while (std::getline(cgroup_lines, line)) {
    const auto first = line.find(':');
    const auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    Hierarchy h{line.substr(first + 1, second - first - 1), "", line.substr(second + 1)};
    for (const auto& m : mounts) {
      bool match = false;
      if (h.controllers.empty()) {
        match = m.type == "cgroup2";
      } else if (m.type == "cgroup") {
        const auto wanted = split(h.controllers, ',');
        match = std::all_of(wanted.begin(), wanted.end(), [&](const std::string& c) {
          return std::find(m.options.begin(), m.options.end(), c) != m.options.end();
        });
      }
      if (match) {
        h.mount_point = m.point;
        break;
      }
    }
    if (!h.mount_point.empty()) result.push_back(h);
  }
  return result;
}

std::string cgroup2_mount_point() {
  for (const auto& h : hierarchies_of_self())
    if (h.controllers.empty()) return h.mount_point;
  return {};
}

std::string join_path(const std::string& a, const std::string& b) {
  std::string left = a;
  while (!left.empty() && left.back() == '/') left.pop_back();
  return b.empty() || b == "/" ? left : left + (b.front() == '/' ? "" : "/") + b;
}

// Field 22 of /proc/<pid>/stat: tells a process from a later one that reused its PID.
std::string start_time_of(pid_t pid) {
  const std::string stat = read_or_empty("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return {};
  auto fields = split(stat.substr(close + 2), ' ');
  return fields.size() > 19 ? fields[19] : std::string();
}

std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> kids;
  std::istringstream in(read_or_empty("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children"));
  pid_t kid = 0;
  while (in >> kid) kids.push_back(kid);
  return kids;
}

bool is_pid_namespace_init(pid_t pid) {
  std::istringstream in(read_or_empty("/proc/" + std::to_string(pid) + "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    std::istringstream ids(line.substr(6));
    std::vector<std::string> v;
    std::string id;
    while (ids >> id) v.push_back(id);
    return v.size() >= 2 && v.back() == "1";
  }
  return false;
}

bool cgroup_tree_empty(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return true;
  if (!trim(read_or_empty(dir + "/cgroup.procs")).empty()) return false;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_directory(ec) && !trim(read_or_empty(it->path().string() + "/cgroup.procs")).empty()) return false;
  }
  return true;
}

void sleep_for(std::chrono::milliseconds d) {
  struct timespec ts{static_cast<time_t>(d.count() / 1000), static_cast<long>((d.count() % 1000) * 1'000'000L)};
  nanosleep(&ts, nullptr);
}

}  // namespace

namespace {

// debootstrap --variant=minbase --include=<include> bookworm into <cache>/<name>, once.
BookwormRootfs ensure_cached_rootfs(const std::string& name, const std::string& include) {
  BookwormRootfs result;
  const char* cache_env = std::getenv("GDW_TEST_ROOTFS_CACHE");
  const std::string cache = cache_env != nullptr && *cache_env != '\0' ? cache_env : "/var/cache/gdw-test";
  const std::string final_dir = cache + "/" + name;
  const std::string marker = final_dir + "/.gdw-rootfs-complete";
  if (::access(marker.c_str(), F_OK) == 0) {
    result.path = final_dir;
    return result;
  }
  if (::geteuid() != 0) {
    result.unavailable = "building the bookworm rootfs needs root";
    return result;
  }
  if (!on_path("debootstrap")) {
    result.unavailable = "debootstrap is not installed (scripts/install-deps.sh installs it)";
    return result;
  }
  std::error_code ec;
  fs::create_directories(cache, ec);
  // One builder per machine; the others wait for it and then find the marker.
  const std::string lock_path = cache + "/" + name + ".lock";
  const int lock = ::open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (lock < 0 || ::flock(lock, LOCK_EX) != 0) {
    result.unavailable = "cannot lock " + lock_path + ": " + std::strerror(errno);
    if (lock >= 0) ::close(lock);
    return result;
  }
  struct LockGuard {
    int fd;
    ~LockGuard() { ::close(fd); }
  } guard{lock};
  if (::access(marker.c_str(), F_OK) == 0) {
    result.path = final_dir;
    return result;
  }
  // Leftovers of an interrupted build: never used, always rebuilt.
  const std::string partial = cache + "/" + name + ".partial";
  remove_build_tree(final_dir);
  remove_build_tree(partial);

  const auto start = Clock::now();
  auto built = run_command(
      {"debootstrap", "--variant=minbase", "--include=" + include, "bookworm", partial}, 240s);
  result.build_time = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  if (built.exit_code != 0) {
    const std::string output = built.out + built.err;
    result.download_failed = looks_like_download_failure(output);
    const std::string how =
        built.timed_out ? "took longer than 240 s" : "failed (exit " + std::to_string(built.exit_code) + ")";
    result.unavailable = "debootstrap bookworm " + how + ": " + tail(output, 1500);
    remove_build_tree(partial);
    return result;
  }
  write_file(partial + "/.gdw-rootfs-complete",
             "debootstrap --variant=minbase --include=" + include + " bookworm\n");
  if (::rename(partial.c_str(), final_dir.c_str()) != 0) {
    result.unavailable = "renaming " + partial + " to " + final_dir + ": " + std::strerror(errno);
    remove_build_tree(partial);
    return result;
  }
  result.path = final_dir;
  result.built_now = true;
  return result;
}

}  // namespace

BookwormRootfs ensure_bookworm_rootfs() { return ensure_cached_rootfs("bookworm-rootfs", "systemd,dbus,systemd-sysv"); }

BookwormRootfs ensure_bookworm_rootfs(const std::vector<std::string>& extra_packages) {
  std::vector<std::string> packages = {"systemd", "dbus", "systemd-sysv"};
  packages.insert(packages.end(), extra_packages.begin(), extra_packages.end());
  std::sort(packages.begin(), packages.end());
  packages.erase(std::unique(packages.begin(), packages.end()), packages.end());
  std::string include;
  for (const auto& p : packages) include += (include.empty() ? "" : ",") + p;
  char key[17];
  std::snprintf(key, sizeof key, "%016zx", std::hash<std::string>{}(include));
  return ensure_cached_rootfs(std::string("bookworm-rootfs-") + key, include);
}

std::string to_string(CgroupMode mode) { return mode == CgroupMode::kV1 ? "v1" : "v2"; }

std::string NspawnSystemd::unavailable_reason(CgroupMode mode) {
  if (::geteuid() != 0) return "needs root (cgroups, systemd-nspawn)";
  for (const char* tool : {"systemd-nspawn", "nsenter"}) {
    if (!on_path(tool)) return std::string(tool) + " is not installed (scripts/install-deps.sh installs it)";
  }
  bool has_devices = false;
  for (const auto& h : hierarchies_of_self()) has_devices = has_devices || has_controller(h.controllers, "devices");
  if (mode == CgroupMode::kV1 && !has_devices) return "no cgroup v1 devices hierarchy mounted";
  if (mode == CgroupMode::kV2 && cgroup2_mount_point().empty()) return "no cgroup2 hierarchy mounted";
  return {};
}

NspawnSystemd::NspawnSystemd(const std::string& rootfs, CgroupMode mode, std::chrono::milliseconds boot_timeout)
    : mode_(mode) {
  static std::atomic<int> counter{0};
  machine_ = "gdw-test-" + std::to_string(::getpid()) + "-nspawn-" + std::to_string(counter++);
  try {
    boot(rootfs, boot_timeout);
  } catch (const std::exception& e) {
    error_ = std::string("booting ") + machine_ + ": " + e.what();
  }
}

void NspawnSystemd::boot(const std::string& rootfs, std::chrono::milliseconds boot_timeout) {
  std::error_code ec;
  created_nspawn_run_dir_ = !fs::exists(kNspawnRunDir, ec);
  // nspawn makes the cgroup its launcher is in the container's root: give it one of ours
  // in every hierarchy, below where this process is (so limits set on us still apply).
  std::string procs_files;
  for (const auto& h : hierarchies_of_self()) {
    const std::string own = join_path(h.mount_point, h.own_path);
    const std::string dir = join_path(own, machine_);
    if (::mkdir(dir.c_str(), 0755) != 0) {
      error_ = "creating cgroup " + dir + ": " + std::strerror(errno);
      return;
    }
    parent_cgroups_.push_back(dir);
    if (has_controller(h.controllers, "cpuset")) {
      // A new cpuset cgroup starts with no CPUs and no memory nodes: nothing could join it.
      for (const char* file : {"cpuset.cpus", "cpuset.mems"}) {
        if (int err = write_kernel_file(dir + "/" + file, trim(read_or_empty(own + "/" + file))); err != 0) {
          error_ = "copying " + std::string(file) + " into " + dir + ": " + std::strerror(err);
          return;
        }
      }
    }
    procs_files += " " + dir + "/cgroup.procs";
  }

  std::vector<std::string> argv = {
      "/bin/sh", "-c",
      // The launcher joins the parents itself, then becomes systemd-nspawn (same PID).
      "for f in $GDW_CGROUP_PROCS; do echo $$ > \"$f\" || exit 125; done; exec \"$@\"", "gdw-nspawn-launcher",
      "systemd-nspawn", "--directory=" + rootfs, "--volatile=overlay", "--machine=" + machine_, "--register=no",
      "--keep-unit", "--private-network"};
  std::vector<std::string> env = {"GDW_CGROUP_PROCS=" + procs_files};
  if (mode_ == CgroupMode::kV1) {
    // nspawn mounts the v1 controllers read-only; systemd would then not write devices.*
    // and DeviceAllow= would silently not be enforced.
    argv.insert(argv.end(),
                {"/bin/sh", "-c", "mount -o remount,bind,rw /sys/fs/cgroup/devices && exec /lib/systemd/systemd"});
  } else {
    // nspawn's seccomp filter refuses BPF_PROG_LOAD; systemd needs CAP_BPF for its device
    // programs.
    env.insert(env.end(), {"SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1", "SYSTEMD_SECCOMP=0"});
    argv.insert(argv.end(), {"--capability=CAP_BPF,CAP_PERFMON", "--boot"});
  }

  const auto start = Clock::now();
  const auto deadline = start + boot_timeout;
  launcher_ = std::make_unique<BackgroundProcess>(argv, env);
  auto failed = [&](const std::string& what) { error_ = what + "; nspawn output:\n" + tail(console(), 3000); };

  while (leader_ <= 0) {
    if (!launcher_->running()) return failed("systemd-nspawn exited before the container started");
    if (Clock::now() > deadline) return failed("no container PID 1 within the boot timeout");
    for (pid_t kid : children_of(launcher_->pid()))
      if (is_pid_namespace_init(kid)) leader_ = kid;
    if (leader_ <= 0) sleep_for(10ms);
  }
  leader_start_time_ = start_time_of(leader_);

  while (::access(root_path("/run/dbus/system_bus_socket").c_str(), F_OK) != 0) {
    if (!launcher_->running()) return failed("systemd-nspawn exited during boot");
    if (Clock::now() > deadline) return failed("no system bus socket in the container within the boot timeout");
    sleep_for(10ms);
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  auto state =
      run_inside({"systemctl", "is-system-running", "--wait"}, std::max(left, std::chrono::milliseconds(1000)));
  const std::string reached = trim(state.out);
  if (reached != "running" && reached != "degraded") {
    return failed("systemd did not finish starting (is-system-running: '" + reached + "', " + trim(state.err) + ")");
  }
  boot_time_ = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
}

NspawnSystemd::~NspawnSystemd() {
  stop_container();
  scopes_.clear();  // nsenter processes: ended with the container, reaped here
  launcher_.reset();
  // Deepest first, in every hierarchy; killed processes leave their cgroups a moment after
  // they are reaped, so wait until nothing is left inside.
  for (const auto& dir : parent_cgroups_) {
    eventually([&] { return cgroup_tree_empty(dir); }, 10s);
    remove_cgroup_tree(dir);
  }
  // nspawn's per-machine runtime entries (normally removed by nspawn itself), and the
  // shared directories only when this object created them and they are empty now.
  for (const char* sub : {"/propagate/", "/unix-export/"}) remove_tree(std::string(kNspawnRunDir) + sub + machine_);
  if (created_nspawn_run_dir_) {
    for (const char* sub : {"/locks", "/propagate", "/unix-export", ""})
      ::rmdir((std::string(kNspawnRunDir) + sub).c_str());
  }
}

void NspawnSystemd::stop_container() {
  if (!launcher_) return;
  if (launcher_->running()) {
    // SIGTERM: nspawn asks the container's systemd to power off and waits for it.
    launcher_->signal(SIGTERM);
    if (launcher_->wait(10s) == -2) {
      launcher_->signal(SIGKILL);
      launcher_->wait(5s);
    }
  }
  // Killing nspawn does not end the container: its PID 1 (ours, verified by start time)
  // takes the whole PID namespace with it.
  if (leader_ > 0 && !leader_start_time_.empty() && start_time_of(leader_) == leader_start_time_) {
    ::kill(leader_, SIGKILL);
    eventually([&] { return start_time_of(leader_) != leader_start_time_; }, 5s);
  }
}

std::string NspawnSystemd::bus_address() const { return "unix:path=" + root_path("/run/dbus/system_bus_socket"); }

std::string NspawnSystemd::root_path(const std::string& path_inside) const {
  return "/proc/" + std::to_string(leader_) + "/root" + path_inside;
}

CommandResult NspawnSystemd::run_inside(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) const {
  std::vector<std::string> full = {"nsenter", "-t", std::to_string(leader_), "-a"};
  full.insert(full.end(), argv.begin(), argv.end());
  return run_command(full, timeout);
}

pid_t NspawnSystemd::start_scope(const std::string& unit, const std::string& slice,
                                 const std::vector<std::string>& properties, const std::vector<std::string>& argv,
                                 std::string* why) {
  std::vector<std::string> full = {"nsenter", "-t", std::to_string(leader_), "-a", "systemd-run", "--scope",
                                   "--unit=" + unit, "--slice=" + slice};
  for (const auto& p : properties) full.insert(full.end(), {"-p", p});
  full.push_back("--");
  full.insert(full.end(), argv.begin(), argv.end());
  scopes_.push_back(std::make_unique<BackgroundProcess>(full));
  BackgroundProcess& nsenter = *scopes_.back();
  const std::string leaf = unit.ends_with(".scope") ? unit : unit + ".scope";
  pid_t scope_pid = 0;
  // nsenter forks the process that enters the PID namespace; systemd-run then execs the
  // command in place once systemd has moved it into the scope.
  const bool started = eventually(
      [&] {
        for (pid_t kid : children_of(nsenter.pid())) {
          if (device_cgroup_of(kid).ends_with("/" + leaf)) scope_pid = kid;
        }
        return scope_pid > 0 || !nsenter.running();
      },
      15s);
  if (scope_pid > 0) return scope_pid;
  if (why != nullptr) {
    *why = "systemd-run --scope --unit=" + unit + (started ? " exited" : " did not start within 15 s") + ": " +
           tail(nsenter.output(), 1500);
  }
  return 0;
}

std::string NspawnSystemd::device_cgroup_of(pid_t pid) const {
  const std::string wanted = mode_ == CgroupMode::kV1 ? "devices" : "";
  std::string mount_point;
  for (const auto& h : hierarchies_of_self()) {
    if (wanted.empty() ? h.controllers.empty() : has_controller(h.controllers, wanted)) mount_point = h.mount_point;
  }
  if (mount_point.empty()) return {};
  std::istringstream in(read_or_empty("/proc/" + std::to_string(pid) + "/cgroup"));
  std::string line;
  while (std::getline(in, line)) {
    const auto first = line.find(':');
    const auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const bool match = wanted.empty() ? line.substr(0, first) == "0" && second == first + 1
                                      : has_controller(line.substr(first + 1, second - first - 1), wanted);
    if (match) return join_path(mount_point, line.substr(second + 1));
  }
  return {};
}

int open_errno_in_cgroup(const std::string& cgroup_dir, const std::string& node) {
  const std::string procs = cgroup_dir + "/cgroup.procs";
  pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    // Only async-signal-safe calls between fork and _exit. "0" moves the writer itself.
    int fd = ::open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0 || ::write(fd, "0", 1) != 1) _exit(255);
    ::close(fd);
    int node_fd = ::open(node.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
    _exit(node_fd >= 0 ? 0 : (errno & 0xff));
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) == 255) return -1;
  return WEXITSTATUS(status);
}

}  // namespace gdw::test
