#include "service/daemon.h"
#include "service/daemon_internal.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "cdi/cdi_spec.h"
#include "log/log.h"
#include "node/config_file.h"
#include "node/self_exe.h"

namespace gdw {
namespace {

using std::chrono::duration_cast;
using std::chrono::microseconds;

constexpr std::uint32_t kTreeMask = IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_ONLYDIR;
constexpr std::uint32_t kDevicesFileMask = IN_MODIFY;
// After a container cgroup appears, its bundle should already exist; if not (a runtime
// that writes config.json late), look again a few times before leaving it to the resync.
constexpr Clock::duration kIdentifyRetry[] = {std::chrono::milliseconds(10), std::chrono::milliseconds(100),
                                              std::chrono::milliseconds(1000), std::chrono::milliseconds(5000)};
// A NVML query that timed out is not retried for a while: a hung driver stays hung.
constexpr Clock::duration kNvmlRetryAfterFailure = std::chrono::minutes(5);
// How long a repair's log line waits for the probe's record of the revoking write.
constexpr Clock::duration kAttributionWait = std::chrono::milliseconds(20);

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string base_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }
std::string dir_name(const std::string& path) { return path.substr(0, path.rfind('/')); }

// /healthz's limit: systemd's WatchdogSec when the service manager set one (it kills a loop
// stalled that long anyway), else metrics.health_stale_after.
Clock::duration health_stale_after(const Config& config) {
  std::uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) return microseconds(usec);
  return config.metrics.health_stale_after;
}

using namespace daemon_internal;

}  // namespace

Status Daemon::start_heartbeat() {
  heartbeat_.set_stale_after(health_stale_after(config_));
  heartbeat_.beat(Clock::now());
  // Top priority: a pending beat runs at the loop's next turn however busy it is; only a
  // loop that does not come back (a call that blocks) goes stale.
  auto timer = loop_->add_timer([this] {
    heartbeat_.beat(Clock::now());
    arm_or_log(heartbeat_timer_, heartbeat_.stale_after() / 4, "heartbeat");
  }, "heartbeat", duration_cast<microseconds>(heartbeat_.stale_after() / 4), -100);
  if (!timer) return timer.error();
  heartbeat_timer_ = std::move(*timer);
  return {};
}

void Daemon::arm_or_log(EventSource& timer, Clock::duration delay, const std::string& name) {
  if (auto s = timer.arm(duration_cast<microseconds>(delay)); !s) {
    metrics_.event_loop_error(name);
    log::error("cannot arm the " + name + " timer: " + s.error().message);
  }
}

Daemon::Daemon(Config config, std::string config_path)
    : config_(std::move(config)), config_path_(std::move(config_path)) {}

Daemon::~Daemon() = default;

int Daemon::run() {
  if (auto s = start(); !s) {
    log::error("cannot start: " + s.error().message);
    return 1;
  }
  int code = loop_->run();
  sd_notify(0, "STOPPING=1");
  log::info("stopped");
  return code;
}

Status Daemon::start() {
  auto loop = EventLoop::create();
  if (!loop) return loop.error();
  loop_ = std::move(*loop);
  loop_->on_callback_error([this](const std::string& source, const std::string& what) {
    metrics_.event_loop_error(source);
    log::error("event handler " + source + " failed: " + what);
  });
  for (int sig : {SIGTERM, SIGINT}) {
    auto s = loop_->add_signal(sig, [this, sig] {
      log::info(std::string("received ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT") + ", exiting");
      stop(0);
    }, "signal");
    if (!s) return s.error();
    signal_sources_.push_back(std::move(*s));
  }
  auto hup = loop_->add_signal(SIGHUP, [this] { reload_config(); }, "sighup");
  if (!hup) return hup.error();
  signal_sources_.push_back(std::move(*hup));
  auto usr1 = loop_->add_signal(SIGUSR1, [this] { full_resync("signal"); }, "sigusr1");
  if (!usr1) return usr1.error();
  signal_sources_.push_back(std::move(*usr1));
  // Writes to a cgroup removed under us must not kill the daemon.
  ::signal(SIGPIPE, SIG_IGN);

  auto in = Inotify::create();
  if (!in) return in.error();
  inotify_.emplace(std::move(*in));
  // Highest priority: repairs are what the daemon is for.
  auto src = loop_->add_io(inotify_->fd(), EPOLLIN, [this](std::uint32_t) { on_inotify(); }, "inotify", -10);
  if (!src) return src.error();
  inotify_source_ = std::move(*src);

  auto timer = loop_->add_timer([this] {
    full_resync("periodic");
    arm_or_log(resync_timer_, config_.daemon.resync_interval, "resync");
  }, "resync", duration_cast<microseconds>(config_.daemon.resync_interval));
  if (!timer) return timer.error();
  resync_timer_ = std::move(*timer);

  // cgroup v2: a link released by its holder's exit makes no bpf() call the probe could see.
  auto query = loop_->add_timer([this] {
    if (v2()) {
      check_all(Clock::now(), [](const Watched& w) { return w.target.kind == TargetKind::kGpu; });
      update_gauges();
    }
    arm_or_log(program_query_timer_, config_.daemon.program_query_interval, "program-query");
  }, "program-query", duration_cast<microseconds>(config_.daemon.program_query_interval));
  if (!query) return query.error();
  program_query_timer_ = std::move(*query);

  if (auto s = loop_->enable_watchdog(); !s) log::warn(s.error().message);
  if (auto s = start_heartbeat(); !s) return s.error();

  if (!config_.metrics.listen.empty()) {
    auto healthz = [this] { return heartbeat_.answer(Clock::now()); };
    auto access = load_metrics_access(config_.metrics.web_config);
    if (!access) return access.error();
    if (auto s = metrics_.serve(config_.metrics.listen, healthz, std::move(*access)); !s) return s.error();
  }
  if (config_.probe.enabled) load_probe();
  metrics_.set_probe_loaded(probe_ != nullptr);
  start_events();
  start_node(config_);
  log::info("starting: mode " + to_string(config_.mode) + ", metrics on " +
            (config_.metrics.listen.empty() ? std::string("(off)") : config_.metrics.listen));
  full_resync("startup");
  ready_ = true;
  notify_ready_when_settled();  // now, or at PodResources' first outcome
  return {};
}

void Daemon::stop(int code) { loop_->exit(code); }

void Daemon::start_node(const Config& config) {
  health_.reset();
  node_ = std::make_unique<NodeModel>(config);
  NodeHealthHooks hooks;
  hooks.on_allocations_changed = [this] { reresolve_all(); };
  hooks.requery_nvml = [this] { return maybe_query_nvml(/*force=*/true); };
  hooks.running_containers = [this] { return running_containers(); };
  hooks.on_first_answers = [this] { notify_ready_when_settled(); };
  health_ = std::make_unique<NodeHealthMonitor>(config_, *loop_, metrics_, *node_, std::move(hooks));
  // Without these the daemon still repairs from the checkpoint: not fatal.
  if (auto s = health_->start(); !s) log::error("node health checks (PodResources, device plugins) off: " + s.error().message);
}

namespace {

// SIGHUP: reads metrics.web_config again (and the certificates it names, which may have
// been rotated) and serves with it. false: a bad one, logged; everything keeps running as
// it is.
bool reload_metrics_access(Metrics& metrics, const Config& running, const Config& fresh) {
  if (running.metrics.listen.empty() || (fresh.metrics.web_config.empty() && running.metrics.web_config.empty()))
    return true;
  auto access = load_metrics_access(fresh.metrics.web_config);
  if (!access) {
    metrics.config_reload(false);
    log::error("SIGHUP: keeping the running configuration: " + access.error().message);
    return false;
  }
  if (auto s = metrics.reserve(std::move(*access)); !s) log::error("SIGHUP: " + s.error().message);
  return true;
}

}  // namespace

void Daemon::reload_config() {
  auto fresh = load_config_file(config_path_);
  if (!fresh) {
    metrics_.config_reload(false);
    log::error("SIGHUP: keeping the running configuration: " + fresh.error().message);
    return;
  }
  if (fresh->metrics.listen != config_.metrics.listen)
    log::warn("SIGHUP: metrics.listen changes only on restart; still serving " + config_.metrics.listen);
  fresh->metrics.listen = config_.metrics.listen;
  if (!reload_metrics_access(metrics_, config_, *fresh)) return;
  log::set_level(fresh->log.level);
  heartbeat_.set_stale_after(health_stale_after(*fresh));
  heartbeat_.beat(Clock::now());
  arm_or_log(heartbeat_timer_, heartbeat_.stale_after() / 4, "heartbeat");  // at the new pace now
  // Start over from the new configuration: paths may have changed.
  for (auto it = containers_.begin(); it != containers_.end();) {
    metrics_.forget(it->second.labels);
    if (probe_ && it->second.cgroup_id) (void)probe_->unwatch_cgroup(it->second.cgroup_id);
    it = containers_.erase(it);
  }
  dir_by_cgroup_id_.clear();
  for (const auto& [wd, target] : watches_) inotify_->remove(wd);
  watches_.clear();
  wd_by_path_.clear();
  config_ = *fresh;
  systemd_.reset();  // systemd.bus_address may have changed
  if (!config_.probe.enabled && probe_) {
    probe_source_ = EventSource();
    probe_.reset();
    hook_schedule_.reset();
    hook_timer_.disarm();
    probe_status_ = "off (probe.enabled: false)";
  } else if (config_.probe.enabled && !probe_) {
    load_probe();
  } else if (probe_) {
    // probe.syscall_hook or its linger may have changed; the next update decides.
    hook_schedule_.emplace(config_.probe.syscall_hook, config_.probe.syscall_hook_linger,
                           probe_->rule_writes_need_syscall_hook());
    probe_status_ = "loaded, syscall hook " + to_string(config_.probe.syscall_hook);
  }
  metrics_.set_probe_loaded(probe_ != nullptr);
  metrics_.set_syscall_hook_attached(probe_ && probe_->syscall_hook_attached());
  start_events();
  start_node(config_);
  located_ = false;
  metrics_.config_reload(true);
  log::info("SIGHUP: configuration reloaded, mode " + to_string(config_.mode));
  full_resync("reload");
}

int Daemon::add_watch(const std::string& path, std::uint32_t mask, WatchTarget target) {
  if (auto it = wd_by_path_.find(path); it != wd_by_path_.end()) return it->second;
  auto r = inotify_->add(path, mask);
  if (r.wd < 0) {
    if (r.err != ENOENT && r.err != ENOTDIR) {
      metrics_.event_loop_error("inotify_add_watch");
      log::warn("cannot watch " + path + ": " + std::strerror(r.err));
    }
    return -1;
  }
  watches_[r.wd] = std::move(target);
  wd_by_path_[path] = r.wd;
  return r.wd;
}

void Daemon::drop_watch(int wd) {
  inotify_->remove(wd);
  watches_.erase(wd);
  std::erase_if(wd_by_path_, [wd](const auto& kv) { return kv.second == wd; });
}

void Daemon::watch_tree_dir(const std::string& dir) {
  add_watch(dir, kTreeMask, {WatchTarget::kTreeDir, dir});
  // A deny on a parent silently strips the exception from every child (no event there).
  add_watch(dir + "/devices.deny", kDevicesFileMask, {WatchTarget::kParentDenyFile, dir});
}

void Daemon::ensure_input_watches() {
  const std::string& ckpt = config_.kubelet.checkpoint;
  add_watch(dir_name(ckpt), IN_MOVED_TO | IN_CLOSE_WRITE | IN_DELETE | IN_ONLYDIR,
            {WatchTarget::kCheckpointDir, dir_name(ckpt)});
  for (const auto& dir : config_.runtime.state_dirs)
    add_watch(dir, IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_ONLYDIR, {WatchTarget::kBundleDir, dir});
  for (const auto& dir : {config_.devices.dev_root, config_.devices.dev_root + "/nvidia-caps"})
    add_watch(dir, IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_ATTRIB | IN_ONLYDIR, {WatchTarget::kDevDir, dir});
  for (const auto& dir : config_.cdi.spec_dirs)
    add_watch(dir, IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_ONLYDIR, {WatchTarget::kCdiDir, dir});
}

void Daemon::full_resync(const std::string& reason) {
  const auto start = Clock::now();
  if (!located_) {
    if (auto s = node_->locate(); !s) {
      if (!locate_error_logged_) log::warn(s.error().message + "; will look again at every resync");
      locate_error_logged_ = true;
      metrics_.resync(reason, seconds_since(start));
      update_gauges();
      return;
    }
    located_ = true;
    locate_error_logged_ = false;
    // cgroup_mkdir reports hierarchies by id: cgroup2 is 0, a v1 controller's is in
    // /proc/cgroups — the running kernel's, whatever devices.proc_root says.
    tree_hierarchy_id_.reset();
    if (v2()) {
      tree_hierarchy_id_ = 0;
    } else {
      std::ifstream cgroups("/proc/cgroups");
      std::string line;
      while (std::getline(cgroups, line)) {
        std::istringstream fields(line);
        std::string name;
        std::uint32_t hierarchy = 0;
        if (fields >> name >> hierarchy && name == "devices") tree_hierarchy_id_ = hierarchy;
      }
    }
    log::info("watching " + node_->kubepods().dir());
  }
  ensure_input_watches();
  node_->load_inventory();
  reload_checkpoint();
  node_->bundles().refresh();
  node_->rebuild_allocations();  // PodResources entries map to pods through the bundles
  health_->checkpoint_or_inventory_changed();
  maybe_query_nvml();

  watch_tree_dir(node_->kubepods().dir());
  KubepodsTree tree = node_->scan();
  for (const auto& dir : tree.parent_dirs) watch_tree_dir(dir);
  std::set<std::string> present;
  for (const auto& cg : tree.containers) {
    present.insert(cg.cgroup_dir);
    upsert_container(cg);
  }
  std::vector<std::string> gone;
  for (const auto& [dir, w] : containers_)
    if (!present.count(dir)) gone.push_back(dir);
  for (const auto& dir : gone) remove_container(dir);
  // upsert re-resolved every container against the inputs just loaded; now check them.
  check_all(Clock::now(), [](const Watched& w) { return w.target.kind == TargetKind::kGpu; });
  update_gauges();
  metrics_.resync(reason, seconds_since(start));
  log::debug("resync (" + reason + ") of " + std::to_string(containers_.size()) + " container(s) took " +
             std::to_string(seconds_since(start) * 1000) + " ms");
}

void Daemon::reload_checkpoint() {
  auto s = node_->load_checkpoint();
  metrics_.set_checkpoint_loaded(s.ok());
  if (!s) {
    log::warn(s.error().message + (node_->checkpoint().loaded ? "; keeping the last good record" : ""));
    return;
  }
  const auto& cp = node_->checkpoint().checkpoint;
  metrics_.set_checkpoint_checksum_valid(cp.checksum_valid);
  struct stat st{};
  if (::stat(config_.kubelet.checkpoint.c_str(), &st) == 0)
    metrics_.set_checkpoint_last_write(static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec / 1e9);
  health_->checkpoint_or_inventory_changed();
  if (!cp.checksum_valid) {
    log::warn("kubelet checkpoint checksum does not verify (stored " + std::to_string(cp.stored_checksum) +
              ", computed " + std::to_string(cp.computed_checksum) + "); its entries are " +
              (node_->checkpoint().used ? "used" : "ignored (kubelet.on_invalid_checksum: ignore)"));
  }
  for (const auto& e : cp.entry_errors)
    log::warn("kubelet checkpoint entry " + std::to_string(e.index) + " (pod " + e.pod_uid + ", container " +
              e.container_name + "): " + e.message);
}

void Daemon::reload_inventory() {
  node_->load_inventory();
  health_->checkpoint_or_inventory_changed();
  maybe_query_nvml();
}

bool Daemon::maybe_query_nvml(bool force) {
  if (nvml_query_) return true;
  // `force`: the stale-checkpoint check needs a fresh answer even with every MIG device
  // mapped (its cached answer is what may be out of date). A failed query still backs off.
  if ((!force && !node_->needs_nvml()) || Clock::now() < nvml_next_attempt_) return false;
  auto q = NvmlQuery::start(self_exe(), config_.devices.nvml_library);
  if (!q) {
    log::warn("cannot ask NVML for MIG devices: " + q.error().message);
    nvml_next_attempt_ = Clock::now() + kNvmlRetryAfterFailure;
    return false;
  }
  nvml_query_.emplace(std::move(*q));
  nvml_started_ = Clock::now();
  auto finish = [this](bool timed_out) {
    nvml_io_ = EventSource();
    nvml_deadline_ = EventSource();
    bool answered = false;
    if (timed_out) {
      nvml_query_->kill();
      log::warn("NVML did not answer within " + format_duration(config_.devices.nvml_timeout) +
                " (child killed); MIG devices stay unmapped — set devices.mig_map to map them");
      nvml_next_attempt_ = Clock::now() + kNvmlRetryAfterFailure;
    } else if (auto answer = nvml_query_->finish(); answer) {
      log::info("NVML reported " + std::to_string(answer->migs.size()) + " MIG device(s)");
      node_->set_nvml_answer(std::move(*answer));
      answered = true;
    } else {
      log::warn("NVML query failed: " + answer.error().message);
      nvml_next_attempt_ = Clock::now() + kNvmlRetryAfterFailure;
    }
    // Done before the health check runs: it may ask for the next query at once.
    nvml_query_.reset();
    health_->inventory_refreshed(answered, nvml_started_);
    reresolve_all();  // the answer, or the health check's own re-read, may change targets
  };
  auto io = loop_->add_io(nvml_query_->fd(), EPOLLIN | EPOLLHUP, [this, finish](std::uint32_t) {
    if (nvml_query_ && nvml_query_->read_available()) finish(false);
  }, "nvml");
  auto deadline = loop_->add_timer([finish] { finish(true); }, "nvml-deadline",
                                   duration_cast<microseconds>(config_.devices.nvml_timeout));
  if (!io || !deadline) {
    nvml_query_.reset();
    return false;
  }
  nvml_io_ = std::move(*io);
  nvml_deadline_ = std::move(*deadline);
  return true;
}

void Daemon::on_inotify() {
  auto events = inotify_->read_all();
  const auto trigger = Clock::now();
  if (!events) {
    metrics_.event_loop_error("inotify");
    log::error(events.error().message);
    return;
  }
  // The probe has the loop's lowest priority (daemon_probe.cpp). A revoking write's record
  // is taken at its permission check, so it is already waiting: read what waits first (at
  // most one budget of records, rule writes before denied opens) so the repair names the writer.
  if (probe_) on_probe();
  std::set<std::string> dirty;
  for (const auto& ev : *events) {
    if (ev.mask & IN_Q_OVERFLOW) {
      metrics_.inotify_overflow();
      log::warn("inotify queue overflowed; resyncing everything");
      full_resync("overflow");
      return;
    }
    auto it = watches_.find(ev.wd);
    if (it == watches_.end()) continue;
    const WatchTarget target = it->second;
    if (ev.mask & IN_IGNORED) {
      watches_.erase(it);
      std::erase_if(wd_by_path_, [&](const auto& kv) { return kv.second == ev.wd; });
      continue;
    }
    switch (target.kind) {
      case WatchTarget::kContainerFile:
        dirty.insert(target.path);
        break;
      case WatchTarget::kParentDenyFile:
        for (const auto& [dir, w] : containers_)
          if (dir.rfind(target.path + "/", 0) == 0) dirty.insert(dir);
        break;
      case WatchTarget::kTreeDir:
        on_tree_event(target.path, ev);
        break;
      case WatchTarget::kCheckpointDir:
        if (ev.name == base_name(config_.kubelet.checkpoint)) {
          reload_checkpoint();
          maybe_query_nvml();  // a MIG device it names may be new (geometry change)
          reresolve_all();
        }
        break;
      case WatchTarget::kBundleDir:
        for (auto& [dir, w] : containers_) {
          if (w.target.kind == TargetKind::kUnidentified && w.cgroup.leaf.container_id == ev.name) {
            w.identify_attempts = 0;
            schedule_retry(w, kIdentifyRetry[0], trigger);
          }
        }
        break;
      case WatchTarget::kCdiDir:  // a refreshed or new CDI spec (per-claim specs of DRA drivers)
        if (is_cdi_spec_file_name(ev.name)) {
          reload_inventory();
          reresolve_all();
        }
        break;
      case WatchTarget::kDevDir:
        if (ev.name.rfind("nvidia", 0) == 0) {
          reload_inventory();
          reresolve_all();
        }
        break;
    }
  }
  check_all(trigger, [&](const Watched& w) { return dirty.count(w.cgroup.cgroup_dir) > 0; });
  update_gauges();
}

void Daemon::on_tree_event(const std::string& dir, const Inotify::Event& ev) {
  if (!(ev.mask & IN_ISDIR) || ev.name.empty()) return;
  const std::string path = dir + "/" + ev.name;
  if (ev.mask & (IN_CREATE | IN_MOVED_TO)) {
    dir_created(path);
  } else if (ev.mask & (IN_DELETE | IN_MOVED_FROM)) {
    std::vector<std::string> gone;
    for (const auto& [d, w] : containers_)
      if (d == path || d.rfind(path + "/", 0) == 0) gone.push_back(d);
    for (const auto& d : gone) remove_container(d);
  }
}

void Daemon::dir_created(const std::string& path) {
  auto kind = classify_cgroup_dir(node_->kubepods(), path);
  if (!kind) return;
  if (kind->level == CgroupDirKind::kContainer) {
    upsert_container(*kind->container);
    return;
  }
  // A QoS or pod cgroup: watch it first, then look at what was created before the watch.
  watch_tree_dir(path);
  KubepodsTree tree = node_->scan();
  for (const auto& d : tree.parent_dirs)
    if (d.rfind(path + "/", 0) == 0) watch_tree_dir(d);
  for (const auto& cg : tree.containers)
    if (cg.cgroup_dir.rfind(path + "/", 0) == 0 && !containers_.count(cg.cgroup_dir)) upsert_container(cg);
}

void Daemon::upsert_container(const DiscoveredContainer& cg) {
  auto [it, inserted] = containers_.try_emplace(
      cg.cgroup_dir, cg, RepairBudget(config_.repair.burst, config_.repair.max_per_minute),
      RepairLogLimit(config_.repair.log_burst, config_.repair.log_interval));
  Watched& w = it->second;
  if (inserted) {
    // "Pods stuck before allocation": containers keep starting while the checkpoint (written
    // at every allocation) does not move.
    struct stat st{};
    if (::stat(cg.cgroup_dir.c_str(), &st) == 0) {
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
  if (inserted && ready_ && w.target.kind == TargetKind::kGpu) check_and_repair(w, Clock::now());
}

void Daemon::resolve(Watched& w, bool force) {
  if (!force && w.resolved_generation == node_->generation()) return;
  apply_target(w, node_->resolve(w.cgroup));
  w.resolved_generation = node_->generation();
}

void Daemon::apply_target(Watched& w, ContainerTarget target) {
  const bool was_gpu = w.target.kind == TargetKind::kGpu;
  w.target = std::move(target);
  if (w.target.identity) {
    ContainerLabels labels{w.target.identity->pod_namespace, w.target.identity->pod_name,
                           w.target.identity->container_name};
    if (labels != w.labels && !w.labels.pod.empty()) metrics_.forget(w.labels);
    w.labels = labels;
  }
  const bool is_gpu = w.target.kind == TargetKind::kGpu;
  if (is_gpu && w.cgroup_id == 0) {
    struct stat st{};
    if (::stat(w.cgroup.cgroup_dir.c_str(), &st) == 0) {
      w.cgroup_id = st.st_ino;
      dir_by_cgroup_id_[w.cgroup_id] = w.cgroup.cgroup_dir;
    }
  }
  if (is_gpu) watch_in_probe(w);
  if (is_gpu && !w.watching) {
    // cgroup v1: every rule write shows up here. cgroup v2 has no files to watch: the
    // probe's program events, systemd's Reloading and the program query timer stand in.
    for (const char* file : {"/devices.deny", "/devices.allow"}) {
      if (v2()) break;
      int wd = add_watch(w.cgroup.cgroup_dir + file, kDevicesFileMask, {WatchTarget::kContainerFile, w.cgroup.cgroup_dir});
      if (wd >= 0) w.wds.push_back(wd);
    }
    log::info("watching GPU container" + std::string(v2() ? " (cgroup v2)" : "") + ", wants " +
                  device_names(w.target.desired.wanted),
              fields_of(w.labels, w.cgroup.cgroup_dir));
    for (const auto& u : w.target.desired.unresolved)
      log::warn("allocated device not found on this node: " + u, fields_of(w.labels, w.cgroup.cgroup_dir));
    w.watching = true;
  } else if (!is_gpu && was_gpu) {
    if (w.cgroup_id) {
      if (probe_) (void)probe_->unwatch_cgroup(w.cgroup_id);
      dir_by_cgroup_id_.erase(w.cgroup_id);
      w.cgroup_id = 0;
    }
    for (int wd : w.wds) drop_watch(wd);
    w.wds.clear();
    w.watching = false;
    w.missing.clear();
    metrics_.forget(w.labels);
  }
  // Exposure and env-only GPUs (node/exposure.h, core/env_visible.h): per resolve, not per repair.
  if (w.target.identity)
    metrics_.set_container_exposure(w.labels, is_gpu ? std::optional(w.target.exposure.exposed.size()) : std::nullopt,
                                    w.target.env_visible && !w.target.env_visible->device_ids.empty());
}

void Daemon::remove_container(const std::string& cgroup_dir) {
  auto it = containers_.find(cgroup_dir);
  if (it == containers_.end()) return;
  for (int wd : it->second.wds) drop_watch(wd);
  if (it->second.cgroup_id) {
    if (probe_) (void)probe_->unwatch_cgroup(it->second.cgroup_id);
    dir_by_cgroup_id_.erase(it->second.cgroup_id);
  }
  if (it->second.target.kind == TargetKind::kGpu)
    log::info("GPU container gone", fields_of(it->second.labels, cgroup_dir));
  metrics_.forget(it->second.labels);
  node_->bundles().forget(it->second.cgroup.leaf.container_id);
  containers_.erase(it);
}

void Daemon::reresolve_all() {
  std::set<std::string> changed;
  for (auto& [dir, w] : containers_) {
    const bool was_gpu = w.target.kind == TargetKind::kGpu;
    const auto wanted_before = w.target.desired.wanted;
    resolve(w, /*force=*/false);
    if (w.target.kind == TargetKind::kGpu && (!was_gpu || wanted_before != w.target.desired.wanted))
      changed.insert(dir);
  }
  check_all(Clock::now(), [&](const Watched& w) { return changed.count(w.cgroup.cgroup_dir) > 0; });
  update_gauges();
}

void Daemon::check_all(Clock::time_point trigger, const std::function<bool(const Watched&)>& which) {
  // check_and_repair may drop a container whose cgroup vanished: iterate over names.
  std::vector<std::string> dirs;
  for (const auto& [dir, w] : containers_)
    if (which(w)) dirs.push_back(dir);
  for (const auto& dir : dirs)
    if (auto it = containers_.find(dir); it != containers_.end()) check_and_repair(it->second, trigger);
}

void Daemon::schedule_retry(Watched& w, Clock::duration delay, Clock::time_point trigger) {
  if (w.pending_since == Clock::time_point{} || trigger < w.pending_since) w.pending_since = trigger;
  if (!w.retry) {
    const std::string dir = w.cgroup.cgroup_dir;
    auto t = loop_->add_timer([this, dir] {
      auto it = containers_.find(dir);
      if (it == containers_.end()) return;
      Watched& c = it->second;
      const auto since = c.pending_since;
      c.pending_since = {};
      if (c.target.kind == TargetKind::kUnidentified) {
        resolve(c, /*force=*/true);  // its bundle may have appeared on disk since
        if (c.target.kind == TargetKind::kUnidentified) {
          if (++c.identify_attempts < static_cast<int>(std::size(kIdentifyRetry)))
            schedule_retry(c, kIdentifyRetry[c.identify_attempts], since);
          update_gauges();
          return;
        }
      }
      if (c.target.kind == TargetKind::kGpu) check_and_repair(c, since);
      update_gauges();
    }, "retry");
    if (!t) return;
    w.retry = std::move(*t);
  }
  // One timer per container, armed for the earliest moment anything is owed.
  const auto at = Clock::now() + delay;
  if (!w.retry.armed() || at < w.retry_at) {
    w.retry_at = at;
    arm_or_log(w.retry, duration_cast<microseconds>(delay) + microseconds(1), "retry");
  }
}

void Daemon::check_and_repair(Watched& w, Clock::time_point trigger, const Watched::Revocation* cause) {
  // The fight-loop guard holds this container back and its deferred repair comes when the
  // next token does (within the slack of arming it): re-reading after every write of the
  // loop would only burn CPU.
  if (w.throttled && w.retry.armed() && w.retry_at <= w.budget.next_token_at(Clock::now()) + std::chrono::milliseconds(1)) return;
  const std::string& dir = w.cgroup.cgroup_dir;
  const auto fields = fields_of(w.labels, dir);
  const auto now = Clock::now();
  DeviceCheck check = check_devices(w);
  if (is_cgroup_gone(check.read_err)) {
    remove_container(dir);  // removed mid-repair: quietly dropped
    return;
  }
  if (!check.ok()) {
    metrics_.event_loop_error(v2() ? "device-programs" : "devices.list");
    const std::string what = v2() ? "cannot query the device programs: " : "cannot read devices.list: ";
    if (!w.read_error_logged)
      log::error(what + (check.read_err ? std::strerror(check.read_err) : check.parse_error), fields);
    w.read_error_logged = true;
    return;
  }
  w.read_error_logged = false;
  w.programs.clear();
  for (const auto& p : check.programs) ++w.programs[p.owner];
  std::set<DeviceNumber> missing_now;
  bool newly_missing = false;
  for (const auto& m : check.missing) {
    missing_now.insert(m.dev);
    // Drift is a transition: counted when a device that was there goes missing.
    if (!w.missing.count(m.dev) && now >= w.quiet_until) {
      metrics_.drift(w.labels, m.name);
      newly_missing = true;
    }
  }
  if (cause && newly_missing) {
    w.last_revocation = *cause;
    metrics_.revocation(cause->writer);
  }
  w.missing = missing_now;
  if (check.missing.empty()) {
    w.observed_logged = false;
    if (w.throttled && !w.budget.exhausted(now)) {
      w.throttled = false;
      log::info("repairs no longer rate-limited", fields);
    }
    return;
  }
  if (config_.mode == Mode::kObserve) {
    if (!w.observed_logged) {
      log::warn("missing " + device_names(check.missing) + " (observe mode: not repairing)", fields);
      report_event(w, kube::Cause::kObserveMode, check.missing);
    }
    w.observed_logged = true;
    return;
  }
  // Devices the kernel refused recently wait for their back-off; the others go now.
  std::vector<WantedDevice> grantable;
  std::optional<Clock::time_point> next_retry;
  for (const auto& m : check.missing) {
    auto r = w.refused_until.find(m.dev);
    if (r != w.refused_until.end() && now < r->second) {
      next_retry = next_retry ? std::min(*next_retry, r->second) : r->second;
    } else {
      grantable.push_back(m);
    }
  }
  if (next_retry) schedule_retry(w, *next_retry - now, trigger);
  if (grantable.empty()) return;
  if (auto wait = w.budget.acquire(now); wait > Clock::duration::zero()) {
    metrics_.throttled(w.labels);
    if (!w.throttled) {
      log::warn("devices revoked again and again: repairs rate-limited to " +
                    std::to_string(config_.repair.max_per_minute) + "/min after a burst of " +
                    std::to_string(config_.repair.burst),
                fields);
      report_event(w, kube::Cause::kThrottled, grantable,
                   "repairs rate-limited to " + std::to_string(config_.repair.max_per_minute) + "/min after a burst of " +
                       std::to_string(config_.repair.burst) + " (repair.max_per_minute, repair.burst)");
    }
    w.throttled = true;
    schedule_retry(w, wait, trigger);
    return;
  }
  std::string method;
  auto grants = apply_grants(w, grantable, method);
  const auto repair_time = Clock::now() - trigger;
  metrics_.repair_duration(std::chrono::duration<double>(repair_time).count());
  std::vector<WantedDevice> granted;
  for (const auto& g : grants) {
    metrics_.regrant(g.err == 0, method);
    if (g.err == 0) {
      granted.push_back(g.device);
      w.missing.erase(g.device.dev);
      w.refused_until.erase(g.device.dev);
      w.refused_logged.erase(g.device.dev);
      continue;
    }
    if (is_cgroup_gone(g.err)) {
      remove_container(dir);
      return;
    }
    w.refused_until[g.device.dev] = now + config_.repair.rejected_backoff;
    schedule_retry(w, config_.repair.rejected_backoff, trigger);
    if (w.refused_logged.insert(g.device.dev).second) {
      log::Fields f = fields;
      f.device = g.device.name;
      const std::string rule = format_device_rule(grant_rules({g.device})[0]);
      f.rule = rule;
      log::error("cannot grant " + g.device.name + ": " + (g.error.empty() ? describe_grant_error(g.err) : g.error) +
                     "; retrying every " +
                     format_duration(config_.repair.rejected_backoff),
                 f);
      report_event(w, kube::Cause::kGrantRefused, {g.device},
                   g.error.empty() ? describe_grant_error(g.err) : g.error);
    }
  }
  if (granted.empty()) return;
  if (w.cgroup.leaf.driver == CgroupDriver::kSystemd) persist_in_systemd(w);
  // An earlier repair still waiting for its attribution has its own cause (or none).
  if (!w.unlogged_grants.empty() && w.unlogged_trigger != trigger) log_grants(w);
  w.unlogged_grants.insert(w.unlogged_grants.end(), granted.begin(), granted.end());
  if (w.unlogged_trigger == Clock::time_point{}) {
    w.unlogged_trigger = trigger;
    w.unlogged_repair_time = repair_time;
  }
  // The probe's record of the revoking write can trail the inotify event by microseconds:
  // give it a moment so the log line can say who did it.
  const bool attributed = w.last_revocation && explains(w.last_revocation->at, trigger);
  if (!probe_ || attributed) {
    log_grants(w);
    return;
  }
  if (!w.log_timer) {
    const std::string key = dir;
    auto t = loop_->add_timer([this, key] {
      if (auto it = containers_.find(key); it != containers_.end()) log_grants(it->second);
    }, "grant-log");
    if (!t) {
      log_grants(w);
      return;
    }
    w.log_timer = std::move(*t);
  }
  if (!w.log_timer.armed()) arm_or_log(w.log_timer, kAttributionWait, "grant-log");
}

std::vector<DeviceGrant> Daemon::apply_grants(Watched& w, const std::vector<WantedDevice>& grantable,
                                             std::string& method) {
  if (!v2()) {
    method = "cgroupfs";
    return grant_v1(w.cgroup.cgroup_dir, grantable);
  }
  // cgroup v2: each program denying a wanted device is wrapped (it then allows the wanted
  // devices and decides as before for the rest); the others stay as they are.
  method = "bpf";
  auto installed = repair_v2(w.cgroup.cgroup_dir, w.target.desired.wanted);
  std::vector<DeviceGrant> grants;
  for (const auto& d : grantable) {
    DeviceGrant g{d, installed ? 0 : EPERM, installed ? "" : installed.error().message};
    if (installed && std::any_of(installed->still_denied.begin(), installed->still_denied.end(),
                                 [&](const WantedDevice& x) { return x.dev == d.dev; })) {
      g.err = EPERM;
      g.error = "still denied by a device program that cannot be replaced";
    }
    grants.push_back(std::move(g));
  }
  if (installed) {
    metrics_.programs_replaced(installed->replaced.size());
    w.programs.clear();
    for (const auto& p : installed->now) ++w.programs[p.owner];
    for (const auto& left : installed->left_attached)
      log::warn("device program " + std::to_string(left.program.id) + " (" + left.program.name +
                    ") denies a wanted device and stays attached: " + left.reason,
                fields_of(w.labels, w.cgroup.cgroup_dir));
  }
  return grants;
}

void Daemon::log_grants(Watched& w) {
  if (w.unlogged_grants.empty()) return;
  w.log_timer.disarm();
  // Every repair is reported (the event reporter has its own per-pod budget); its log line
  // only within repair.log_burst / repair.log_interval, formatted only when written.
  report_event(w, kube::Cause::kRevoked, w.unlogged_grants);
  const auto line = w.log_limit.on_repair(Clock::now());
  if (!line.log) {
    if (line.summary_at) schedule_repair_log_summary(w, *line.summary_at);
    w.unlogged_grants.clear();
    w.unlogged_trigger = {};
    return;
  }
  log::Fields f = fields_of(w.labels, w.cgroup.cgroup_dir);
  const std::string names = device_names(w.unlogged_grants), rules = grant_rules_text(w.unlogged_grants);
  f.device = names;
  f.rule = rules;
  std::string message = "granted back " + names;
  std::string writer;
  if (w.last_revocation && explains(w.last_revocation->at, w.unlogged_trigger)) {
    writer = w.last_revocation->writer;
    f.writer = writer;
    message += "; revoked by " + w.last_revocation->detail;
  }
  if (line.unlogged > 0) message += "; " + unlogged_repairs_text(line.unlogged, line.since_last_line);
  log::info(message, f);
  w.unlogged_grants.clear();
  w.unlogged_trigger = {};
}

DeviceCheck Daemon::check_devices(const Watched& w) const {
  if (!v2()) return check_v1(w.cgroup.cgroup_dir, w.target.desired);
  // systemd's programs are run like any other: one built from a DeviceAllow= that holds the
  // wanted devices allows them.
  return check_v2(w.cgroup.cgroup_dir, w.target.desired);
}

SystemdClient* Daemon::systemd() {
  if (systemd_) return systemd_.get();
  auto client = SystemdClient::connect(config_.systemd.bus_address, loop_->native(), config_.systemd.timeout);
  if (!client) {
    if (!systemd_error_logged_)
      log::warn("cannot reach systemd (systemd.bus_address): " + client.error().message +
                "; grants are direct only and a daemon-reload will revoke them again");
    systemd_error_logged_ = true;
    return nullptr;
  }
  systemd_error_logged_ = false;
  systemd_ = std::move(*client);
  // A reload re-applies every scope's device policy (v1: deny `a` and its list; v2: a new
  // ANDed program): look at every GPU container once it has finished.
  (void)systemd_->on_reloading([this](bool active) {
    if (active) return;
    check_all(Clock::now(), [](const Watched& w) { return w.target.kind == TargetKind::kGpu; });
    update_gauges();
  });
  return systemd_.get();
}

void Daemon::persist_in_systemd(Watched& w) {
  // The direct grant already restored access (microseconds); asking systemd first would
  // leave the container without its GPU for a D-Bus round trip, or for the whole reload
  // systemd may be busy with. Persisting afterwards makes the next reload keep the grant.
  const std::string unit = scope_unit_of(w.cgroup.cgroup_dir);
  std::vector<WantedDevice> todo;
  for (const auto& d : w.target.desired.wanted)
    if (!w.persisted.count(d.dev)) todo.push_back(d);
  if (unit.empty() || todo.empty() || w.persist_in_flight) return;
  SystemdClient* client = systemd();
  if (!client) return;
  const std::string dir = w.cgroup.cgroup_dir;
  auto started = client->add_device_allow(unit, todo, [this, dir, todo, unit](Status outcome) {
    auto it = containers_.find(dir);
    if (it == containers_.end()) return;
    Watched& c = it->second;
    c.persist_in_flight = false;
    metrics_.regrant(outcome.ok(), "systemd");
    if (!outcome) {
      log::warn("systemd did not add DeviceAllow= to " + unit + ": " + outcome.error().message,
                fields_of(c.labels, dir));
      return;
    }
    for (const auto& d : todo) c.persisted.insert(d.dev);
    log::info("systemd now allows " + device_names(todo) + " in " + unit + " (kept across daemon-reload)",
              fields_of(c.labels, dir));
    resolve(c, /*force=*/true);  // its DeviceAllow= changed: exposure (node/exposure.h)
    // Verify the kernel state systemd left; anything still missing is granted directly.
    c.quiet_until = Clock::now() + std::chrono::milliseconds(100);
    check_and_repair(c, Clock::now());
    update_gauges();
  });
  if (!started) {
    log::warn("cannot ask systemd to allow devices in " + unit + ": " + started.error().message,
              fields_of(w.labels, dir));
    return;
  }
  w.persist_in_flight = true;
  w.quiet_until = Clock::now() + config_.systemd.timeout + std::chrono::milliseconds(100);
}

void Daemon::update_gauges() {
  std::size_t watched = 0, missing = 0, unidentified = 0, throttled = 0, conflicts = 0;
  std::map<ProgramOwner, std::size_t> programs;
  std::set<std::string> identity_problems;  // logged once while they last
  for (const auto& a : node_->merged().ambiguous) identity_problems.insert(describe(a));
  // Pods between their cgroup's creation and their sandbox's (or being torn down): normal and
  // brief, so not a warning; `check` lists them.
  if (!node_->merged().unused_pod_resources_unnamed.empty())
    log::debug("PodResources entries not used while " + std::to_string(node_->merged().unnamed_pods.size()) +
               " pod(s) on the node have no known name");
  for (const auto& [dir, w] : containers_) {
    if (w.target.identity_conflict) {
      ++conflicts;
      identity_problems.insert(w.target.problem);
    }
    if (w.target.kind == TargetKind::kGpu) {
      for (const auto& [owner, n] : w.programs) programs[owner] += n;
      ++watched;
      missing += !w.missing.empty();
      throttled += w.throttled;
    } else if (w.target.kind == TargetKind::kUnidentified && node_->allocations().pod_has_devices(w.cgroup.pod.pod_uid)) {
      ++unidentified;
    }
  }
  metrics_.set_containers_watched(watched);
  metrics_.set_containers_missing_devices(missing);
  metrics_.set_containers_unidentified(unidentified);
  metrics_.set_containers_throttled(throttled);
  metrics_.set_ambiguous_pod_identities(node_->merged().ambiguous.size());
  metrics_.set_identity_conflicts(conflicts);
  report_cdi();
  for (const auto& text : identity_problems)
    if (!identity_problems_logged_.count(text)) log::warn("identity not used: " + text);
  identity_problems_logged_ = std::move(identity_problems);
  maintain_syscall_hook(missing > 0);
  if (v2()) {
    for (ProgramOwner owner : {ProgramOwner::kOurs, ProgramOwner::kSystemd, ProgramOwner::kRuntime})
      metrics_.set_device_programs(to_string(owner), programs[owner]);
  }
}

int run_daemon(const std::string& config_path) {
  auto config = load_config_file(config_path);
  if (!config) {
    std::fprintf(stderr, "gpu-devwatch run: %s\n", config.error().message.c_str());
    return 2;
  }
  log::init(config->log.level);
  Daemon daemon(*config, config_path);
  return daemon.run();
}

}  // namespace gdw
