// Repair latency of `gpu-devwatch run` on the real kernel, against a 1-second polling
// re-apply loop (what people write by hand today), in the same run.
//
// For 10, 100 and 500 watched containers: time from a revoking write (devices.deny of the
// GPU rule) to the grant visible in devices.list, over many revocations; the daemon's RSS
// and CPU time idle and under that load; the duration of a full resync: periodic
// ("resync"), after SIGHUP with the configuration unchanged ("reload") and the first, cold
// one ("startup": every bundle parsed, every watch added). The daemon runs with its default
// configuration (probe on, info logs, the default fight-loop guard).
//
//   build/bench/repair_latency (as root) [--containers 10,100,500] [--revocations 1000]
#include <signal.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "backend/devices_v1_files.h"
#include "core/device_rule.h"
#include "bench_node.h"
#include "bench_stats.h"
#include "support/daemon_harness.h"

using namespace gdw;
using namespace gdw::test;
using Clock = std::chrono::steady_clock;
using gdw::bench::rss_mib;

namespace {

struct CpuSample {
  double cpu_seconds;
  Clock::time_point at;
};

CpuSample cpu_of(pid_t pid) { return {gdw::bench::cpu_seconds(pid), Clock::now()}; }

double cpu_percent(const CpuSample& a, const CpuSample& b) {
  return 100.0 * (b.cpu_seconds - a.cpu_seconds) / std::chrono::duration<double>(b.at - a.at).count();
}

struct Percentiles {
  double p50, p99, max;
};

Percentiles percentiles(const std::vector<double>& v) {
  return {gdw::bench::pct(v, 0.50), gdw::bench::pct(v, 0.99), gdw::bench::pct(v, 1)};
}

std::uint32_t gpu_minor(const SandboxNode& node, const SandboxContainer& c) {
  return c.spec.device_ids[0] == node.gpu_uuid(0) ? 0 : 1;
}

bool gpu_allowed(const SandboxContainer& c, std::uint32_t minor) {
  DevicesV1Files per_call(0);
  auto raw = per_call.read_list(c.cgroup_dir);
  if (!raw) return false;
  auto list = parse_devices_list(*raw);
  return list.ok() &&
         device_list_allows(*list, {DeviceType::kChar, 195, minor}, kAccessReadWrite);
}

// Watches every container's devices.allow: the repairer's grant shows up as IN_MODIFY.
class GrantWatcher {
 public:
  explicit GrantWatcher(const std::list<SandboxContainer>& containers) : fd_(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK)) {
    for (const auto& c : containers) by_wd_[::inotify_add_watch(fd_, (c.cgroup_dir + "/devices.allow").c_str(), IN_MODIFY)] = &c;
  }
  ~GrantWatcher() { ::close(fd_); }
  void drain() {
    char buf[65536];
    while (::read(fd_, buf, sizeof buf) > 0) {
    }
  }
  // Waits up to `timeout` for grant events; returns the containers written to.
  std::vector<const SandboxContainer*> wait(std::chrono::milliseconds timeout) {
    std::vector<const SandboxContainer*> out;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return out;
    alignas(inotify_event) char buf[65536];
    ssize_t n = ::read(fd_, buf, sizeof buf);
    for (char* q = buf; n > 0 && q < buf + n;) {
      auto* ev = reinterpret_cast<inotify_event*>(q);
      if (auto it = by_wd_.find(ev->wd); it != by_wd_.end()) out.push_back(it->second);
      q += sizeof(inotify_event) + ev->len;
    }
    return out;
  }

 private:
  int fd_;
  std::map<int, const SandboxContainer*> by_wd_;
};

// Sequential: revoke one container, wait until its GPU is allowed again.
std::vector<double> measure_sequential(SandboxNode& node, int revocations) {
  std::vector<const SandboxContainer*> all;
  for (const auto& c : node.containers()) all.push_back(&c);
  GrantWatcher watcher(node.containers());
  std::mt19937 rng(7);
  std::vector<double> us;
  for (int i = 0; i < revocations; ++i) {
    const SandboxContainer& c = *all[rng() % all.size()];
    const std::uint32_t minor = gpu_minor(node, c);
    watcher.drain();
    const auto t0 = Clock::now();
    node.cgroups().deny(c.cgroup_rel, "c 195:" + std::to_string(minor) + " rw");
    for (;;) {
      watcher.wait(std::chrono::milliseconds(100));
      if (gpu_allowed(c, minor)) break;
      if (Clock::now() - t0 > std::chrono::seconds(5)) {
        std::fprintf(stderr, "no repair within 5 s for %s\n", c.cgroup_dir.c_str());
        break;
      }
    }
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return us;
}

// The hand-written alternative: every second, re-grant the GPU to every container.
pid_t start_polling_loop(const SandboxNode& node) {
  std::vector<std::pair<std::string, std::uint32_t>> targets;
  for (const auto& c : node.containers()) targets.emplace_back(c.cgroup_dir, gpu_minor(node, c));
  pid_t pid = ::fork();
  if (pid == 0) {
    DevicesV1Files per_call(0);  // what a shell loop does: open, write, close
    for (;;) {
      for (const auto& [dir, minor] : targets)
        per_call.write_grants(dir, {DeviceRule{DeviceType::kChar, 195, minor, kAccessReadWrite}});
      ::sleep(1);
    }
  }
  return pid;
}

// Concurrent: revocations at random moments, each timed until its grant is visible.
std::vector<double> measure_spread(SandboxNode& node, int revocations, std::chrono::milliseconds spread) {
  std::vector<const SandboxContainer*> all;
  for (const auto& c : node.containers()) all.push_back(&c);
  GrantWatcher watcher(node.containers());
  std::mt19937 rng(11);
  std::map<const SandboxContainer*, Clock::time_point> pending;
  std::vector<double> us;
  const auto gap = spread / revocations;
  auto next = Clock::now();
  int issued = 0;
  while (issued < revocations || !pending.empty()) {
    if (issued < revocations && Clock::now() >= next) {
      const SandboxContainer* c = all[rng() % all.size()];
      if (!pending.count(c)) {
        pending[c] = Clock::now();
        node.cgroups().deny(c->cgroup_rel, "c 195:" + std::to_string(gpu_minor(node, *c)) + " rw");
        ++issued;
      }
      next += gap;
    }
    for (const SandboxContainer* c : watcher.wait(std::chrono::milliseconds(5))) {
      auto it = pending.find(c);
      if (it != pending.end() && gpu_allowed(*c, gpu_minor(node, *c))) {
        us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - it->second).count());
        pending.erase(it);
      }
    }
  }
  return us;
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::stoi(item));
  return v;
}

struct Options {
  std::vector<int> sizes = {10, 100, 500};
  int revocations = 1000;
  int poll_samples = 100;
  int profile_seconds = 0;  // > 0: resync every 20 ms for this long, pid printed (perf record -p)
};

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--containers") o.sizes = parse_list(argv[i + 1]);
    if (a == "--revocations") o.revocations = std::stoi(argv[i + 1]);
    if (a == "--poll-samples") o.poll_samples = std::stoi(argv[i + 1]);
    if (a == "--profile-resync") o.profile_seconds = std::stoi(argv[i + 1]);
  }
  return o;
}

// Full resyncs, as the daemon's own histogram times them: the first (cold, at startup),
// after a SIGHUP with the configuration unchanged, and periodic ones (SIGUSR1 runs the
// same code: bundles and allocations cached, every container's devices.list read).
struct ResyncTimes {
  double periodic_ms = 0, reload_ms = 0, startup_ms = 0;
};

ResyncTimes measure_resyncs(DaemonHarness& daemon, int profile_seconds) {
  const auto sum = [&] { return daemon.metric("gpu_devwatch_resync_duration_seconds_sum") * 1000; };
  const auto count = [&] { return daemon.metric("gpu_devwatch_resync_duration_seconds_count"); };
  ResyncTimes t;
  t.startup_ms = sum();
  daemon.process().signal(SIGHUP);
  eventually([&] { return count() >= 2; }, std::chrono::seconds(10));
  t.reload_ms = sum() - t.startup_ms;
  const double before_sum = sum(), before_count = count();
  for (int i = 0; i < 5; ++i) {
    daemon.process().signal(SIGUSR1);
    eventually([&] { return count() >= before_count + i + 1; }, std::chrono::seconds(5));
  }
  if (profile_seconds > 0) {
    std::printf("profiling: daemon pid %d resyncs every 20 ms for %d s\n", daemon.process().pid(), profile_seconds);
    std::fflush(stdout);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(profile_seconds);
    while (std::chrono::steady_clock::now() < end) {
      daemon.process().signal(SIGUSR1);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  t.periodic_ms = (sum() - before_sum) / (count() - before_count);
  return t;
}

// The daemon with its default configuration on `n` GPU containers: one row. false: it
// did not start.
bool bench_daemon(SandboxNode& node, int n, const Options& o) {
  DaemonHarness daemon(node);
  if (!daemon.start_with_defaults()) {
    std::fprintf(stderr, "daemon did not start:\n%s\n", daemon.output().c_str());
    return false;
  }
  const pid_t pid = daemon.process().pid();
  const ResyncTimes resync = measure_resyncs(daemon, o.profile_seconds);

  std::this_thread::sleep_for(std::chrono::seconds(1));
  auto idle0 = cpu_of(pid);
  std::this_thread::sleep_for(std::chrono::seconds(5));
  auto idle1 = cpu_of(pid);
  const double rss_idle = rss_mib(pid);

  auto load0 = cpu_of(pid);
  auto seq = measure_sequential(node, o.revocations);
  auto load1 = cpu_of(pid);
  const double rss_load = rss_mib(pid);
  auto d = percentiles(seq);
  std::printf("%-10d %-22s %8.0f %8.0f %8.0f %10.1f %10.1f %10.1f %7.1fMB %7.1fMB %8.2f%% %8.1f%%\n", n, "gpu-devwatch",
              d.p50, d.p99, d.max, resync.periodic_ms, resync.reload_ms, resync.startup_ms, rss_idle, rss_load,
              cpu_percent(idle0, idle1), cpu_percent(load0, load1));
  std::fflush(stdout);
  daemon.stop();
  if (o.poll_samples <= 0) return true;  // --poll-samples 0: the daemon's figures only
  // The 1-second polling loop, same node, same revocations (fewer: each waits ~0.5 s).
  pid_t poller = start_polling_loop(node);
  auto polled = measure_spread(node, o.poll_samples, std::chrono::milliseconds(o.poll_samples * 50));
  ::kill(poller, SIGKILL);
  ::waitpid(poller, nullptr, 0);
  auto p = percentiles(polled);
  std::printf("%-10d %-22s %8.0f %8.0f %8.0f %10s %10s %10s %9s %9s %9s %9s\n", n, "1 s polling loop", p.p50, p.p99,
              p.max, "-", "-", "-", "-", "-", "-", "-");
  std::printf("%-10d %-22s %7.0fx %7.0fx\n", n, "polling / gpu-devwatch", p.p50 / d.p50, p.p99 / d.p99);
  std::fflush(stdout);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  if (!SandboxNode::available()) {
    std::fprintf(stderr, "repair_latency: needs root and a writable cgroup v1 devices hierarchy\n");
    return 2;
  }
  std::printf("%-10s %-22s %8s %8s %8s %10s %10s %10s %9s %9s %9s %9s\n", "containers", "repairer", "p50 µs", "p99 µs",
              "max µs", "resync ms", "reload ms", "startup ms", "RSS idle", "RSS load", "CPU idle", "CPU load");
  for (int n : o.sizes) {
    SandboxNode node;
    gdw::bench::add_bench_containers(node, n, n, 2);  // every one a GPU container, on nvidia0 or nvidia1
    if (!bench_daemon(node, n, o)) return 1;
  }
  return 0;
}
