// The daemon's side of the node health monitor: the running containers (for the
// stale-checkpoint remediation's "never while a container holds a named device" rule), and
// READY=1 once the allocation records the monitor fetches are in.
#include <fcntl.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "log/log.h"
#include "memory/resident_pages.h"
#include "service/daemon.h"

namespace gdw {
namespace {

// Whether a cgroup has a process in it: the first bytes of cgroup.procs (cgroupfs, never
// blocking). An unreadable file counts as occupied: in doubt the remediation waits.
bool has_processes(const std::string& cgroup_dir) {
  const int fd = ::open((cgroup_dir + "/cgroup.procs").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno != ENOENT;
  char buf[32];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  return n != 0;
}

}  // namespace

std::vector<RunningContainer> Daemon::running_containers() const {
  std::vector<RunningContainer> running;
  for (const auto& [dir, w] : containers_) {
    RunningContainer c;
    c.pod_uid = w.cgroup.pod.pod_uid;  // the cgroup path's: the kernel enforces it
    if (w.target.identity && !w.target.identity_conflict) c.container_name = w.target.identity->container_name;
    c.has_processes = has_processes(dir);
    running.push_back(std::move(c));
  }
  return running;
}

}  // namespace gdw

namespace gdw {

void Daemon::notify_ready_when_settled() {
  if (!ready_ || ready_notified_ || (health_ && !health_->first_answers_in())) return;
  ready_notified_ = true;
  const auto gpu_containers = std::count_if(containers_.begin(), containers_.end(), [](const auto& kv) {
    return kv.second.target.kind == TargetKind::kGpu;
  });
  sd_notifyf(0, "READY=1\nSTATUS=watching %zu GPU container(s); eBPF probe %s",
             static_cast<std::size_t>(gpu_containers), probe_->status().c_str());
  log::info("ready");
  // Startup (linking ~100 libraries, the first resync, the first PodResources answer) is
  // done: what only it touched need not stay resident (memory/resident_pages.h).
  if (auto released = release_startup_memory(); !released)
    log::warn("keeping startup memory resident: " + released.error().message);
  else
    log::debug("released " + std::to_string(released->file_kib) + " KiB of startup-only file pages");
}

}  // namespace gdw
