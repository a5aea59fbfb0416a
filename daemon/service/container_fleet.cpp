#include "service/container_fleet.h"

#include <sys/stat.h>

#include <set>

#include "log/log.h"
#include "service/arm_timer.h"

namespace gdw {
namespace {

using std::chrono::duration_cast;
using std::chrono::microseconds;

// After a container cgroup appears, its bundle should already exist; if not (a runtime
// that writes config.json late), look again a few times before leaving it to the resync.
constexpr Clock::duration kIdentifyRetry[] = {std::chrono::milliseconds(10), std::chrono::milliseconds(100),
                                              std::chrono::milliseconds(1000), std::chrono::milliseconds(5000)};
// Long enough to cover a node-wide re-apply storm's batches, short against a scrape.
constexpr auto kGaugeDelay = std::chrono::milliseconds(10);
// A spare wrapper's verifier run (v2, ~0.5 ms) waits this long after a grant: the daemon
// sleeps first, so a tenant on its CPU opens its GPU before, not after, that run.
constexpr auto kPrepareGrantDelay = std::chrono::milliseconds(2);
ApplyWaitSettings apply_wait_settings(const Config& config) {
  ApplyWaitSettings s;
  s.limit = config.repair.apply_wait_limit;
  s.quiet = config.repair.apply_quiet;
  return s;
}

NodeMetrics::ExposedDevices exposure_counts(const Exposure& exposure) {
  NodeMetrics::ExposedDevices n;
  for (const auto& e : exposure.exposed) {
    n.runtime += e.spec;
    n.systemd += e.device_allow;
  }
  return n;
}

}  // namespace

ContainerFleet::ContainerFleet(const Config& config, RepairSettings settings, EventLoop& loop, Metrics& metrics,
                               NodeModel& node)
    : config_(config),
      settings_(settings),
      loop_(loop),
      node_metrics_(metrics),
      daemon_metrics_(metrics),
      repair_metrics_(metrics),
      node_(node),
      watches_(daemon_metrics_),
      attribution_(containers_, ProbeMetrics(metrics)),
      probe_(config, loop, containers_, metrics, attribution_),
      repair_(config, settings_, loop, containers_, metrics, attribution_),
      persistence_(config, loop.native(),
                   [this] {
                     // A reload re-applied every scope's device policy (v1: deny `a` and its
                     // list; v2: a new ANDed program): look at every GPU container.
                     check_gpu_containers();
                     update_gauges();
                   }),
      apply_waits_(loop, metrics, apply_wait_settings(config), [this](const std::string& dir) { on_apply_wait_due(dir); }),
      gauges_(node_metrics_) {}

ContainerFleet::~ContainerFleet() {
  for (auto& [dir, w] : containers_) {
    node_metrics_.forget(w.labels);
    if (w.is_gpu()) probe_.unwatch(w);
  }
}

Status ContainerFleet::start() {
  if (auto s = watches_.start(); !s) return s;
  // Highest priority: repairs are what the daemon is for.
  auto src = loop_.add_io(watches_.fd(), EPOLLIN, [this](std::uint32_t) { on_container_events(); }, "inotify", -10);
  if (!src) return src.error();
  watches_source_ = std::move(*src);
  if (auto s = start_timers(); !s) return s;
  apply_probe_config();
  return {};
}

Status ContainerFleet::start_timers() {
  // Device programs: a link released by its holder's exit makes no bpf() call the probe
  // could see.
  auto query = loop_.add_timer([this] {
    if (access_ && access_->policy_in_programs()) {
      check_gpu_containers();
      update_gauges();
    }
    arm_timer(program_query_timer_, config_.daemon.program_query_interval, "program-query", daemon_metrics_);
  }, "program-query", duration_cast<microseconds>(config_.daemon.program_query_interval));
  if (!query) return query.error();
  program_query_timer_ = std::move(*query);
  auto gauges = loop_.add_timer([this] { count_moved_gauges(); }, "gauges");
  if (!gauges) return gauges.error();
  gauge_timer_ = std::move(*gauges);
  // Below every trigger: it waits while repairs are due.
  auto prepare = loop_.add_timer([this] {
    if (!access_) return;
    if (const std::size_t loaded = access_->prepare_next_grant()) repair_metrics_.programs_loaded(loaded, /*ahead=*/true);
    count_prepared_loads();
    // One bounded step per turn: events that came meanwhile go first.
    if (access_->next_grant_work_due()) arm_timer(prepare_timer_, kPrepareGrantDelay, "prepare-grant", daemon_metrics_);
  }, "prepare-grant", std::nullopt, ProbeLink::kReadPriority + 1);
  if (!prepare) return prepare.error();
  prepare_timer_ = std::move(*prepare);
  return {};
}

void ContainerFleet::apply_probe_config() {
  probe_.apply_config();
  repair_.set_reporting(kube_ ? kube_->events() : nullptr, probe_.loaded());
  read_probe_on_loop();
}

void ContainerFleet::read_probe_on_loop() {
  probe_source_ = EventSource();
  if (!probe_.loaded()) return;
  auto src = loop_.add_io(probe_.fd(), EPOLLIN, [this](std::uint32_t) { on_probe_records(); }, "probe",
                          ProbeLink::kReadPriority);
  if (!src) {
    log::warn("eBPF probe records are not read: " + src.error().message);
    return;
  }
  probe_source_ = std::move(*src);
}

void ContainerFleet::set_reporting(kube::KubeReporting* kube) {
  kube_ = kube;
  repair_.set_reporting(kube_ ? kube_->events() : nullptr, probe_.loaded());
  if (kube_) update_gauges();  // the new reporter starts from the containers as they are
}

void ContainerFleet::set_access(std::unique_ptr<DeviceAccess> access) {
  access_ = std::move(access);
  probe_.set_policy_form(access_->policy_in_programs() ? DevicePolicyForm::kPrograms : DevicePolicyForm::kRuleFiles);
  // cgroup_mkdir reports hierarchies by id (cgroup2: 0; a v1 controller's from
  // <devices.proc_root>/cgroups). Without it, inotify alone finds new containers.
  tree_hierarchy_id_.reset();
  if (auto id = access_->hierarchy_id(config_.devices.proc_root))
    tree_hierarchy_id_ = *id;
  else
    log::warn(id.error().message + "; new containers are found by inotify alone");
}

void ContainerFleet::on_container_events() {
  ContainerEvents events = watches_.read();
  const auto trigger = Clock::now();
  // A revoking write's probe record is taken at its permission check, so it is already
  // waiting: read what waits first (at most one budget) so the repair names the writer.
  act(probe_.drain(access_ && access_->policy_in_programs()));
  probe_.report_record_delays();
  if (events.overflow) {
    log::warn("inotify queue overflowed; scanning the kubepods tree again");
    const auto start = Clock::now();
    sync(node_.scan());
    daemon_metrics_.resync("overflow", std::chrono::duration<double>(Clock::now() - start).count());
    return;
  }
  std::vector<std::string> dirs = std::move(events.rule_write_dirs);
  for (const auto& parent : events.parent_denies)
    for (const auto& [dir, w] : containers_)
      if (dir.rfind(parent + "/", 0) == 0) dirs.push_back(dir);
  // A runtime wrote a file beside its create's pid file, while that create is waited for
  // and no runtime is known to be at work on it (one that is ends the wait as it exits):
  // its end is looked at now rather than at the wait's next look, so that the runtime that
  // wrote it, still running, is waited for by its exit.
  for (const auto& file : events.create_files) {
    const WatchedContainer* w = containers_.find(file.cgroup_dir);
    if (!w || w->create_ended || !apply_waits_.keeps(file.cgroup_dir)) continue;
    if (file.name == std::string_view(w->create_marker).substr(w->create_marker.rfind('/') + 1))
      check_held(file.cgroup_dir);
  }
  for (const auto& change : events.tree) {
    if (change.created)
      dir_created(change.path);
    else
      tree_dir_removed(change.path);
  }
  std::sort(dirs.begin(), dirs.end());
  dirs.erase(std::unique(dirs.begin(), dirs.end()), dirs.end());
  // A storm's revoke-and-repair leaves every count as it was: no O(N) gauge walk for it.
  const bool moved = check_ids(trigger, events.rule_writes);
  const bool dirs_moved = check_dirs(trigger, dirs, /*write_event=*/true);
  if (!events.only_rule_writes())
    gauges_changed();  // containers came, went or were read again
  else if (moved || dirs_moved)
    gauges_moved();
}

void ContainerFleet::upsert(const DiscoveredContainer& cg, bool check_new) {
  auto [w, inserted] = containers_.upsert(cg, config_);
  // Its runtime may still be creating it: its grants wait for the create to end.
  if (inserted && synced_) w.appeared_while_running = true;
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
        node_metrics_.set_newest_container_start(started);
      }
    }
  }
  resolve(w, /*force=*/false);
  if (inserted && w.target.kind == TargetKind::kUnidentified && node_.allocations().pod_has_devices(cg.pod.pod_uid))
    schedule_retry(w, kIdentifyRetry[0], Clock::now());
  if (inserted) hold_for_makers(w);
  // A container seen for the first time is checked at once (seed 001: created without
  // nvidia-uvm in its spec). Its watches exist already, so no later write is missed.
  if (inserted && synced_ && w.is_gpu() && check_new) check(w, Clock::now());
}

void ContainerFleet::resolve(WatchedContainer& w, bool force) {
  if (!force && w.resolved_generation == node_.generation()) return;
  apply_target(w, node_.resolve(w.cgroup));
  w.resolved_generation = node_.generation();
}

void ContainerFleet::apply_target(WatchedContainer& w, ContainerTarget target) {
  const bool was_gpu = w.is_gpu();
  w.target = std::move(target);
  if (w.target.identity) {
    ContainerLabels labels{w.target.identity->pod_namespace, w.target.identity->pod_name,
                           w.target.identity->container_name};
    if (labels != w.labels && !w.labels.pod.empty()) node_metrics_.forget(w.labels);
    w.labels = labels;
  }
  const bool is_gpu = w.is_gpu();
  if (w.appeared_while_running && !w.create_ended && w.create_marker.empty() && w.target.bundle)
    w.create_marker = create_pid_file(*w.target.bundle);
  // Watched before its first look (a stat), so that no write of the pid file goes unseen.
  if (is_gpu && settings_.mode == Mode::kEnforce && w.creating())
    watches_.watch_create(w, w.create_marker);
  if (is_gpu && w.cgroup_id == 0) {
    struct stat st{};
    if (::stat(w.cgroup.cgroup_dir.c_str(), &st) == 0) containers_.set_cgroup_id(w, st.st_ino);
  }
  if (is_gpu) probe_.watch(w);
  if (is_gpu && !w.watching) {
    start_watching(w);
  } else if (!is_gpu && was_gpu) {
    stop_watching(w);
  }
  // Exposure and env-only GPUs (node/exposure.h, core/env_visible.h): per resolve, not per repair.
  if (w.target.identity)
    node_metrics_.set_container_exposure(w.labels, is_gpu ? std::optional(exposure_counts(w.target.exposure)) : std::nullopt,
                                         w.target.env_visible && !w.target.env_visible->device_ids.empty());
  // cgroup v2, systemd driver: a daemon-reload attaches a program built from DeviceAllow=
  // alone, ANDed with the rest: what it lacks is denied from that moment until a repair.
  // Added before any harm, the reload keeps it. (On v1 every reload briefly denies
  // everything anyway; there the grant is persisted after a repair.)
  if (is_gpu && access_ && access_->policy_in_programs()) persist(w);
}

void ContainerFleet::start_watching(WatchedContainer& w) {
  // Every rule write shows up on the rule files where the policy is in files; device
  // programs have none: the probe's program events, systemd's Reloading and the program
  // query timer stand in.
  watches_.watch_rule_files(w, access_->rule_files());
  log::info("watching GPU container (" + access_->description() + "), wants " + device_names(w.target.desired.wanted),
            w.log_fields());
  for (const auto& u : w.target.desired.unresolved)
    log::warn("allocated device not found on this node: " + u, w.log_fields());
  w.watching = true;
}

void ContainerFleet::stop_watching(WatchedContainer& w) {
  probe_.unwatch(w);
  watches_.unwatch(w);
  w.repair.missing.clear();
  access_->forget(w.cgroup.cgroup_dir);
  w.watching = false;
  node_metrics_.forget(w.labels);
}

void ContainerFleet::reresolve_all() {
  std::set<std::string> changed;
  for (auto& [dir, w] : containers_) {
    const bool was_gpu = w.is_gpu();
    const auto wanted_before = w.target.desired.wanted;
    resolve(w, /*force=*/false);
    if (w.is_gpu() && (!was_gpu || wanted_before != w.target.desired.wanted)) changed.insert(dir);
  }
  check_dirs(Clock::now(), std::vector<std::string>(changed.begin(), changed.end()));
  update_gauges();
}

void ContainerFleet::check_gpu_containers() {
  check_dirs(Clock::now(), containers_.dirs([](const WatchedContainer& w) { return w.is_gpu(); }));
}

bool ContainerFleet::check_dirs(Clock::time_point trigger, const std::vector<std::string>& dirs, bool write_event) {
  bool moved = false;
  // A check may drop a container whose cgroup vanished: each is looked up by name.
  for (const auto& dir : dirs)
    if (WatchedContainer* w = containers_.find(dir)) moved |= check(*w, trigger, {}, write_event);
  return moved;
}

bool ContainerFleet::check_ids(Clock::time_point trigger, const std::vector<std::uint64_t>& cgroup_ids) {
  bool moved = false;
  for (std::uint64_t id : cgroup_ids)
    if (WatchedContainer* w = containers_.by_cgroup_id(id)) moved |= check(*w, trigger, {}, /*write_event=*/true);
  return moved;
}

bool ContainerFleet::check(WatchedContainer& w, Clock::time_point trigger, const CheckCause& cause, bool write_event) {
  if (!access_ || !w.is_gpu()) return false;
  // Never inside a runtime's own apply: observe mode writes nothing, so it never waits.
  const bool creating = w.creating();
  if (settings_.mode == Mode::kEnforce && must_wait(w, trigger, cause, write_event)) return false;
  const bool create_just_ended = creating && w.create_ended;
  const auto before = w.repair_gauge_inputs();
  CheckCause with_records = cause;
  with_records.records_fd = probe_.fd();
  CheckOutcome outcome = repair_.check(*access_, w, trigger, with_records);
  apply_waits_.release_ended();  // what the wait that let this check through held, after its grant
  if (w.create_ended) watches_.unwatch_create(w);  // also after the grant
  if (outcome.deferred) {
    if (create_just_ended) w.create_ended = false;  // looked at again, with its runtime
    apply_waits_.defer(w, trigger, cause.program_change);
    return false;
  }
  if (outcome.gone) {
    remove(w.cgroup.cgroup_dir);
    return true;
  }
  if (outcome.retry_at) schedule_retry(w, *outcome.retry_at - Clock::now(), trigger);
  if (outcome.prepare_next_grant && !prepare_timer_.armed())
    arm_timer(prepare_timer_, kPrepareGrantDelay, "prepare-grant", daemon_metrics_);
  const bool target_moved = (create_just_ended || !outcome.granted.empty()) && reread_after_grant(w, trigger);
  if (!outcome.granted.empty()) persist(w, outcome.granted);
  // While `w` misses devices someone else's grant ends the drift: watched only then.
  watches_.watch_restoring_files(w, access_->restoring_rule_files());
  if (!target_moved && w.repair_gauge_inputs() == before) return false;
  gauge_shares_moved_.insert(w.cgroup.cgroup_dir);
  return true;
}

bool ContainerFleet::reread_after_grant(WatchedContainer& w, Clock::time_point trigger) {
  // Read again after the grant, not before (on a 2-vCPU VM the bundle, unit files and
  // allocation take ~0.17 ms, which the GPU would otherwise stay denied for): a create that
  // has ended has written all (the systemd driver's DevicePolicy= and DeviceAllow= drop-ins),
  // and the re-apply that revoked may have rewritten the scope's DeviceAllow= (`runc update`
  // resets it to the spec); what DeviceAllow= lacks is then persisted (apply_target). The
  // grant used what was read before: allocations do not change while a container is
  // created, and a set that did grow is granted by a check of its own.
  const auto target_before = w.target_gauge_inputs();
  const auto wanted_before = w.target.desired.wanted;
  resolve(w, /*force=*/true);
  if (w.is_gpu() && w.target.desired.wanted != wanted_before) schedule_retry(w, Clock::duration::zero(), trigger);
  return w.target_gauge_inputs() != target_before;
}

void ContainerFleet::schedule_retry(WatchedContainer& w, Clock::duration delay, Clock::time_point trigger) {
  if (w.pending_since == Clock::time_point{} || trigger < w.pending_since) w.pending_since = trigger;
  if (!w.retry) {
    const std::string dir = w.cgroup.cgroup_dir;
    auto t = loop_.add_timer([this, dir] { on_retry(dir); }, "retry");
    if (!t) return;
    w.retry = std::move(*t);
  }
  // One timer per container, armed for the earliest moment anything is owed.
  const auto at = Clock::now() + delay;
  if (!w.retry.armed() || at < w.retry_at) {
    w.retry_at = at;
    arm_timer(w.retry, duration_cast<microseconds>(delay) + microseconds(1), "retry", daemon_metrics_);
  }
}

void ContainerFleet::on_retry(const std::string& dir) {
  WatchedContainer* c = containers_.find(dir);
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
  check(*c, since);
  // A persistence the repeat guard held back (PersistencePlan::retry_at); the check may
  // have dropped the container.
  if (WatchedContainer* still = containers_.find(dir)) persist(*still);
  gauges_changed();
}

void ContainerFleet::persist(WatchedContainer& w, const std::vector<WantedDevice>& granted) {
  // After a grant: the direct grant already restored access (microseconds); asking systemd
  // first would leave the container without its GPU for a D-Bus round trip, or for the
  // whole reload systemd may be busy with. Before any harm (its unit files lack devices):
  // systemd's next re-apply then keeps them, and there is nothing to repair.
  // Asking systemd makes it apply the unit's devices again (v2: a new program attached, its
  // old one detached), a re-apply of its own: never inside a runtime's apply (runc 1.1 would
  // replace a program systemd has just detached: ENOENT; 1.0 would find the GPU back while
  // it creates). While a create goes on, or a wait holds a writer, it comes after: the check
  // the wait's end lets through persists, or the hold's end (check_held).
  if (!persist_in_scope(w.target) || in_runtime_apply(w)) return;
  PersistencePlan plan =
      plan_persistence(w.repair, device_allow_lacks(w.target.exposure), granted, Clock::now(), settings_);
  if (plan.retry_at) schedule_retry(w, *plan.retry_at - Clock::now(), Clock::now());
  if (plan.devices.empty()) return;
  const std::vector<WantedDevice>& devices = plan.devices;
  const std::string dir = w.cgroup.cgroup_dir;
  auto started = persistence_.persist(dir, devices, [this, dir, devices](const std::string& unit, Status outcome) {
    on_persisted(dir, devices, unit, outcome);
  });
  if (!started)
    log::warn(started.error().message, w.log_fields());
  else if (*started)
    repair_.persist_started(w);
}

void ContainerFleet::on_persisted(const std::string& dir, const std::vector<WantedDevice>& devices,
                                  const std::string& unit, const Status& outcome) {
  WatchedContainer* w = containers_.find(dir);
  if (!w) return;
  repair_.persist_answered(*w, devices, unit, outcome);
  if (!outcome) return;
  // Its DeviceAllow= changed (exposure), and the kernel state systemd left is verified:
  // anything still missing is granted directly.
  resolve(*w, /*force=*/true);
  check(*w, Clock::now());
  gauges_changed();
}

void ContainerFleet::bundle_appeared(const std::string& container_id) {
  for (auto& [dir, w] : containers_) {
    if (w.target.kind == TargetKind::kUnidentified && w.cgroup.leaf.container_id == container_id) {
      w.identify_attempts = 0;
      schedule_retry(w, kIdentifyRetry[0], Clock::now());
    }
  }
}

void ContainerFleet::gauges_changed() {
  gauge_tally_whole_ = false;
  gauges_moved();
}

void ContainerFleet::gauges_moved() {
  if (!gauge_timer_.armed()) arm_timer(gauge_timer_, kGaugeDelay, "gauges", daemon_metrics_);
}

void ContainerFleet::update_gauges() {
  gauge_tally_.rebuild(containers_, node_.allocations());
  gauge_tally_whole_ = true;
  gauge_shares_moved_.clear();
  report_gauges(gauge_tally_.counts(node_.merged()));
}

// Only the shares the checks since the last count moved: a re-apply that changes one
// container's program count costs one share, whatever the number of containers.
void ContainerFleet::count_moved_gauges() {
  if (!gauge_tally_whole_) return update_gauges();
  for (const auto& dir : gauge_shares_moved_)
    if (WatchedContainer* w = containers_.find(dir)) gauge_tally_.update(*w, node_.allocations());
  gauge_shares_moved_.clear();
  report_gauges(gauge_tally_.counts(node_.merged()));
}

void ContainerFleet::report_gauges(GaugeCounts counts) {
  gauges_.report(counts, node_, access_ && access_->policy_in_programs());
  probe_.maintain_syscall_hook(counts.missing > 0);
  if (kube_) kube_->container_problems(std::move(counts.problems));
}

}  // namespace gdw
