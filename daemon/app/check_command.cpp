#include "app/check_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>

#include "app/check_exposure.h"
#include "app/runtime_apply_wait.h"
#include "backend/systemd_scope.h"
#include "node/config_file.h"
#include "node/node_loader.h"
#include "node/node_model.h"
#include "node/self_exe.h"
#include "probe/probe.h"
#include "service/health_gatherer.h"
#include "service/repair_step.h"
#include "service/systemd_persistence.h"

namespace gdw {
namespace {

using json = nlohmann::ordered_json;
// Processes are the live kernel's (the first process's parent), whatever the fixture root.
constexpr const char* kLiveProcRoot = "/proc";

using Observation = Result<DeviceState>;

const std::vector<WantedDevice>& missing_of(const Observation& o) {
  static const std::vector<WantedDevice> kNone;
  return o ? o->missing : kNone;
}

struct ContainerReport {
  ContainerTarget target;
  Observation before = Error{"not observed"};
  std::vector<DeviceOutcome> grants;
  std::string systemd_note;  // systemd driver: what SetUnitProperties did
  std::string repair_note;   // what the grant changed beyond the devices (device programs wrapped)
  std::string repair_error;  // why the grant failed as a whole
  std::string apply_note;    // what of a runtime's create or update still went on at the wait's limit
  std::optional<Observation> after;

  const Observation& final_check() const { return after ? *after : before; }
  std::string status() const {
    const Observation& now = final_check();
    if (!now && is_cgroup_gone(now.error())) return "gone";
    if (!now) return "unreadable";
    if (!now->missing.empty()) return grants.empty() && repair_error.empty() ? "missing" : "repair-failed";
    if (!grants.empty()) return "repaired";
    if (!target.desired.unresolved.empty()) return "unresolved";
    return "ok";
  }
  bool needs_attention() const {
    std::string s = status();
    return s != "ok" && s != "repaired" && s != "gone";
  }
};

// The node faults beside device drift: what PodResources said, whether the checkpoint
// describes this host, whether the device plugins answer.
struct NodeHealth {
  std::string pod_resources;  // "" when not asked (kubelet.source: checkpoint)
  bool pod_resources_ok = false;
  StaleCheckpointReport stale;
  std::vector<DevicePluginProbe> plugins;
  std::string plugins_error;
  bool needs_attention() const {
    return stale.stale || std::any_of(plugins.begin(), plugins.end(), [](const auto& p) { return !p.up; });
  }
};

NodeHealth gather_health(NodeModel& node, const Config& config) {
  NodeHealth h;
  auto gatherer = HealthGatherer::create(config, Duration(0));
  if (!gatherer) {
    h.plugins_error = gatherer.error().message;
    h.stale = node.stale_report();
    return h;
  }
  HealthGatherer::Once once = (*gatherer)->gather_once(config);
  if ((*gatherer)->asks_pod_resources()) {
    h.pod_resources = once.pod_resources ? once.pod_resources->message : once.pod_resources_error;
    h.pod_resources_ok = once.pod_resources && once.pod_resources->ok;
    if (h.pod_resources_ok) node.set_pod_resources(std::move(once.pod_resources->containers));
  }
  h.stale = node.stale_report();
  h.plugins = std::move(once.plugins);
  h.plugins_error = std::move(once.plugins_error);
  return h;
}

std::string who(const ContainerTarget& t) { return check_who(t); }

std::string names(const std::vector<WantedDevice>& devices) {
  if (devices.empty()) return "-";
  std::string s;
  for (const auto& d : devices) s += (s.empty() ? "" : " ") + d.name;
  return s;
}

json device_json(const WantedDevice& d) {
  return json{{"device", d.name},
              {"rule", format_device_rule(DeviceRule{d.dev.type, d.dev.major, d.dev.minor, d.access})},
              {"reason", d.reason}};
}

std::string grant_result(const DeviceOutcome& g) { return g.outcome ? "granted" : g.outcome.error().message; }

// Whether a gpu-devwatch daemon's eBPF probe is loaded on this node, in words.
std::string probe_state() {
  auto loaded = probe_loaded_on_node();
  if (!loaded) return "unknown (" + loaded.error().message + ")";
  if (!loaded->loaded) return "not loaded";
  return std::string("loaded (a gpu-devwatch daemon attributes rule writes); syscall hook ") +
         (loaded->syscall_hook_attached ? "attached (denied opens reported)" : "detached");
}

void print_health_text(const NodeModel& node, const NodeHealth& h) {
  if (!h.pod_resources.empty())
    fmt::print("podresources: {}{}\n", h.pod_resources, h.pod_resources_ok ? "" : " (allocations from the checkpoint alone)");
  for (const auto& d : node.merged().disagreements) fmt::print("  disagreement: {}\n", describe(d));
  for (const auto& a : node.merged().ambiguous) fmt::print("AMBIGUOUS {}\n", describe(a));
  if (!node.merged().unnamed_pods.empty())
    fmt::print("pods whose name no bundle states (PodResources entries not used meanwhile): {}\n",
               fmt::join(node.merged().unnamed_pods, " "));
  fmt::print("checkpoint freshness: {}\n", h.stale.stale ? "STALE" : "ok");
  for (const auto& r : h.stale.reasons) fmt::print("  {}\n", r);
  if (!h.stale.unverifiable_ids.empty())
    fmt::print("  {} device ID(s) cannot be verified here\n", h.stale.unverifiable_ids.size());
  if (!h.plugins_error.empty()) fmt::print("device plugins: {}\n", h.plugins_error);
  for (const auto& p : h.plugins) {
    fmt::print("device plugin {}: {}", p.socket, p.up ? "answers" : "NOT ANSWERING");
    if (p.up) fmt::print(" ({} µs)\n", p.latency.count());
    else fmt::print(" ({})\n", p.error ? p.error->message : "");
  }
}

void print_text(const NodeModel& node, const DeviceAccess& access, const std::vector<ContainerReport>& reports,
                const std::vector<ContainerTarget>& unidentified, std::size_t untouched, const std::string& nvml_note) {
  const auto& cp = node.checkpoint();
  const auto& inv = node.inventory();
  fmt::print("kubepods:   {} ({})\n", node.kubepods().dir(), access.description());
  fmt::print("checkpoint: {} — {} entries, checksum {}{}\n", node.config().kubelet.checkpoint,
             cp.checkpoint.entries.size(), cp.checkpoint.checksum_valid ? "valid" : "INVALID",
             cp.used ? "" : " (entries ignored: kubelet.on_invalid_checksum=ignore)");
  for (const auto& e : cp.checkpoint.entry_errors)
    fmt::print("  entry {} ({}/{}): {}\n", e.index, e.pod_uid, e.container_name, e.message);
  fmt::print("inventory:  {} GPU(s), MIG mapping from {}{}\n", inv.gpus.size(), inv.mig_source, nvml_note);
  for (const auto& p : inv.problems) fmt::print("  {}\n", p);
  fmt::print("cdi specs:  {} file(s), {} device(s) in {}\n", node.cdi_spec_files(), inv.cdi_devices.size(),
             fmt::join(node.config().cdi.spec_dirs, " "));
  for (const auto& e : node.cdi_errors()) fmt::print("  NOT USED {}\n", e);
  fmt::print("eBPF probe: {}\n", probe_state());
  fmt::print("mode:       {}\n\n", to_string(node.config().mode));

  std::size_t w_who = 23, w_want = 14, w_miss = 7;
  for (const auto& r : reports) {
    w_who = std::max(w_who, who(r.target).size());
    w_want = std::max(w_want, names(r.target.desired.wanted).size());
    w_miss = std::max(w_miss, names(missing_of(r.before)).size());
  }
  fmt::print("{:<{}}  {:<{}}  {:<{}}  {}\n", "NAMESPACE/POD/CONTAINER", w_who, "DEVICES WANTED", w_want, "MISSING", w_miss,
             "STATUS");
  for (const auto& r : reports) {
    fmt::print("{:<{}}  {:<{}}  {:<{}}  {}\n", who(r.target), w_who, names(r.target.desired.wanted), w_want,
               names(missing_of(r.before)), w_miss, r.status());
  }
  if (reports.empty()) fmt::print("(no running container holds a device of {})\n", fmt::join(node.config().devices.resources, ", "));

  for (const auto& r : reports) {
    for (const auto& g : r.grants)
      fmt::print("{}: {} {} (c {}) — {}\n", who(r.target), g.outcome ? "granted" : "could not grant", g.device.name,
                 format_device_number(g.device.dev), grant_result(g));
    if (!r.systemd_note.empty()) fmt::print("{}: {}\n", who(r.target), r.systemd_note);
    if (!r.apply_note.empty() && !r.grants.empty())
      fmt::print("{}: repaired though {} after repair.apply_wait_limit\n", who(r.target), r.apply_note);
    else if (!r.apply_note.empty())
      fmt::print("{}: {} after repair.apply_wait_limit (nothing was granted)\n", who(r.target), r.apply_note);
    if (!r.repair_note.empty()) fmt::print("{}: {}\n", who(r.target), r.repair_note);
    if (!r.repair_error.empty()) fmt::print("{}: could not replace the device programs: {}\n", who(r.target), r.repair_error);
    if (!r.final_check() && !is_cgroup_gone(r.final_check().error()))
      fmt::print("{}: {}\n", who(r.target), r.final_check().error().message);
    for (const auto& u : r.target.desired.unresolved) fmt::print("{}: allocated but not found: {}\n", who(r.target), u);
    if (!r.target.problem.empty()) fmt::print("{}: {}\n", who(r.target), r.target.problem);
  }
  if (!unidentified.empty()) {
    fmt::print("\nCannot check {} container(s) in pods that hold devices, or whose bundle contradicts the cgroup "
               "(not guessed):\n", unidentified.size());
    for (const auto& t : unidentified) fmt::print("  {}: {}\n", t.cgroup.cgroup_dir, t.problem);
  }
  std::size_t missing = std::count_if(reports.begin(), reports.end(), [](const ContainerReport& r) {
    return !missing_of(r.final_check()).empty();
  });
  fmt::print("\n{} GPU container(s), {} missing devices, {} container(s) without devices left untouched\n",
             reports.size(), missing, untouched);
}

json container_json(const ContainerReport& r) {
  json c;
  const auto& id = *r.target.identity;
  c["namespace"] = id.pod_namespace;
  c["pod"] = id.pod_name;
  c["container"] = id.container_name;
  c["pod_uid"] = id.pod_uid;
  c["container_id"] = r.target.cgroup.leaf.container_id;
  c["cgroup"] = r.target.cgroup.cgroup_dir;
  c["status"] = r.status();
  c["wanted"] = json::array();
  for (const auto& w : r.target.desired.wanted) c["wanted"].push_back(device_json(w));
  c["missing"] = json::array();
  for (const auto& m : missing_of(r.before)) c["missing"].push_back(device_json(m));
  c["missing_now"] = json::array();
  for (const auto& m : missing_of(r.final_check())) c["missing_now"].push_back(device_json(m));
  c["grants"] = json::array();
  for (const auto& g : r.grants) {
    auto gj = device_json(g.device);
    gj["result"] = grant_result(g);
    gj["ok"] = g.outcome.ok();
    c["grants"].push_back(gj);
  }
  if (!r.systemd_note.empty()) c["systemd"] = r.systemd_note;
  if (!r.repair_note.empty()) c["repair"] = r.repair_note;
  if (!r.apply_note.empty()) c["apply_not_ended"] = r.apply_note;
  if (!r.repair_error.empty()) c["repair_error"] = r.repair_error;
  c["unresolved"] = r.target.desired.unresolved;
  c["unresolved_cdi"] = r.target.desired.unresolved_cdi;
  add_exposure_json(r.target, c);
  if (!r.final_check()) c["error"] = r.final_check().error().message;
  if (!r.target.problem.empty()) c["problem"] = r.target.problem;
  return c;
}

void print_json(const NodeModel& node, const std::vector<ContainerReport>& reports,
                const std::vector<ContainerTarget>& unidentified, std::size_t untouched, const std::string& nvml_note,
                const NodeHealth& h, const std::vector<const ContainerTarget*>& env_targets) {
  const auto& cp = node.checkpoint();
  const auto& inv = node.inventory();
  json out;
  out["mode"] = to_string(node.config().mode);
  if (auto loaded = probe_loaded_on_node(); loaded) {
    out["probe_loaded"] = loaded->loaded;
    out["probe_syscall_hook_attached"] = loaded->syscall_hook_attached;
  } else {
    out["probe_loaded"] = nullptr;
    out["probe_error"] = loaded.error().message;
  }
  out["cgroup"] = {{"version", to_string(node.version())}, {"kubepods", node.kubepods().dir()}};
  json entry_errors = json::array();
  for (const auto& e : cp.checkpoint.entry_errors)
    entry_errors.push_back({{"index", e.index}, {"pod_uid", e.pod_uid}, {"container", e.container_name},
                            {"resource", e.resource}, {"error", e.message}, {"dropped", e.entry_dropped}});
  out["checkpoint"] = {{"path", node.config().kubelet.checkpoint},
                       {"entries", cp.checkpoint.entries.size()},
                       {"checksum_valid", cp.checkpoint.checksum_valid},
                       {"entries_used", cp.used},
                       {"entry_errors", entry_errors}};
  json gpus = json::array();
  for (const auto& g : inv.gpus) gpus.push_back({{"uuid", g.uuid}, {"minor", g.minor}, {"bus", g.bus_location}});
  out["inventory"] = {{"gpus", gpus}, {"mig_source", inv.mig_source}, {"problems", inv.problems}};
  if (!nvml_note.empty()) out["inventory"]["nvml"] = nvml_note;
  out["cdi"] = {{"spec_dirs", node.config().cdi.spec_dirs},
                {"spec_files", node.cdi_spec_files()},
                {"devices", inv.cdi_devices.size()},
                {"spec_errors", node.cdi_errors()}};
  json containers = json::array();
  for (const auto& r : reports) containers.push_back(container_json(r));
  out["containers"] = containers;
  out["exposed_containers"] = std::count_if(reports.begin(), reports.end(),
                                            [](const ContainerReport& r) { return !r.target.exposure.exposed.empty(); });
  out["env_visible"] = env_visible_json(env_targets);
  json unid = json::array();
  for (const auto& t : unidentified)
    unid.push_back({{"cgroup", t.cgroup.cgroup_dir}, {"pod_uid", t.cgroup.pod.pod_uid},
                    {"container_id", t.cgroup.leaf.container_id}, {"reason", t.problem},
                    {"identity_conflict", t.identity_conflict}});
  out["unidentified"] = unid;
  out["untouched_containers"] = untouched;
  json disagreements = json::array();
  for (const auto& d : node.merged().disagreements)
    disagreements.push_back({{"kind", to_string(d.kind)}, {"namespace", d.pod_namespace}, {"pod", d.pod_name},
                             {"container", d.container_name}, {"resource", d.resource},
                             {"checkpoint", d.checkpoint_ids}, {"pod_resources", d.pod_resources_ids}});
  json ambiguous = json::array();
  for (const auto& a : node.merged().ambiguous)
    ambiguous.push_back({{"namespace", a.name.first}, {"pod", a.name.second}, {"uids", a.uids},
                         {"unused_pod_resources", a.unused_pod_resources}});
  out["pod_resources"] = {{"asked", !h.pod_resources.empty()}, {"ok", h.pod_resources_ok}, {"status", h.pod_resources},
                          {"disagreements", disagreements}};
  out["ambiguous_pod_names"] = ambiguous;
  out["unnamed_pods"] = node.merged().unnamed_pods;
  out["checkpoint"]["stale"] = h.stale.stale;
  out["checkpoint"]["stale_reasons"] = h.stale.reasons;
  out["checkpoint"]["unknown_ids"] = h.stale.unknown_ids;
  out["checkpoint"]["unverifiable_ids"] = h.stale.unverifiable_ids;
  json plugins = json::array();
  for (const auto& p : h.plugins)
    plugins.push_back({{"socket", p.socket}, {"up", p.up}, {"latency_us", p.latency.count()},
                       {"error", p.error ? p.error->message : ""}});
  out["device_plugins"] = plugins;
  if (!h.plugins_error.empty()) out["device_plugins_error"] = h.plugins_error;
  fmt::print("{}\n", out.dump(2));
}

// One container through the repair loop's own step (service/repair_step.h), once: observe,
// plan (enforce with --repair, observe without), grant directly; then, systemd driver,
// persist the grant in the scope's DeviceAllow= and look again.
// `apply_note`: what of a runtime's create or update still went on when the wait for its end
// (check_containers) reached its limit. `applies` (repairing): a runtime's create or update
// of the container, looked for again after the look that finds devices missing; the grant
// waits for its end, at most until the limit.
ContainerReport check_container(DeviceAccess& access, const Config& config, const DiscoveredContainer& cg,
                                ContainerTarget target, bool repair, std::string apply_note,
                                const ContainerApplies* applies) {
  ContainerReport r;
  r.apply_note = std::move(apply_note);
  RepairState state(RepairBudget(config.repair.burst, config.repair.max_per_minute));
  RepairSettings settings = RepairSettings::from(config);
  if (!repair) settings.mode = Mode::kObserve;
  std::function<bool()> apply_going_on;
  if (repair && applies) apply_going_on = [applies] { return !applies->going_on().empty(); };
  RepairStep step = repair_once(access, state, cg.cgroup_dir, target.desired, Clock::now(), settings, false, nullptr,
                                -1, apply_going_on);
  while (step.deferred) {  // an apply went on: granted after its end, or at the limit anyway
    std::string still = applies->wait_for_end();
    if (!still.empty()) r.apply_note = std::move(still);
    if (std::chrono::steady_clock::now() >= applies->deadline) apply_going_on = nullptr;  // at most one limit
    step = repair_once(access, state, cg.cgroup_dir, target.desired, Clock::now(), settings, false, nullptr, -1,
                       apply_going_on);
  }
  r.before = std::move(step.observed);
  if (step.applied) {
    r.grants = step.applied->devices;
    r.repair_note = step.applied->summary;
    if (step.applied->failure) r.repair_error = step.applied->failure->message;
  }
  // As the daemon does (service/container_fleet.h): what the scope's DeviceAllow= lacks, or
  // with its unit files unread what was granted, is added so that a reload keeps it.
  const bool systemd_scope = !scope_unit_of(cg.cgroup_dir).empty() && persist_in_scope(target);
  const auto persist = plan_persistence(state, device_allow_lacks(target.exposure), step.settled.granted, Clock::now(),
                                        settings);
  if (repair && systemd_scope && !persist.devices.empty()) {
    // Asked, systemd swaps the scope's program: never while a runtime applies there (runc
    // replaces the program it saw), so looked for again right before.
    if (applies)
      if (std::string still = applies->wait_for_end(); !still.empty()) r.apply_note = std::move(still);
    const auto& devices = persist.devices;
    auto added = SystemdPersistence::persist_blocking(config, cg.cgroup_dir, devices);
    r.systemd_note = added ? "systemd added " + std::to_string(devices.size()) + " device(s) to " + *added + "'s DeviceAllow="
                           : "systemd did not add DeviceAllow= (" + added.error().message + ")";
  }
  if (!r.grants.empty() || !r.repair_error.empty() || !r.systemd_note.empty())
    r.after = access.observe(cg.cgroup_dir, target.desired);  // what systemd left, too
  r.target = std::move(target);
  return r;
}

// Locates the tree and loads every input, as the daemon's resync does (node/node_loader.h),
// then asks NVML at once when an allocated MIG device is unmapped. Errors: exit 2.
// The note says what NVML answered, if it was asked and failed.
struct CheckLoad {
  std::string nvml_note;
};
Result<CheckLoad> load_node(NodeModel& node, const Config& config) {
  if (auto s = node.locate(); !s) return s.error();
  NodeLoad inputs = load_node_inputs(node, BundleRefreshDepth::kEveryStamp);
  if (!inputs.checkpoint) return inputs.checkpoint.error();
  CheckLoad load;
  if (node.needs_nvml()) {
    auto answer = run_nvml_query(self_exe(), config.devices.nvml_library, config.devices.nvml_timeout);
    if (answer) {
      node.set_nvml_answer(std::move(*answer));
    } else {
      load.nvml_note = " (NVML: " + answer.error().message + ")";
    }
  }
  return load;
}

struct NodeReport {
  std::vector<ContainerReport> reports;
  std::vector<ContainerTarget> unidentified;
  std::vector<ContainerTarget> env_only;  // NVIDIA_VISIBLE_DEVICES names GPUs, no allocation, not restored
  std::size_t untouched = 0;
};

NodeReport check_containers(NodeModel& node, DeviceAccess& access, const Config& config, bool repair) {
  NodeReport n;
  const KubepodsTree tree = node.scan();  // kept: the GPU containers are repaired after the scan
  std::vector<std::pair<const DiscoveredContainer*, ContainerTarget>> gpu;
  for (const auto& cg : tree.containers) {
    ContainerTarget target = node.resolve(cg);
    if (target.kind == TargetKind::kUnidentified) {
      if (node.allocations().pod_has_devices(cg.pod.pod_uid) || target.identity_conflict)
        n.unidentified.push_back(std::move(target));
      continue;
    }
    if (target.kind != TargetKind::kGpu) {
      if (target.kind == TargetKind::kNotGpu) ++n.untouched;
      if (target.env_visible) n.env_only.push_back(std::move(target));
      continue;
    }
    gpu.emplace_back(&cg, std::move(target));
  }
  // Never inside a runtime's create (waited for as the daemon waits, all together) or its
  // create or update found by its command line (inside each repair step), then repaired
  // anyway at the one limit.
  std::vector<const Bundle*> bundles;
  for (const auto& [cg, target] : gpu) bundles.push_back(repair && target.bundle ? &*target.bundle : nullptr);
  const KubepodsLocation& where = node.kubepods();
  const RuntimeProcesses processes{
      kLiveProcRoot, node.version() == CgroupVersion::kV2 ? "" : "devices",
      [&where](const std::string& path) { return inside_a_pod(where, where.hierarchy_root + path); }};
  const auto deadline = std::chrono::steady_clock::now() + config.repair.apply_wait_limit;
  wait_for_creates_end(bundles, config.repair.apply_wait_limit, kLiveProcRoot, [&](std::size_t i, std::string note) {
    std::optional<ContainerApplies> applies;
    if (const Bundle* bundle = bundles[i]) applies.emplace(ContainerApplies{*bundle, deadline, processes});
    n.reports.push_back(check_container(access, config, *gpu[i].first, std::move(gpu[i].second), repair,
                                        std::move(note), applies ? &*applies : nullptr));
  });
  std::sort(n.reports.begin(), n.reports.end(),
            [](const ContainerReport& a, const ContainerReport& b) { return who(a.target) < who(b.target); });
  return n;
}

}  // namespace

int run_check(const CheckOptions& options) {
  auto config = load_config_file(options.config_path);
  if (!config) {
    std::fprintf(stderr, "gpu-devwatch check: %s\n", config.error().message.c_str());
    return 2;
  }
  if (options.repair && config->mode == Mode::kObserve) {
    std::fprintf(stderr, "gpu-devwatch check: --repair refused: mode is observe (set mode: enforce to repair)\n");
    return 2;
  }
  NodeModel node(*config);
  auto load = load_node(node, *config);
  if (!load) {
    std::fprintf(stderr, "gpu-devwatch check: %s\n", load.error().message.c_str());
    return 2;
  }
  const NodeHealth health = gather_health(node, *config);
  auto access = make_device_access(node.version());
  const NodeReport n = check_containers(node, *access, *config, options.repair);

  std::vector<const ContainerTarget*> gpu_targets, env_targets;
  for (const auto& r : n.reports) {
    gpu_targets.push_back(&r.target);
    if (r.target.env_visible) env_targets.push_back(&r.target);
  }
  for (const auto& t : n.env_only) env_targets.push_back(&t);
  if (options.json) {
    print_json(node, n.reports, n.unidentified, n.untouched, load->nvml_note, health, env_targets);
  } else {
    print_text(node, *access, n.reports, n.unidentified, n.untouched, load->nvml_note);
    print_exposure_text(gpu_targets);
    print_env_visible_text(env_targets);
    fmt::print("\n");
    print_health_text(node, health);
  }
  bool attention = !n.unidentified.empty() || !node.merged().ambiguous.empty() || health.needs_attention() ||
                   !node.cdi_errors().empty() ||
                   std::any_of(n.reports.begin(), n.reports.end(), [](const ContainerReport& r) { return r.needs_attention(); });
  return attention ? 1 : 0;
}

}  // namespace gdw
