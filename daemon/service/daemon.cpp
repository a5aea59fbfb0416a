// The daemon's start, signals, configuration reload and heartbeat: the loop's wiring.
#include "service/daemon.h"

#include <signal.h>
#include <sys/epoll.h>
#include <systemd/sd-daemon.h>

#include "log/log.h"
#include "node/config_file.h"
#include "service/arm_timer.h"
#include "watch/loop_slice.h"

namespace gdw {
namespace {

using std::chrono::duration_cast;
using std::chrono::microseconds;

// How long a log line may wait for the rest of its batch: unnoticeable to whoever reads
// the log, and what a SIGKILL can lose of it at most.
constexpr microseconds kLogHold{5000};

// /healthz's limit: systemd's WatchdogSec when the service manager set one (it kills a loop
// stalled that long anyway), else metrics.health_stale_after.
Clock::duration health_stale_after(const Config& config) {
  std::uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) return microseconds(usec);
  return config.metrics.health_stale_after;
}

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

// Whether `fresh` differs from `running` only in what a reload applies in place (log level,
// metrics access, timers' pace, Kubernetes Events). Everything else (paths, mode, repair
// guard, probe, device policy) built the node model, the container table, their watches and
// the probe's cgroup set: a change there starts them over. Sections are compared whole, so
// a key added later restarts them until it is listed here.
bool same_node_inputs(const Config& running, const Config& fresh) {
  Config f = fresh;
  f.log = running.log;
  f.metrics = running.metrics;
  f.daemon = running.daemon;
  f.kubernetes = running.kubernetes;
  f.events = running.events;
  f.conditions = running.conditions;
  return f == running;
}

}  // namespace

Daemon::Daemon(Config config, std::string config_path)
    : config_(std::move(config)), repair_settings_(RepairSettings::from(config_)), config_path_(std::move(config_path)) {}

Daemon::~Daemon() = default;

int Daemon::run() {
  if (auto s = start(); !s) {
    log::error("cannot start: " + s.error().message);
    return 1;
  }
  apply_loop_slice();  // on the loop's own thread, which runs it from here
  // A storm's repairs log one line each: written in batches, off the loop.
  if (!log::write_in_batches(kLogHold)) log::warn("log lines are written by the event loop: no writer thread");
  int code = loop_->run();
  log::write_directly();
  sd_notify(0, "STOPPING=1");
  log::info("stopped");
  return code;
}

void Daemon::apply_loop_slice() {
  const std::chrono::microseconds asked(config_.daemon.event_loop_slice_us);
  auto slice = request_loop_slice(asked);
  if (!slice) {
    log::info("event loop: scheduler slice left as it is: " + slice.error().message);
  } else if (asked.count() == 0) {
    log::info("event loop: the kernel's default scheduler slice (daemon.event_loop_slice_us: 0)");
  } else {
    log::info("event loop: scheduler slice " + std::to_string(*slice / 1000) +
              " us, so a repair's wake-up preempts sooner (CPU share unchanged)");
  }
}

Status Daemon::start_heartbeat() {
  heartbeat_.set_stale_after(health_stale_after(config_));
  heartbeat_.beat(Clock::now());
  // Top priority: a pending beat runs at the loop's next turn however busy it is; only a
  // loop that does not come back (a call that blocks) goes stale.
  auto timer = loop_->add_timer([this] {
    heartbeat_.beat(Clock::now());
    arm_timer(heartbeat_timer_, heartbeat_.stale_after() / 4, "heartbeat", metrics_);
  }, "heartbeat", duration_cast<microseconds>(heartbeat_.stale_after() / 4), -100);
  if (!timer) return timer.error();
  heartbeat_timer_ = std::move(*timer);
  return {};
}

Status Daemon::start_signals() {
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
  return {};
}

Status Daemon::start_timers() {
  auto timer = loop_->add_timer([this] {
    full_resync("periodic");
    arm_timer(resync_timer_, config_.daemon.resync_interval, "resync", metrics_);
  }, "resync", duration_cast<microseconds>(config_.daemon.resync_interval));
  if (!timer) return timer.error();
  resync_timer_ = std::move(*timer);

  // Device programs: a link released by its holder's exit makes no bpf() call the probe
  // could see.
  auto query = loop_->add_timer([this] {
    if (access_ && access_->policy_in_programs()) {
      check_gpu_containers();
      update_gauges();
    }
    arm_timer(program_query_timer_, config_.daemon.program_query_interval, "program-query", metrics_);
  }, "program-query", duration_cast<microseconds>(config_.daemon.program_query_interval));
  if (!query) return query.error();
  program_query_timer_ = std::move(*query);

  auto gauges = loop_->add_timer([this] { update_gauges(); }, "gauges");
  if (!gauges) return gauges.error();
  gauge_timer_ = std::move(*gauges);
  return {};
}

Status Daemon::start() {
  auto loop = EventLoop::create();
  if (!loop) return loop.error();
  loop_ = std::move(*loop);
  loop_->on_callback_error([this](const std::string& source, const std::string& what) {
    metrics_.event_loop_error(source);
    log::error("event handler " + source + " failed: " + what);
  });
  if (auto s = start_signals(); !s) return s;
  auto in = Inotify::create();
  if (!in) return in.error();
  inotify_.emplace(std::move(*in));
  watches_.emplace(*inotify_, metrics_);
  // Highest priority: repairs are what the daemon is for.
  auto src = loop_->add_io(inotify_->fd(), EPOLLIN, [this](std::uint32_t) { on_inotify(); }, "inotify", -10);
  if (!src) return src.error();
  inotify_source_ = std::move(*src);
  persistence_.emplace(config_, loop_->native(), [this] {
    // A reload re-applied every scope's device policy (v1: deny `a` and its list; v2: a
    // new ANDed program): look at every GPU container once it has finished.
    check_gpu_containers();
    update_gauges();
  });
  repair_.emplace(config_, repair_settings_, *loop_, containers_, metrics_, attribution_, repair_hooks());
  repair_->set_persistence(&*persistence_);
  probe_.emplace(config_, *loop_, containers_, metrics_, attribution_, probe_hooks());  // loaded below
  if (auto s = start_timers(); !s) return s;
  if (auto s = loop_->enable_watchdog(); !s) log::warn(s.error().message);
  if (auto s = start_heartbeat(); !s) return s.error();

  if (!config_.metrics.listen.empty()) {
    auto healthz = [this] { return heartbeat_.answer(Clock::now()); };
    auto access = load_metrics_access(config_.metrics.web_config);
    if (!access) return access.error();
    if (auto s = metrics_.serve(config_.metrics.listen, healthz, std::move(*access)); !s) return s.error();
  }
  nvml_ = std::make_unique<NvmlRunner>(*loop_, [this](std::optional<NvmlAnswer> answer, Clock::time_point started) {
    const bool answered = answer.has_value();
    if (answer) node_->set_nvml_answer(std::move(*answer));
    health_->inventory_refreshed(answered, started);
    reresolve_all();  // the answer, or the health check's own re-read, may change targets
  });
  probe_->apply_config();
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
  access_.reset();  // chosen once the node's cgroup version is located
  NodeHealthHooks hooks;
  hooks.on_allocations_changed = [this] { reresolve_all(); };
  hooks.requery_nvml = [this] { return maybe_query_nvml(/*force=*/true); };
  hooks.running_containers = [this] { return running_containers(); };
  hooks.on_first_answers = [this] { notify_ready_when_settled(); };
  hooks.on_faults_changed = [this] { gauges_changed(); };  // node conditions (update_gauges)
  health_ = std::make_unique<NodeHealthMonitor>(config_, *loop_, metrics_, *node_, std::move(hooks));
  // Without these the daemon still repairs from the checkpoint: not fatal.
  if (auto s = health_->start(); !s) log::error("node health checks (PodResources, device plugins) off: " + s.error().message);
}

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
  arm_timer(heartbeat_timer_, heartbeat_.stale_after() / 4, "heartbeat", metrics_);  // at the new pace now
  const bool same_node = same_node_inputs(config_, *fresh);
  if (!same_node) {
    // Start over from the new configuration: paths may have changed.
    for (auto& [dir, w] : containers_) {
      metrics_.forget(w.labels);
      probe_->unwatch(w);
    }
    containers_.clear();
    watches_->clear();
  }
  const bool slice_changed = fresh->daemon.event_loop_slice_us != config_.daemon.event_loop_slice_us;
  config_ = *fresh;
  repair_settings_ = RepairSettings::from(config_);
  if (slice_changed) apply_loop_slice();
  if (!same_node) {
    persistence_->reset();  // systemd.bus_address may have changed
    probe_->apply_config();
    start_node(config_);
    located_ = false;
  }
  start_events();  // the service account token may have been rotated
  metrics_.config_reload(true);
  log::info("SIGHUP: configuration reloaded, mode " + to_string(config_.mode) +
            (same_node ? " (node inputs unchanged: containers, watches and probe kept)" : ""));
  // Kept or not, every input is looked at again (files by their stamps, every container's
  // rules read): what a SIGHUP promises.
  full_resync("reload");
}

RepairLoop::Hooks Daemon::repair_hooks() {
  RepairLoop::Hooks hooks;
  hooks.gone = [this](const std::string& dir) { remove_container(dir); };
  hooks.retry = [this](Watched& w, Clock::duration delay, Clock::time_point trigger) {
    schedule_retry(w, delay, trigger);
  };
  hooks.checked = [this](Watched& w) { watch_restoring_writes(w); };
  hooks.persisted = [this](Watched& w) {
    resolve(w, /*force=*/true);  // its DeviceAllow= changed: exposure (node/exposure.h)
    check_and_repair(w, Clock::now());
    gauges_changed();
  };
  return hooks;
}

ProbeLink::Hooks Daemon::probe_hooks() {
  ProbeLink::Hooks hooks;
  hooks.check = [this](Watched& w, const Revocation* cause) { check_and_repair(w, Clock::now(), cause); };
  hooks.update_gauges = [this] { update_gauges(); };
  hooks.gauges_changed = [this] { gauges_changed(); };
  hooks.policy_in_programs = [this] { return access_ && access_->policy_in_programs(); };
  hooks.cgroup_created = [this](std::uint32_t hierarchy_id, const std::string& path) {
    on_cgroup_created(hierarchy_id, path);
  };
  hooks.revocation_named = [this](Watched& w) { repair_->revocation_named(w); };
  return hooks;
}

void Daemon::on_cgroup_created(std::uint32_t hierarchy_id, const std::string& path) {
  if (!located_ || tree_hierarchy_id_ != hierarchy_id) return;
  dir_created(node_->kubepods().hierarchy_root + path);
}

void Daemon::start_events() {
  // The old one's threads are joined (requests in flight aborted); its conditions carry over.
  kube_ = kube::KubeReporting::create(config_, *loop_, metrics_, std::move(kube_));
  repair_->set_reporting(kube_ ? kube_->events() : nullptr, probe_->loaded());
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
