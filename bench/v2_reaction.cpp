// cgroup v2 against cgroup v1 in one run, as a tenant sees it: how long a GPU container's
// GPU stays denied after a re-apply of its device policy, and what BPF activity that has
// nothing to do with GPUs costs the daemon. On sandbox nodes on the real kernel (real test
// cgroups under a unique parent, a sleeping process in each, mknod'ed GPU nodes): first a
// cgroup v2 node (the cgroup2 mount at /sys/fs/cgroup/unified, or /sys/fs/cgroup on a pure
// v2 host such as a GPU machine, where the fixture nodes take free local-use majors so that
// no open reaches the real driver; each container starts with a runtime's device program
// allowing its spec plus its GPU, as the NVIDIA hook leaves it), then a cgroup v1 node, each with --containers containers of which --gpu-containers hold
// one GPU (round robin over --gpus).
//
// The daemon runs with the default configuration: only what a sandbox node needs is set (its
// paths, and metrics on a free loopback port). Per daemon build and node:
//   idle CPU       the daemon's utime+stime (/proc/<pid>/stat) over --load-seconds, nothing
//                  happening;
//   unrelated load the same while another process loads a cgroup_device program --load-hz
//                  times a second, never attaching it (bench/unrelated_loads.h);
//   reaction       --samples re-applies per style on random GPU containers, one at a time,
//                  --gap-ms apart. A spinner inside the container's cgroup makes the re-apply
//                  and open()s its GPU node until the open is no longer EPERM
//                  (bench/spinner.h): reaction = the attach's return (v1: the last write's)
//                  -> the start of the first allowed open; window = the first harmful
//                  call's start -> the same; the EPERM opens in between. Styles
//                  (bench/reappliers.h): v2 runc-style (the old programs replaced or
//                  detached) and systemd-style (ANDed on), alternating; v1 old runc (`a` to
//                  devices.deny, then the spec's allows). The daemon's CPU over that phase
//                  (its CPU-time clock), per re-apply: what a re-apply costs it in all.
// Between each two re-applies, the machine's floor under any reaction (bench/wake_floor.h):
// two wake-ups of an idle process by a busy one, the daemon idle, one waiter with the
// daemon's default scheduler slice (a --daemon-extra that changes it is not followed) and
// one with the kernel's.
// Before each session every GPU container is put back to the runtime's policy, so every
// build starts from the same state. The spinner busy-loops on one CPU (unless
// --open-interval-us): on a 2-CPU machine the daemon has the other.
// --cross-cpu 1 pins the bench, its spinners and the floor's waker to the last CPU and the
// daemon and the floor's waiters to CPU 0 (bench/cpu_pinning.h): a many-core node's case,
// where the daemon repairs on another CPU while the tenant keeps spinning on its own.
//
//   build/bench/v2_reaction [--containers 500] [--gpu-containers 128] [--gpus 8]
//                           [--samples 300] [--gap-ms 100] [--load-hz 50] [--load-seconds 10]
//                           [--rounds 1] [--versions v2,v1] [--spin-timeout-ms 15000]
//                           [--open-interval-us 0 (a pause after each EPERM open; 0: busy)]
//                           [--cross-cpu 0 (1: tenant and daemon pinned to different CPUs)]
//                           [--runtime-process 0 (1: each re-apply by a child named runc
//                            that exits --runtime-tail-us 0 after it: reaction is then also
//                            timed from that exit, the end of the runtime's apply)]
//                           [--daemon-extra YAML] [--daemon-binary PATH]
//                           [--compare-daemon PATH (another build, run on the same nodes)]
//                           (as root)
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_node.h"
#include "bench_report.h"
#include "bench_signals.h"
#include "bench_stats.h"
#include "core/config.h"
#include "core/device_rule.h"
#include "cpu_pinning.h"
#include "reappliers.h"
#include "spinner.h"
#include "storm_observe.h"
#include "storm_repairers.h"
#include "unrelated_loads.h"
#include "v2_reaction_figures.h"
#include "wake_floor.h"

using namespace gdw::test;
using namespace gdw::bench;
using namespace gdw::bench::v2_reaction;

namespace {

// ---- the node ---------------------------------------------------------------------------

struct GpuTarget {
  const SandboxContainer* container;
  std::uint32_t minor;
  SpinTarget spin;
};

void pause_for(std::chrono::milliseconds d) {
  const auto end = std::chrono::steady_clock::now() + d;
  for (auto now = std::chrono::steady_clock::now(); now < end; now = std::chrono::steady_clock::now()) {
    check_interrupted();
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(end - now, 50ms));
  }
  check_interrupted();
}

class BenchNode {
 public:
  BenchNode(bool v2, const Options& o)
      : v2_(v2),
        node_(SandboxNode::Options{.gpus = o.gpus,
                                   .tag = v2 ? "v2reaction-v2" : "v2reaction-v1",
                                   .v2 = v2,
                                   .majors = fixture_majors_for_host(gdw::test::read_file("/proc/devices"))}) {
    const auto holders = add_bench_containers(node_, o.containers, o.gpu_containers, o.gpus, check_interrupted);
    for (std::size_t i = 0; i < holders.size(); ++i) {
      const auto minor = static_cast<std::uint32_t>(i % static_cast<std::size_t>(o.gpus));
      targets_.push_back({holders[i], minor, {holders[i]->cgroup_dir, node_.node_path("nvidia" + std::to_string(minor))}});
    }
  }
  bool v2() const { return v2_; }
  SandboxNode& sandbox() { return node_; }
  std::vector<GpuTarget>& targets() { return targets_; }

  // Every GPU container back to what its runtime and the NVIDIA hook gave it (the spec plus
  // its GPU and the control nodes; v2: one program), whatever a previous session left.
  void reset() {
    for (auto& t : targets_) {
      check_interrupted();
      const auto wanted = wanted_rules(t.minor, node_.majors());
      t.spin.systemd_previous = 0;
      if (!v2_) {
        node_.reapply_spec(*t.container);
        for (const auto& rule : wanted) node_.cgroups().allow(t.container->cgroup_rel, rule);
        continue;
      }
      auto rules = SandboxNode::spec_rules();
      for (const auto& rule : wanted) rules.push_back({true, *gdw::parse_device_rule(rule)});
      const int cg = ::open(t.container->cgroup_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      const Reapply r = cg < 0 ? detail::failed(Reapply{}, "open cgroup", errno) : reapply_runc_style(cg, rules);
      if (cg >= 0) ::close(cg);
      if (r.error != 0)
        throw std::runtime_error("cannot reset " + t.container->cgroup_dir + ": " + r.step + ": " + std::strerror(r.error));
    }
  }

 private:
  bool v2_;
  SandboxNode node_;
  std::vector<GpuTarget> targets_;
};

// ---- one session: one daemon build on one node ------------------------------------------

void measure_cpu(Repairer& daemon, const Options& o, VersionFigures& f) {
  const pid_t pid = daemon.pid();
  const auto window = std::chrono::seconds(o.load_seconds);
  std::uint32_t first_id = bpf_program_ids_handed_out();
  double before = cpu_seconds(pid);
  pause_for(window);
  f.idle_cpu_s.push_back(cpu_seconds(pid) - before);
  f.foreign_idle += programs_loaded_between(first_id, bpf_program_ids_handed_out());
  double load = 0;
  const LoadRun run = run_unrelated_loads(
      o.load_hz, window,
      [&] {
        first_id = bpf_program_ids_handed_out();
        before = cpu_seconds(pid);
      },
      [&] { load = cpu_seconds(pid) - before; });
  f.foreign_load += programs_loaded_between(first_id, bpf_program_ids_handed_out()) - run.loads;
  f.load_cpu_s.push_back(load);
  f.loads += run.loads;
  f.failed_loads += run.failed_loads;
}

void measure_reactions(BenchNode& node, const Options& o, int round, VersionFigures& f) {
  const int waiter_cpu = o.cross_cpu ? 0 : -1;  // the daemon's CPU
  WakeFloor floor(gdw::Config{}.daemon.event_loop_slice_us, waiter_cpu), floor_default(0, waiter_cpu);
  const std::vector<ReapplyStyle> styles =
      node.v2() ? std::vector<ReapplyStyle>{ReapplyStyle::kRuncV2, ReapplyStyle::kSystemdV2}
                : std::vector<ReapplyStyle>{ReapplyStyle::kOldRuncV1};
  auto& targets = node.targets();
  std::mt19937 rng(1000 + static_cast<unsigned>(round));  // every build gets the same sequence
  const SpinOptions spin{std::chrono::milliseconds(o.spin_timeout_ms), std::chrono::microseconds(o.open_interval_us),
                         o.runtime_process != 0, std::chrono::microseconds(o.runtime_tail_us)};
  const int total = o.samples * static_cast<int>(styles.size());
  for (int k = 0; k < total; ++k) {
    const ReapplyStyle style = styles[static_cast<std::size_t>(k) % styles.size()];
    GpuTarget& t = targets[rng() % targets.size()];
    const SpinSample s = spin_once(t.spin, style, spin);
    if (style == ReapplyStyle::kSystemdV2 && s.program_id != 0) t.spin.systemd_previous = s.program_id;
    f.style(style).add(s);
    pause_for(std::chrono::milliseconds(o.gap_ms / 3));
    f.floor_us.push_back(floor.sample_us());
    pause_for(std::chrono::milliseconds(o.gap_ms / 3));
    f.floor_default_us.push_back(floor_default.sample_us());
    pause_for(std::chrono::milliseconds(o.gap_ms - 2 * (o.gap_ms / 3)));
  }
  f.floor_slice_refused |= floor.slice_refused();
}

void run_session(BenchNode& node, const std::string& binary, const Options& o, int round, bool say_probe,
                 VersionFigures& f) {
  node.reset();
  Daemon daemon(node.sandbox(), binary, o.daemon_extra);
  if (!daemon.start()) throw std::runtime_error(binary + " did not start:\n" + daemon.output());
  if (o.cross_cpu && !pin_process(daemon.pid(), 0)) throw std::runtime_error("cannot pin the daemon to CPU 0");
  if (say_probe) {
    std::istringstream log(daemon.output());
    for (std::string line; std::getline(log, line);)
      if (line.find("probe") != std::string::npos) std::printf("  daemon log: %s\n", line.c_str());
  }
  pause_for(2s);  // the startup pass and its log lines are done
  measure_cpu(daemon, o, f);
  pause_for(2s);  // the daemon's reaction to the last loads is over
  const double before_ms = cpu_clock_ms(daemon.pid());  // ns resolution: a re-apply costs ms
  const double repair_s = daemon.metric("gpu_devwatch_repair_duration_seconds_sum");
  const double repairs = daemon.metric("gpu_devwatch_repair_duration_seconds_count");
  const double record_delay_s = daemon.metric("gpu_devwatch_probe_record_delay_seconds_sum");
  const double records = daemon.metric("gpu_devwatch_probe_record_delay_seconds_count");
  auto wrapper_loads = [&](const char* when) {
    return daemon.series("gpu_devwatch_device_programs_loaded_total", {{"when", when}});
  };
  const auto on_path_before = wrapper_loads("repair"), ahead_before = wrapper_loads("ahead");
  const std::uint32_t first_id = bpf_program_ids_handed_out();
  measure_reactions(node, o, round, f);
  const auto on_path_after = wrapper_loads("repair"), ahead_after = wrapper_loads("ahead");
  if (on_path_before && on_path_after && ahead_before && ahead_after) {
    f.loads_on_path = std::max(0.0, f.loads_on_path) + *on_path_after - *on_path_before;
    f.loads_ahead = std::max(0.0, f.loads_ahead) + *ahead_after - *ahead_before;
  }
  f.samples_cpu_s += (cpu_clock_ms(daemon.pid()) - before_ms) / 1000;
  f.programs_loaded += static_cast<double>(programs_loaded_between(first_id, bpf_program_ids_handed_out()));
  f.repair_s += daemon.metric("gpu_devwatch_repair_duration_seconds_sum") - repair_s;
  f.repairs += daemon.metric("gpu_devwatch_repair_duration_seconds_count") - repairs;
  f.record_delay_s += daemon.metric("gpu_devwatch_probe_record_delay_seconds_sum") - record_delay_s;
  f.records += daemon.metric("gpu_devwatch_probe_record_delay_seconds_count") - records;
  f.samples_run += o.samples * (node.v2() ? 2 : 1);
  f.rss_mib = std::max(f.rss_mib, rss_mib(daemon.pid()));
  f.measured = true;
  daemon.stop();
}

// ---- flags ------------------------------------------------------------------------------

std::optional<Options> parse_options(int argc, char** argv) {
  Options o;
  const std::map<std::string, int*> ints = {
      {"--containers", &o.containers}, {"--gpu-containers", &o.gpu_containers}, {"--gpus", &o.gpus},
      {"--samples", &o.samples},       {"--gap-ms", &o.gap_ms},                 {"--load-hz", &o.load_hz},
      {"--load-seconds", &o.load_seconds}, {"--rounds", &o.rounds},           {"--spin-timeout-ms", &o.spin_timeout_ms},
      {"--open-interval-us", &o.open_interval_us}, {"--cross-cpu", &o.cross_cpu},
      {"--runtime-process", &o.runtime_process}, {"--runtime-tail-us", &o.runtime_tail_us}};
  const std::map<std::string, std::string*> strings = {{"--daemon-extra", &o.daemon_extra},
                                                       {"--daemon-binary", &o.daemon_binary},
                                                       {"--compare-daemon", &o.compare_daemon}};
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "v2_reaction: flag %s has no value\n", a.c_str());
      return std::nullopt;
    }
    const std::string v = argv[i + 1];
    if (auto it = ints.find(a); it != ints.end()) *it->second = std::stoi(v);
    else if (auto st = strings.find(a); st != strings.end()) *st->second = v;
    else if (a == "--versions") {
      o.v2 = v.find("v2") != std::string::npos;
      o.v1 = v.find("v1") != std::string::npos;
    } else {
      std::fprintf(stderr, "v2_reaction: unknown flag %s\n", a.c_str());
      return std::nullopt;
    }
  }
  if (o.gpu_containers < 1 || o.gpu_containers > o.containers || o.gpus < 1 || o.rounds < 1 || o.load_hz < 1 ||
      o.load_seconds < 1 || o.samples < 1 || (!o.v1 && !o.v2)) {
    std::fprintf(stderr, "v2_reaction: need 1 <= --gpu-containers <= --containers, --gpus, --rounds, --samples, "
                         "--load-hz, --load-seconds >= 1, and --versions naming v2 and/or v1\n");
    return std::nullopt;
  }
  return o;
}

// All sessions of one cgroup version on one node; builds take turns going first.
void run_version(bool v2, const Options& o, BuildFigures& measured, BuildFigures& compared) {
  BenchNode node(v2, o);
  std::printf("%s node: %d containers, %d GPU containers on %d GPUs, parent %s\n", v2 ? "v2" : "v1", o.containers,
              o.gpu_containers, o.gpus, node.sandbox().cgroups().path().c_str());
  std::fflush(stdout);
  std::vector<std::pair<const std::string*, BuildFigures*>> order{{&o.daemon_binary, &measured}};
  if (!o.compare_daemon.empty()) order.push_back({&o.compare_daemon, &compared});
  for (int round = 0; round < o.rounds; ++round) {
    for (auto [binary, figures] : order) {
      std::printf("%s round %d: %s\n", v2 ? "v2" : "v1", round + 1, binary->c_str());
      std::fflush(stdout);
      run_session(node, *binary, o, round, round == 0 && figures == &measured, v2 ? figures->v2 : figures->v1);
    }
    std::rotate(order.begin(), order.begin() + 1, order.end());
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Options> options = parse_options(argc, argv);
  if (!options) return 2;
  const Options& o = *options;
  if ((o.v2 && !SandboxNode::available(true)) || (o.v1 && !SandboxNode::available(false))) {
    std::fprintf(stderr, "v2_reaction: needs root, a cgroup2 hierarchy (v2: /sys/fs/cgroup/unified, or "
                         "/sys/fs/cgroup on a pure v2 host) and a writable v1 devices hierarchy (v1)\n");
    return 2;
  }
  if (o.cross_cpu && (last_cpu() == 0 || !pin_thread(0, last_cpu()))) {
    std::fprintf(stderr, "v2_reaction: --cross-cpu needs two CPUs this process may use\n");
    return 2;
  }
  install_interrupt_handlers();
  print_run_header(argc, argv);
  std::printf("per node and build: idle CPU over %d s, CPU over %d s of %d unrelated loads/s, then %d re-applies per "
              "style %d ms apart (spinner: %d µs between EPERM opens); %d round(s)\n",
              o.load_seconds, o.load_seconds, o.load_hz, o.samples, o.gap_ms, o.open_interval_us, o.rounds);
  if (o.runtime_process)
    std::printf("re-applies by a child process named runc that exits %d µs after its apply (the daemon waits for that "
                "exit before it grants)\n",
                o.runtime_tail_us);
  if (o.cross_cpu)
    std::printf("cross-CPU: the daemon and the floor's waiters on CPU 0; this bench, its spinners and loads on CPU %d\n",
                last_cpu());
  BuildFigures measured, compared;
  try {
    if (o.v2) run_version(true, o, measured, compared);
    if (o.v1) run_version(false, o, measured, compared);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "v2_reaction: %s\n", e.what());
    return 1;
  }
  std::printf("\nloadavg:  %s (at the end)\n", loadavg().c_str());
  print_build(("gpu-devwatch: " + o.daemon_binary).c_str(), measured, o);
  print_floor(measured, o);
  print_ratios(measured);
  if (!o.compare_daemon.empty()) {
    print_build(("compared build: " + o.compare_daemon).c_str(), compared, o);
    print_floor(compared, o);
    print_ratios(compared);
    print_compared(measured, compared, o);
  }
  return 0;
}
