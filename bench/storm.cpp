// gpu-devwatch against a careful hand-written Python inotify fixer (bench/python_fixer.py),
// the baseline, and against the least any inotify fixer must do (bench/floor_fixer.cpp:
// C++, deny file only, nothing but the repair), side by side in one run, on a sandbox node
// on the real kernel (cgroup v1): real test cgroups under a unique parent, a sleeping
// process in each, mknod'ed GPU nodes.
//
// The daemon runs with the default config: only what a sandbox node needs is set (its paths,
// and metrics on a free loopback port). Repairers alternate: each round starts one, measures,
// stops it, then the next (each goes first in turn). Per repairer:
//   reaction  single re-applies (old runc: `a` to devices.deny, then the spec's allows, no GPU)
//             of a random GPU container: last write -> its devices covered again; window:
//             first (revoking) write -> covered;
//   storm     every GPU container re-applied back to back: all-whole (storm start -> the last
//             container whole), writer (the writer's own time), tail (all-whole - writer), and
//             the repairer's CPU per storm (utime+stime, /proc/<pid>/stat; its CPU-time
//             clock; its main thread's, from schedstat) and in the first storm after each
//             start (what a node's rare real storm meets: cold caches, first log lines);
//   fight     one container re-applied --fight-hz times a second for --fight-seconds (last
//             round): reaction p50/p99/max, and whether the daemon's fight-loop guard engaged;
//   RSS       VmRSS (/proc/<pid>/status) idle and after the storms.
//
// "Covered" is observed without polling devices.list: the bench watches every GPU container's
// devices.allow/deny with inotify and stamps each batch of events when it reads it. A container
// is whole from its last write on (checked with devices.list once the node is quiet), so its
// whole time is the stamp of the batch holding its last event. The floor of that method (the
// container already whole at the last write, no repairer running) is printed too.
//
//   build/bench/storm [--containers 500] [--gpu-containers 128] [--gpus 8] [--rounds 3]
//                     [--singles 300] [--storms 20] [--fight-hz 200] [--fight-seconds 5]
//                     [--storm-gap-ms 0] [--daemon-extra YAML] [--python-fixer PATH]
//                     [--daemon-binary PATH (default: this build's gpu-devwatch)]
//                     [--floor-fixer PATH (default: floor_fixer beside this program)]
//                     [--compare-daemon PATH (another build, run in the same rounds)]   (as root)
#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "bench_node.h"
#include "bench_signals.h"
#include "bench_stats.h"
#include "storm_observe.h"
#include "storm_repairers.h"
#include "support/metrics_text.h"
#include "support/process.h"

using namespace gdw::test;
using namespace gdw::bench;

namespace {

struct Options {
  int containers = 500, gpu_containers = 128, gpus = 8, rounds = 3, singles = 300, storms = 20;
  int fight_hz = 200, fight_seconds = 5, storm_gap_ms = 0;
  std::string daemon_extra;
  std::string daemon_binary = GDW_BINARY;
  std::string python_fixer = GDW_SOURCE_DIR "/bench/python_fixer.py";
  std::string floor_fixer;  // default: floor_fixer beside this program
  // Another gpu-devwatch build run in the same rounds (a change against its base): CPU
  // figures move by about 20 % between runs on a VM, side by side they compare.
  std::string compare_daemon;
};

// ---- the measurements -------------------------------------------------------------------

struct Figures {
  std::vector<double> reaction_us, window_us;                         // singles
  std::vector<double> all_whole_us, writer_us, tail_us, storm_cpu_ms, storm_cpu_clock_ms, storm_loop_ms;  // per storm
  std::vector<double> first_storm_cpu_ms;  // the first storm after each start (CPU-time clock)
  std::vector<double> storm_wakeups, storm_reads, storm_writes;                           // per storm
  std::vector<double> fight_us;
  int fight_reapplies = 0, fight_late = 0;  // late: not covered before the next re-apply
  double guard = -1;                        // repairs the guard held back in the fight
  double guard_before_fight = -1;           // ... in the singles and storms
  int guarded_storms = 0;                   // storms in which the guard held a repair back
  bool guard_logged = false;
  double rss_idle = 0, rss_storm = 0, idle_cpu_ms_per_s = 0;
  int failures = 0, overflows = 0;
};

class Bench {
 public:
  Bench(SandboxNode& node, std::vector<Target>& targets) : node_(node), targets_(targets), watch_(targets) {}

  // Waits until container i is covered and quiet; returns the stamp of its last write's batch.
  std::optional<Clock::time_point> settle_one(int i, Clock::time_point last, std::chrono::seconds limit = 5s) {
    const auto deadline = Clock::now() + limit;
    for (;;) {
      check_interrupted();
      auto b = watch_.read(std::chrono::microseconds(0));
      if (b.has(i)) last = b.at;
      if (covered(targets_[i])) {
        auto trailing = watch_.read(std::chrono::microseconds(1000));
        if (!trailing.has(i)) return last;
        last = trailing.at;
        continue;
      }
      if (Clock::now() > deadline) return std::nullopt;
      auto w = watch_.read(std::chrono::microseconds(100'000));
      if (w.has(i)) last = w.at;
    }
  }

  void single(int i, Figures& f, const std::function<void()>& also_write = {}) {
    watch_.drain();
    const auto t0 = Clock::now();
    node_.reapply_spec(*targets_[i].container);
    if (also_write) also_write();
    const auto t1 = Clock::now();
    auto whole = settle_one(i, t1);
    if (!whole) {
      ++f.failures;
      return;
    }
    f.reaction_us.push_back(us_between(t1, *whole));
    f.window_us.push_back(us_between(t0, *whole));
  }

  void storm(Figures& f, pid_t pid) {
    watch_.drain();
    const double cpu0 = cpu_ms(pid), clock0 = cpu_clock_ms(pid), loop0 = thread_cpu_ms(pid, pid);
    const KernelCounts k0 = kernel_counts(pid);
    const auto t0 = Clock::now();
    for (const auto& t : targets_) node_.reapply_spec(*t.container);
    const auto tw = Clock::now();
    std::vector<Clock::time_point> last(targets_.size(), tw);
    const auto deadline = tw + 10s;
    bool first = true, overflow = false;
    for (;;) {
      check_interrupted();
      auto b = watch_.read(first ? std::chrono::microseconds(0) : std::chrono::microseconds(20'000));
      first = false;
      overflow |= b.overflow;
      for (int i : b.targets) last[static_cast<std::size_t>(i)] = b.at;
      if (!b.targets.empty()) continue;
      if (std::all_of(targets_.begin(), targets_.end(), covered)) break;
      if (Clock::now() > deadline) {
        ++f.failures;
        return;
      }
    }
    f.storm_cpu_ms.push_back(cpu_ms(pid) - cpu0);
    f.storm_cpu_clock_ms.push_back(cpu_clock_ms(pid) - clock0);
    f.storm_loop_ms.push_back(thread_cpu_ms(pid, pid) - loop0);
    const KernelCounts k1 = kernel_counts(pid);
    f.storm_wakeups.push_back(k1.wakeups - k0.wakeups);
    f.storm_reads.push_back(k1.reads - k0.reads);
    f.storm_writes.push_back(k1.writes - k0.writes);
    if (overflow) {
      ++f.overflows;  // event order lost: the whole times are not known
      return;
    }
    const double all_whole = us_between(t0, *std::max_element(last.begin(), last.end()));
    f.all_whole_us.push_back(all_whole);
    f.writer_us.push_back(us_between(t0, tw));
    f.tail_us.push_back(all_whole - us_between(t0, tw));
  }

  // One container re-applied `hz` times a second; a re-apply's reaction ends when the
  // container is next seen whole (later re-applies may come first).
  void fight(int i, int hz, int seconds, Figures& f) {
    const auto period = std::chrono::microseconds(1'000'000 / hz);
    std::vector<Clock::time_point> pending;  // last-write times not yet covered
    auto observe = [&](const Watch::Batch& b) {
      if (!b.has(i) || pending.empty() || !covered(targets_[i])) return;
      for (auto t : pending) f.fight_us.push_back(std::max(0.0, us_between(t, b.at)));
      pending.clear();
    };
    watch_.drain();
    const auto start = Clock::now(), end = start + std::chrono::seconds(seconds);
    auto next = start;
    while (Clock::now() < end) {
      check_interrupted();
      for (auto now = Clock::now(); now < next; now = Clock::now())
        observe(watch_.read(std::chrono::duration_cast<std::chrono::microseconds>(next - now)));
      if (!pending.empty()) ++f.fight_late;
      node_.reapply_spec(*targets_[i].container);
      pending.push_back(Clock::now());
      ++f.fight_reapplies;
      observe(watch_.read(std::chrono::microseconds(0)));
      next = std::max(next + period, Clock::now() - period);  // a late writer does not burst
    }
    auto whole = pending.empty() ? Clock::now() : settle_one(i, pending.back(), 120s);
    for (auto t : pending) f.fight_us.push_back(whole ? us_between(t, *whole) : 120e6);
  }

  // The method's floor: the container is whole at the last write (the bench's re-apply ends
  // with the wanted rules), so all that is measured is the observation.
  void floor(int i, Figures& f) {
    single(i, f, [&] {
      for (const auto& rule : targets_[i].wanted) node_.cgroups().allow(targets_[i].container->cgroup_rel, rule);
    });
  }

 private:
  SandboxNode& node_;
  std::vector<Target>& targets_;
  Watch watch_;
};

void run_session(Bench& bench, Repairer& r, const Options& o, int round, int n_targets, bool fight, Figures& f) {
  if (!r.start()) throw std::runtime_error(std::string(r.name()) + " did not start:\n" + r.output());
  const pid_t pid = r.pid();
  std::this_thread::sleep_for(1s);
  const double idle0 = cpu_clock_ms(pid);
  std::this_thread::sleep_for(2s);
  f.idle_cpu_ms_per_s = std::max(f.idle_cpu_ms_per_s, (cpu_clock_ms(pid) - idle0) / 2);
  f.rss_idle = std::max(f.rss_idle, rss_mib(pid));
  if (round == 0) {
    std::istringstream log(r.output());
    for (std::string line; std::getline(log, line);)
      if (line.find("probe") != std::string::npos) std::printf("  %s log: %s\n", r.name(), line.c_str());
  }
  std::mt19937 rng(1000 + static_cast<unsigned>(round));  // both repairers get the same sequence
  const double guard0 = r.throttled();
  for (int k = 0; k < o.singles; ++k) bench.single(static_cast<int>(rng() % static_cast<unsigned>(n_targets)), f);
  for (int k = 0; k < o.storms; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(o.storm_gap_ms));
    const double before = r.throttled();  // scraped outside the storm's CPU window
    const std::size_t measured = f.storm_cpu_clock_ms.size();
    bench.storm(f, pid);
    if (k == 0 && f.storm_cpu_clock_ms.size() > measured) f.first_storm_cpu_ms.push_back(f.storm_cpu_clock_ms.back());
    if (before >= 0 && r.throttled() > before) ++f.guarded_storms;
  }
  if (guard0 >= 0) f.guard_before_fight = std::max(0.0, f.guard_before_fight) + r.throttled() - guard0;
  f.rss_storm = std::max(f.rss_storm, rss_mib(pid));
  if (fight) {
    const double before = r.throttled();
    bench.fight(0, o.fight_hz, o.fight_seconds, f);
    if (before >= 0) f.guard = r.throttled() - before;
    f.guard_logged = r.output().find("rate-limited") != std::string::npos;
  }
  r.stop();
}

// ---- output -----------------------------------------------------------------------------

void row(const char* what, double daemon, double python, double floor, const char* unit, int decimals = 1) {
  std::printf("%-44s %12.*f %12.*f %12.*f %-4s %8.2f %8.2f\n", what, decimals, daemon, decimals, python, decimals, floor,
              unit, daemon > 0 ? python / daemon : 0.0, daemon > 0 ? floor / daemon : 0.0);
}

// The figures of gpu-devwatch (d), the Python fixer (p) and the C++ floor fixer (c).
void print(const Figures& d, const Figures& p, const Figures& c, const Figures& floor) {
  std::printf("\n%-44s %12s %12s %12s %-4s %8s %8s\n", "figure", "gpu-devwatch", "python", "C++ floor", "", "py/gdw",
              "floor/gdw");
  auto pct_row = [&](const char* what, std::vector<double> Figures::*v, double q, const char* unit) {
    row(what, pct(d.*v, q), pct(p.*v, q), pct(c.*v, q), unit);
  };
  pct_row("reaction p50 (last write -> covered)", &Figures::reaction_us, .5, "µs");
  pct_row("reaction p99", &Figures::reaction_us, .99, "µs");
  pct_row("window p50 (first write -> covered)", &Figures::window_us, .5, "µs");
  pct_row("window p99", &Figures::window_us, .99, "µs");
  pct_row("storm all-whole p50", &Figures::all_whole_us, .5, "µs");
  pct_row("storm writer time p50", &Figures::writer_us, .5, "µs");
  pct_row("storm tail p50 (all-whole - writer)", &Figures::tail_us, .5, "µs");
  pct_row("storm tail p99", &Figures::tail_us, .99, "µs");
  row("repairer CPU per storm (utime+stime)", mean(d.storm_cpu_ms), mean(p.storm_cpu_ms), mean(c.storm_cpu_ms), "ms", 2);
  row("  same, CPU-time clock (ns resolution)", mean(d.storm_cpu_clock_ms), mean(p.storm_cpu_clock_ms),
      mean(c.storm_cpu_clock_ms), "ms", 2);
  row("  of which the main thread (event loop)", mean(d.storm_loop_ms), mean(p.storm_loop_ms), mean(c.storm_loop_ms),
      "ms", 2);
  row("  the first storm after each start", mean(d.first_storm_cpu_ms), mean(p.first_storm_cpu_ms),
      mean(c.first_storm_cpu_ms), "ms", 2);
  row("  wake-ups per storm", mean(d.storm_wakeups), mean(p.storm_wakeups), mean(c.storm_wakeups), "", 0);
  row("  read calls per storm", mean(d.storm_reads), mean(p.storm_reads), mean(c.storm_reads), "", 0);
  row("  write calls per storm", mean(d.storm_writes), mean(p.storm_writes), mean(c.storm_writes), "", 0);
  pct_row("fight reaction p50", &Figures::fight_us, .5, "µs");
  pct_row("fight reaction p99", &Figures::fight_us, .99, "µs");
  pct_row("fight reaction max", &Figures::fight_us, 1, "µs");
  row("fight re-applies", d.fight_reapplies, p.fight_reapplies, c.fight_reapplies, "", 0);
  row("fight re-applies not covered before the next", d.fight_late, p.fight_late, c.fight_late, "", 0);
  row("RSS idle (VmRSS)", d.rss_idle, p.rss_idle, c.rss_idle, "MiB");
  row("RSS after storms", d.rss_storm, p.rss_storm, c.rss_storm, "MiB");
  row("idle CPU (max over rounds)", d.idle_cpu_ms_per_s, p.idle_cpu_ms_per_s, c.idle_cpu_ms_per_s, "ms/s", 2);
  std::printf("gpu-devwatch guard before the fight: %.0f repairs held back; %d of %zu storms delayed by it\n",
              d.guard_before_fight, d.guarded_storms, d.storm_cpu_ms.size());
  std::printf("fight-loop guard engaged: %s (gpu_devwatch_repairs_throttled_total +%.0f, \"rate-limited\" %slogged)\n",
              d.guard > 0 || d.guard_logged ? "YES" : "no", d.guard, d.guard_logged ? "" : "not ");
  std::printf("samples: %zu singles, %zu storms per repairer; failures gdw %d python %d floor %d; overflowed storms gdw %d "
              "python %d floor %d\n",
              d.reaction_us.size(), d.storm_cpu_ms.size(), d.failures, p.failures, c.failures, d.overflows, p.overflows,
              c.overflows);
  std::printf("bench floor (whole at the last write, no repairer): reaction p50 %.1f µs p99 %.1f µs\n",
              pct(floor.reaction_us, .5), pct(floor.reaction_us, .99));
}

// The --compare-daemon build beside the measured one: its figure, and compared/measured.
void print_compared(const Figures& d, const Figures& x) {
  std::printf("\n%-44s %12s %12s %8s\n", "figure", "gpu-devwatch", "compared", "cmp/gdw");
  auto line = [](const char* what, double a, double b) {
    std::printf("%-44s %12.2f %12.2f %8.2f\n", what, a, b, a > 0 ? b / a : 0.0);
  };
  line("CPU per storm (CPU-time clock, ms)", mean(d.storm_cpu_clock_ms), mean(x.storm_cpu_clock_ms));
  line("  of which the main thread", mean(d.storm_loop_ms), mean(x.storm_loop_ms));
  line("wake-ups per storm", mean(d.storm_wakeups), mean(x.storm_wakeups));
  line("reaction p50 (µs)", pct(d.reaction_us, .5), pct(x.reaction_us, .5));
  line("reaction p99 (µs)", pct(d.reaction_us, .99), pct(x.reaction_us, .99));
  line("storm tail p50 (µs)", pct(d.tail_us, .5), pct(x.tail_us, .5));
  line("RSS after storms (MiB)", d.rss_storm, x.rss_storm);
}

int int_flag(const std::string& v) { return std::stoi(v); }

std::string beside_this_program(const std::string& name) {
  std::error_code ec;
  return std::filesystem::read_symlink("/proc/self/exe", ec).parent_path() / name;
}

// The node: the first --gpu-containers containers hold one GPU each (round robin).
std::vector<Target> populate(SandboxNode& node, const Options& o) {
  std::vector<Target> targets;
  const auto gpu_holders = add_bench_containers(node, o.containers, o.gpu_containers, o.gpus, check_interrupted);
  for (std::size_t i = 0; i < gpu_holders.size(); ++i) {
    const SandboxContainer& c = *gpu_holders[i];
    Target t{&c, wanted_rules(static_cast<std::uint32_t>(i % static_cast<std::size_t>(o.gpus))), -1};
    t.list_fd = ::open((c.cgroup_dir + "/devices.list").c_str(), O_RDONLY | O_CLOEXEC);
    if (t.list_fd < 0) throw std::runtime_error("cannot open " + c.cgroup_dir + "/devices.list");
    targets.push_back(t);
  }
  return targets;
}

// The Python fixer's input: cgroup directory -> the rules it must have.
std::string targets_json(const std::vector<Target>& targets) {
  nlohmann::json doc = nlohmann::json::object();
  for (const auto& t : targets) doc[t.container->cgroup_dir] = t.wanted;
  return doc.dump(1);
}

// The flags as Options; nullopt (after saying why) when they are not usable.
std::optional<Options> parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--containers") o.containers = int_flag(v);
    else if (a == "--gpu-containers") o.gpu_containers = int_flag(v);
    else if (a == "--gpus") o.gpus = int_flag(v);
    else if (a == "--rounds") o.rounds = int_flag(v);
    else if (a == "--singles") o.singles = int_flag(v);
    else if (a == "--storms") o.storms = int_flag(v);
    else if (a == "--fight-hz") o.fight_hz = int_flag(v);
    else if (a == "--fight-seconds") o.fight_seconds = int_flag(v);
    else if (a == "--storm-gap-ms") o.storm_gap_ms = int_flag(v);
    else if (a == "--daemon-extra") o.daemon_extra = v;
    else if (a == "--python-fixer") o.python_fixer = v;
    else if (a == "--daemon-binary") o.daemon_binary = v;
    else if (a == "--floor-fixer") o.floor_fixer = v;
    else if (a == "--compare-daemon") o.compare_daemon = v;
    else {
      std::fprintf(stderr, "storm: unknown flag %s\n", a.c_str());
      return std::nullopt;
    }
  }
  if (argc % 2 == 0) {
    std::fprintf(stderr, "storm: flag %s has no value\n", argv[argc - 1]);
    return std::nullopt;
  }
  if (o.gpu_containers < 1 || o.gpu_containers > o.containers || o.rounds < 1 || o.fight_hz < 1) {
    std::fprintf(stderr, "storm: need 1 <= --gpu-containers <= --containers, --rounds >= 1, --fight-hz >= 1\n");
    return std::nullopt;
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Options> options = parse_options(argc, argv);
  if (!options) return 2;
  const Options& o = *options;
  if (!SandboxNode::available()) {
    std::fprintf(stderr, "storm: needs root and a writable cgroup v1 devices hierarchy\n");
    return 2;
  }
  install_interrupt_handlers();
  std::vector<Target> targets;
  try {
    // Destroyed on every way out of this block: repairers killed by PID, sleepers killed,
    // cgroups removed (all under the node's unique parent).
    SandboxNode node(SandboxNode::Options{.gpus = o.gpus, .tag = "storm"});
    targets = populate(node, o);
    TempDir files("gdw-storm");
    files.write("targets.json", targets_json(targets));

    std::printf("node: %d containers, %d GPU containers on %d GPUs, parent %s; %d rounds x (%d singles, %d storms); "
                "fight %d/s for %d s\n",
                o.containers, o.gpu_containers, o.gpus, node.cgroups().path().c_str(), o.rounds, o.singles, o.storms,
                o.fight_hz, o.fight_seconds);
    std::fflush(stdout);
    Bench bench(node, targets);
    Figures floor, fig_d, fig_p, fig_c, fig_x;
    for (int k = 0; k < std::min(o.singles, 200); ++k) bench.floor(k % static_cast<int>(targets.size()), floor);
    Daemon daemon(node, o.daemon_binary, o.daemon_extra);
    PythonFixer python(o.python_fixer, files.path() + "/targets.json");
    FloorFixer floor_fixer(o.floor_fixer.empty() ? beside_this_program("floor_fixer") : o.floor_fixer,
                           files.path() + "/targets.json");
    Daemon compared(node, o.compare_daemon, o.daemon_extra);
    std::vector<Repairer*> order{&daemon, &python, &floor_fixer};
    if (!o.compare_daemon.empty()) order.insert(order.begin() + 1, &compared);
    // A fresh node is slower to re-apply at first (the kernel's and the bench's caches are
    // cold): whoever went first measured about 8 % more CPU per storm than the same build
    // after it. The floor fixer warms the node up first; its figures are dropped.
    {
      Options warm = o;
      warm.singles = std::min(o.singles, 50);
      warm.storms = std::min(o.storms, 5);
      Figures dropped;
      std::printf("warm-up: %s\n", floor_fixer.name());
      std::fflush(stdout);
      run_session(bench, floor_fixer, warm, 1, static_cast<int>(targets.size()), false, dropped);
    }
    for (int round = 0; round < o.rounds; ++round) {
      const bool last = round == o.rounds - 1;
      for (Repairer* r : order) {
        std::printf("round %d: %s%s\n", round + 1, r->name(), r == &compared ? " (compared build)" : "");
        std::fflush(stdout);
        Figures& fig = r == &daemon ? fig_d : r == &python ? fig_p : r == &compared ? fig_x : fig_c;
        run_session(bench, *r, o, round, static_cast<int>(targets.size()), last, fig);
      }
      std::rotate(order.begin(), order.begin() + 1, order.end());  // each goes first in turn
    }
    print(fig_d, fig_p, fig_c, floor);
    if (!o.compare_daemon.empty()) print_compared(fig_d, fig_x);
    for (auto& t : targets) ::close(t.list_fd);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "storm: %s\n", e.what());
    return 1;
  }
  return 0;
}
