// The daemon's start, signals, configuration reload and heartbeat: the loop's wiring.
#include "service/daemon.h"

#include <signal.h>
#include <sys/epoll.h>
#include <systemd/sd-daemon.h>

#include "log/log.h"
#include "metrics/repair_metrics.h"
#include "memory/resident_pages.h"
#include "node/config_file.h"
#include "service/arm_timer.h"
#include "watch/loop_slice.h"

namespace gdw {
namespace {

// cgroup v2: whether repairs' swaps carry a revision (Linux 6.17+), in the log and a gauge,
// once the node's device policy is known to be in programs.
void announce_swaps(const DeviceAccess& access, const std::string& kubepods_dir, Metrics& metrics) {
  auto checked = access.swaps_check_revision(kubepods_dir);
  if (!access.policy_in_programs()) return;
  if (!checked) {
    log::warn("cgroup v2: cannot tell whether the kernel keeps revisions of a cgroup's device programs "
              "(querying " + kubepods_dir + " failed); each repair's query tells");
    return;
  }
  RepairMetrics(metrics).set_swap_revisions(*checked);
  if (*checked)
    log::info("cgroup v2: device program swaps carry the revision of the query they were decided on "
              "(expected_revision): one that anything else changed the cgroup under is refused (ESTALE) and "
              "decided again at once");
  else
    log::info("cgroup v2: the kernel keeps no revisions of a cgroup's device programs (before Linux 6.17): a swap "
              "names the program it replaces (BPF_F_REPLACE), and the repair's next query sees any change "
              "beside it");
}

}  // namespace

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
    DaemonMetrics(metrics).config_reload(false);
    log::error("SIGHUP: keeping the running configuration: " + access.error().message);
    return false;
  }
  if (auto s = metrics.reserve(std::move(*access)); !s) log::error("SIGHUP: " + s.error().message);
  return true;
}

// Whether `fresh` differs from `running` only in what a reload applies in place (log level,
// metrics access, timers' pace, Kubernetes Events and conditions). Everything else (paths, mode, repair
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

// The resyncs that compare every bundle's config.json again (BundleIndex::refresh explains
// why the periodic one need not): what an operator asks for with SIGHUP, what follows lost
// events, and the first.
BundleRefreshDepth bundle_refresh_depth(std::string_view reason) {
  for (std::string_view r : {"startup", "reload", "overflow"})
    if (r == reason) return BundleRefreshDepth::kEveryStamp;
  return BundleRefreshDepth::kChangedListings;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void report_node_faults(kube::KubeReporting* kube, const NodeHealthMonitor* health) {
  if (kube && health) kube->node_faults(health->checkpoint_verdict(), health->plugins_verdict());
}

// A full check of every container, once the allocation records' first answers are in: the
// node conditions and the readiness gate may say what it found.
void report_checked(kube::KubeReporting* kube, const NodeHealthMonitor* health) {
  if (kube && health && health->first_answers_in()) kube->containers_checked();
}

}  // namespace

Daemon::Daemon(Config config, std::string config_path)
    : config_(std::move(config)), config_path_(std::move(config_path)) {}

Daemon::~Daemon() = default;

int Daemon::run() {
  if (auto s = start(); !s) {
    log::error("cannot start: " + s.error().message);
    return 1;
  }
  apply_loop_scheduling();  // on the loop's own thread, which runs it from here
  // A storm's repairs log one line each: written in batches, off the loop.
  if (!log::write_in_batches(kLogHold)) log::warn("log lines are written by the event loop: no writer thread");
  int code = loop_->run();
  log::write_directly();
  sd_notify(0, "STOPPING=1");
  log::info("stopped");
  return code;
}

void Daemon::apply_loop_scheduling() {
  if (const auto fifo = static_cast<int>(config_.daemon.event_loop_fifo_priority); fifo > 0) {
    auto fifo_set = request_loop_fifo(fifo);
    if (fifo_set) {
      loop_fifo_ = true;
      log::info("event loop: SCHED_FIFO priority " + std::to_string(fifo) +
                ", so a repair's wake-up preempts every fair task (the other threads stay fair)");
      return;
    }
    log::warn("event loop: SCHED_FIFO priority " + std::to_string(fifo) + " refused (" + fifo_set.error().message +
              "; needs CAP_SYS_NICE or LimitRTPRIO=, and no RestrictRealtime=): it stays a fair task");
  }
  if (loop_fifo_) {
    if (auto s = request_loop_fair(); !s) {
      log::warn("event loop: stays under SCHED_FIFO: " + s.error().message);
      return;
    }
    loop_fifo_ = false;
  }
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

Status Daemon::start_timers() {
  auto timer = loop_->add_timer([this] {
    full_resync("periodic");
    arm_timer(resync_timer_, config_.daemon.resync_interval, "resync", DaemonMetrics(metrics_));
  }, "resync", duration_cast<microseconds>(config_.daemon.resync_interval));
  if (!timer) return timer.error();
  resync_timer_ = std::move(*timer);
  heartbeat_.set_stale_after(health_stale_after(config_));
  heartbeat_.beat(Clock::now());
  // Top priority: a pending beat runs at the loop's next turn however busy it is; only a
  // loop that does not come back (a call that blocks) goes stale.
  auto beat = loop_->add_timer([this] {
    heartbeat_.beat(Clock::now());
    arm_timer(heartbeat_timer_, heartbeat_.stale_after() / 4, "heartbeat", DaemonMetrics(metrics_));
  }, "heartbeat", duration_cast<microseconds>(heartbeat_.stale_after() / 4), -100);
  if (!beat) return beat.error();
  heartbeat_timer_ = std::move(*beat);
  return {};
}

Status Daemon::start_signals() {
  for (int sig : {SIGTERM, SIGINT}) {
    auto s = loop_->add_signal(sig, [this, sig] {
      log::info(std::string("received ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT") + ", exiting");
      loop_->exit(0);
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

Status Daemon::start() {
  auto loop = EventLoop::create();
  if (!loop) return loop.error();
  loop_ = std::move(*loop);
  loop_->on_callback_error([this](const std::string& source, const std::string& what) {
    DaemonMetrics(metrics_).event_loop_error(source);
    log::error("event handler " + source + " failed: " + what);
  });
  if (auto s = start_signals(); !s) return s;
  nvml_ = std::make_unique<NvmlRunner>(*loop_, [this](std::optional<NvmlAnswer> answer, Clock::time_point started) {
    on_nvml_answer(std::move(answer), started);
  });
  if (auto s = start_node(); !s) return s;
  if (auto s = start_timers(); !s) return s;
  if (auto s = loop_->enable_watchdog(); !s) log::warn(s.error().message);
  start_events();
  log::info("starting: mode " + to_string(config_.mode) + ", metrics on " +
            (config_.metrics.listen.empty() ? std::string("(off)") : config_.metrics.listen));
  full_resync("startup");
  // /metrics answers only now: the probe is loaded and every container known, so a
  // revocation made from its first answer on is attributed and counted.
  if (!config_.metrics.listen.empty()) {
    auto healthz = [this] { return heartbeat_.answer(Clock::now()); };
    auto access = load_metrics_access(config_.metrics.web_config);
    if (!access) return access.error();
    if (auto s = metrics_.serve(config_.metrics.listen, healthz, std::move(*access)); !s) return s.error();
  }
  notify_ready_when_settled();  // now, or at PodResources' first outcome
  return {};
}

Status Daemon::start_node() {
  if (kube_) kube_->containers_unchecked();  // the new fleet's first counts are no verdict
  health_.reset();
  fleet_.reset();
  inputs_source_ = EventSource();
  inputs_ = std::make_unique<NodeInputs>(config_, metrics_);
  if (auto s = inputs_->start(); !s) return s;
  auto src = loop_->add_io(inputs_->fd(), EPOLLIN, [this](std::uint32_t) { on_input_changes(inputs_->read()); },
                           "inotify-inputs");
  if (!src) return src.error();
  inputs_source_ = std::move(*src);
  fleet_ = std::make_unique<ContainerFleet>(config_, RepairSettings::from(config_), *loop_, metrics_, inputs_->model());
  if (auto s = fleet_->start(); !s) return s;
  if (kube_) fleet_->set_reporting(kube_.get());
  health_ = std::make_unique<NodeHealthMonitor>(config_, *loop_, metrics_, inputs_->model(), *fleet_, *nvml_,
                                                [this](HealthChange change) { on_health_change(change); });
  // Without these the daemon still repairs from the checkpoint: not fatal.
  if (auto s = health_->start(); !s) log::error("node health checks (PodResources, device plugins) off: " + s.error().message);
  return {};
}

void Daemon::reload_config() {
  auto fresh = load_config_file(config_path_);
  if (!fresh) {
    DaemonMetrics(metrics_).config_reload(false);
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
  arm_timer(heartbeat_timer_, heartbeat_.stale_after() / 4, "heartbeat", DaemonMetrics(metrics_));  // the new pace
  const bool same_node = same_node_inputs(config_, *fresh);
  const bool scheduling_changed = fresh->daemon.event_loop_slice_us != config_.daemon.event_loop_slice_us ||
                                  fresh->daemon.event_loop_fifo_priority != config_.daemon.event_loop_fifo_priority;
  config_ = *fresh;
  if (scheduling_changed) apply_loop_scheduling();
  // Start over from the new configuration: paths may have changed.
  if (!same_node) {
    if (auto s = start_node(); !s) log::error("SIGHUP: " + s.error().message);
  }
  start_events();  // the service account token may have been rotated
  DaemonMetrics(metrics_).config_reload(true);
  log::info("SIGHUP: configuration reloaded, mode " + to_string(config_.mode) +
            (same_node ? " (node inputs unchanged: containers, watches and probe kept)" : ""));
  // Kept or not, every input is looked at again (files by their stamps, every container's
  // rules read): what a SIGHUP promises.
  full_resync("reload");
}

void Daemon::full_resync(const std::string& reason) {
  const auto start = Clock::now();
  if (!fleet_) return;  // a reload could not start the node over: the next one may
  if (!inputs_->locate()) {
    DaemonMetrics(metrics_).resync(reason, seconds_since(start));
    fleet_->update_gauges();
    return;
  }
  if (!fleet_->has_access()) {
    auto access = make_device_access(inputs_->model().version());
    announce_swaps(*access, inputs_->model().kubepods().dir(), metrics_);
    fleet_->set_access(std::move(access));
  }
  inputs_->load(bundle_refresh_depth(reason));
  health_->checkpoint_or_inventory_changed();
  if (!nvml_->running() && inputs_->model().needs_nvml()) nvml_->start(config_);
  fleet_->sync(inputs_->model().scan());
  report_checked(kube_.get(), health_.get());
  DaemonMetrics(metrics_).resync(reason, seconds_since(start));
  log::debug("resync (" + reason + ") took " + std::to_string(seconds_since(start) * 1000) + " ms");
}

void Daemon::on_input_changes(const InputChanges& changes) {
  if (changes.overflow) {
    log::warn("inotify queue overflowed; resyncing everything");
    full_resync("overflow");
    return;
  }
  if (changes.checkpoint) inputs_->reload_checkpoint();
  if (changes.inventory) inputs_->reload_inventory();
  if (changes.checkpoint || changes.inventory) {
    health_->checkpoint_or_inventory_changed();
    // A MIG device the checkpoint names may be new (a geometry change).
    if (!nvml_->running() && inputs_->model().needs_nvml()) nvml_->start(config_);
    fleet_->reresolve_all();
  }
  for (const auto& id : changes.bundles) fleet_->bundle_appeared(id);
}

void Daemon::on_nvml_answer(std::optional<NvmlAnswer> answer, Clock::time_point started) {
  const bool answered = answer.has_value();
  if (answer) inputs_->model().set_nvml_answer(std::move(*answer));
  health_->inventory_refreshed(answered, started);
  fleet_->reresolve_all();  // the answer, or the health check's own re-read, may change targets
}

void Daemon::on_health_change(HealthChange change) {
  if (change == HealthChange::kAllocations) fleet_->reresolve_all();
  if (change == HealthChange::kFirstAnswers) notify_ready_when_settled();
  if (change == HealthChange::kFaults) report_node_faults(kube_.get(), health_.get());
  if (change == HealthChange::kFirstAnswers) report_checked(kube_.get(), health_.get());
}

void Daemon::notify_ready_when_settled() {
  if (ready_notified_ || !health_ || !health_->first_answers_in()) return;
  ready_notified_ = true;
  sd_notifyf(0, "READY=1\nSTATUS=watching %zu GPU container(s); eBPF probe %s", fleet_->gpu_containers(),
             fleet_->probe_status().c_str());
  log::info("ready");
  // Startup (linking ~100 libraries, the first resync, the first PodResources answer) is
  // done: what only it touched need not stay resident (memory/resident_pages.h).
  if (auto released = release_startup_memory(); !released)
    log::warn("keeping startup memory resident: " + released.error().message);
  else
    log::debug("released " + std::to_string(released->file_kib) + " KiB of startup-only file pages");
}

void Daemon::start_events() {
  // The old one's threads are joined (requests in flight aborted) before the new one starts.
  kube_ = kube::KubeReporting::create(config_, *loop_, metrics_, std::move(kube_), [this] {
    if (fleet_) fleet_->update_gauges();
  });
  report_node_faults(kube_.get(), health_.get());
  fleet_->set_reporting(kube_.get());
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
