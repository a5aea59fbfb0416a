// The container table's life cycle: containers appear (resolved to who they are and what
// they must have), change (re-resolved when an input changes), are checked, and go.
#include <sys/inotify.h>
#include <sys/stat.h>

#include "log/log.h"
#include "service/arm_timer.h"
#include "service/daemon.h"

namespace gdw {
namespace {

using std::chrono::duration_cast;
using std::chrono::microseconds;

// After a container cgroup appears, its bundle should already exist; if not (a runtime
// that writes config.json late), look again a few times before leaving it to the resync.
constexpr Clock::duration kIdentifyRetry[] = {std::chrono::milliseconds(10), std::chrono::milliseconds(100),
                                              std::chrono::milliseconds(1000), std::chrono::milliseconds(5000)};

}  // namespace

void Daemon::upsert_container(const DiscoveredContainer& cg, bool check_new) {
  auto [w, inserted] = containers_.upsert(cg, config_);
  if (inserted) {
    struct stat st{};
    if (::stat(cg.cgroup_dir.c_str(), &st) == 0) {
      // Known by its cgroup id from now on: a write to it is kept for attribution even
      // before it is known as a GPU container (attribution.cpp).
      containers_.set_cgroup_id(w, st.st_ino);
      // "Pods stuck before allocation": containers keep starting while the checkpoint
      // (written at every allocation) does not move.
      const double started = static_cast<double>(st.st_ctim.tv_sec) + st.st_ctim.tv_nsec / 1e9;
      if (started > newest_container_start_) {
        newest_container_start_ = started;
        metrics_.set_newest_container_start(started);
      }
    }
  }
  resolve(w, /*force=*/false);
  if (inserted && w.target.kind == TargetKind::kUnidentified && node_->allocations().pod_has_devices(cg.pod.pod_uid)) {
    schedule_retry(w, kIdentifyRetry[0], Clock::now());
  }
  // A container seen for the first time is checked at once (seed 001: created without
  // nvidia-uvm in its spec). Its watches exist already, so no later write is missed.
  if (inserted && ready_ && w.is_gpu() && check_new) check_and_repair(w, Clock::now());
}

void Daemon::resolve(Watched& w, bool force) {
  if (!force && w.resolved_generation == node_->generation()) return;
  apply_target(w, node_->resolve(w.cgroup));
  w.resolved_generation = node_->generation();
}

void Daemon::apply_target(Watched& w, ContainerTarget target) {
  const bool was_gpu = w.is_gpu();
  w.target = std::move(target);
  if (w.target.identity) {
    ContainerLabels labels{w.target.identity->pod_namespace, w.target.identity->pod_name,
                           w.target.identity->container_name};
    if (labels != w.labels && !w.labels.pod.empty()) metrics_.forget(w.labels);
    w.labels = labels;
  }
  const bool is_gpu = w.is_gpu();
  if (is_gpu && w.cgroup_id == 0) {
    struct stat st{};
    if (::stat(w.cgroup.cgroup_dir.c_str(), &st) == 0) containers_.set_cgroup_id(w, st.st_ino);
  }
  if (is_gpu) probe_->watch(w);
  if (is_gpu && !w.watching) {
    start_watching(w);
  } else if (!is_gpu && was_gpu) {
    stop_watching(w);
  }
  // Exposure and env-only GPUs (node/exposure.h, core/env_visible.h): per resolve, not per repair.
  if (w.target.identity)
    metrics_.set_container_exposure(w.labels, is_gpu ? std::optional(w.target.exposure.exposed.size()) : std::nullopt,
                                    w.target.env_visible && !w.target.env_visible->device_ids.empty());
}

bool Daemon::check_and_repair(Watched& w, Clock::time_point trigger, const Revocation* cause) {
  return repair_->check(*access_, w, trigger, cause);
}

void Daemon::watch_restoring_writes(Watched& w) {
  const bool wanted = !w.repair.missing.empty();
  if (wanted == !w.restoring_wds.empty()) return;
  for (int wd : w.restoring_wds) watches_->drop(wd);
  w.restoring_wds.clear();
  if (!wanted) return;
  for (const auto& file : access_->restoring_rule_files()) {
    int wd = watches_->add(w.cgroup.cgroup_dir + "/" + file, IN_MODIFY,
                          {WatchTarget::kContainerFile, w.cgroup.cgroup_dir, w.cgroup_id});
    if (wd >= 0) w.restoring_wds.push_back(wd);
  }
}

void Daemon::start_watching(Watched& w) {
  // Every rule write shows up on the rule files where the policy is in files; device
  // programs have none: the probe's program events, systemd's Reloading and the program
  // query timer stand in.
  for (const auto& file : access_->rule_files()) {
    int wd = watches_->add(w.cgroup.cgroup_dir + "/" + file, IN_MODIFY,
                          {WatchTarget::kContainerFile, w.cgroup.cgroup_dir, w.cgroup_id});
    if (wd >= 0) w.wds.push_back(wd);
  }
  log::info("watching GPU container (" + access_->description() + "), wants " + device_names(w.target.desired.wanted),
            w.log_fields());
  for (const auto& u : w.target.desired.unresolved)
    log::warn("allocated device not found on this node: " + u, w.log_fields());
  w.watching = true;
}

void Daemon::stop_watching(Watched& w) {
  probe_->unwatch(w);
  for (int wd : w.wds) watches_->drop(wd);
  w.wds.clear();
  w.repair.missing.clear();
  watch_restoring_writes(w);
  if (access_) access_->forget(w.cgroup.cgroup_dir);
  w.watching = false;
  metrics_.forget(w.labels);
}

void Daemon::remove_container(const std::string& cgroup_dir) {
  Watched* w = containers_.find(cgroup_dir);
  if (!w) return;
  for (int wd : w->wds) watches_->drop(wd);
  for (int wd : w->restoring_wds) watches_->drop(wd);
  if (access_) access_->forget(cgroup_dir);
  if (w->is_gpu()) probe_->unwatch(*w);
  if (w->is_gpu()) log::info("GPU container gone", w->log_fields());
  metrics_.forget(w->labels);
  node_->bundles().forget(w->cgroup.leaf.container_id);
  containers_.erase(cgroup_dir);
}

void Daemon::reresolve_all() {
  std::set<std::string> changed;
  for (auto& [dir, w] : containers_) {
    const bool was_gpu = w.is_gpu();
    const auto wanted_before = w.target.desired.wanted;
    resolve(w, /*force=*/false);
    if (w.is_gpu() && (!was_gpu || wanted_before != w.target.desired.wanted)) changed.insert(dir);
  }
  check_all(Clock::now(), [&](const Watched& w) { return changed.count(w.cgroup.cgroup_dir) > 0; });
  update_gauges();
}

void Daemon::check_all(Clock::time_point trigger, const std::function<bool(const Watched&)>& which) {
  check_dirs(trigger, containers_.dirs(which));
}

bool Daemon::check_dirs(Clock::time_point trigger, const std::vector<std::string>& dirs) {
  bool gauges_moved = false;
  // check_and_repair may drop a container whose cgroup vanished: look each up by name.
  for (const auto& dir : dirs)
    if (Watched* w = containers_.find(dir)) gauges_moved |= check_one(*w, trigger);
  return gauges_moved;
}

bool Daemon::check_ids(Clock::time_point trigger, const std::vector<std::uint64_t>& cgroup_ids) {
  bool gauges_moved = false;
  for (std::uint64_t id : cgroup_ids)
    if (Watched* w = containers_.by_cgroup_id(id)) gauges_moved |= check_one(*w, trigger);
  return gauges_moved;
}

bool Daemon::check_one(Watched& w, Clock::time_point trigger) {
  const auto before = w.gauge_inputs();
  return !check_and_repair(w, trigger) || w.gauge_inputs() != before;
}

void Daemon::check_gpu_containers() {
  check_all(Clock::now(), [](const Watched& w) { return w.is_gpu(); });
}

void Daemon::schedule_retry(Watched& w, Clock::duration delay, Clock::time_point trigger) {
  if (w.pending_since == Clock::time_point{} || trigger < w.pending_since) w.pending_since = trigger;
  if (!w.retry) {
    const std::string dir = w.cgroup.cgroup_dir;
    auto t = loop_->add_timer([this, dir] { on_retry(dir); }, "retry");
    if (!t) return;
    w.retry = std::move(*t);
  }
  // One timer per container, armed for the earliest moment anything is owed.
  const auto at = Clock::now() + delay;
  if (!w.retry.armed() || at < w.retry_at) {
    w.retry_at = at;
    arm_timer(w.retry, duration_cast<microseconds>(delay) + microseconds(1), "retry", metrics_);
  }
}

void Daemon::on_retry(const std::string& dir) {
  Watched* c = containers_.find(dir);
  if (!c) return;
  const auto since = c->pending_since;
  c->pending_since = {};
  if (c->target.kind == TargetKind::kUnidentified) {
    resolve(*c, /*force=*/true);  // its bundle may have appeared on disk since
    if (c->target.kind == TargetKind::kUnidentified) {
      if (++c->identify_attempts < static_cast<int>(std::size(kIdentifyRetry)))
        schedule_retry(*c, kIdentifyRetry[c->identify_attempts], since);
      update_gauges();
      return;
    }
  }
  if (c->is_gpu()) check_and_repair(*c, since);
  gauges_changed();
}

}  // namespace gdw
