// bench/v2_reaction's options, the figures it gathers and how it prints them: one build's
// table (v2 styles beside v1), the compared build beside it, and the floor under any
// reaction.
#pragma once

#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "bench_stats.h"
#include "core/config.h"
#include "reappliers.h"
#include "spinner.h"

namespace gdw::bench::v2_reaction {

struct Options {
  int containers = 500, gpu_containers = 128, gpus = 8, samples = 300, gap_ms = 100;
  int load_hz = 50, load_seconds = 10, rounds = 1, spin_timeout_ms = 15000, open_interval_us = 0;
  int cross_cpu = 0;  // 1: the tenant on the last CPU, the daemon on CPU 0 (cpu_pinning.h)
  int runtime_process = 0, runtime_tail_us = 0;  // spinner.h: SpinOptions::runtime_process
  bool v2 = true, v1 = true;
  std::string daemon_extra;
  std::string daemon_binary = GDW_BINARY;
  std::string compare_daemon;  // another build, run on the same nodes (before/after)
};

// ---- the figures ------------------------------------------------------------------------

constexpr int kStyles = 3;  // indexed by ReapplyStyle

struct StyleFigures {
  std::vector<double> reaction_us, window_us;
  std::vector<double> from_exit_us;  // --runtime-process: the re-applier's exit -> allowed
  int allowed_before_exit = 0;       // --runtime-process: an allowed open returned before the exit
  long long eperm = 0;
  int clean = 0;  // re-applies whose spinner never saw EPERM
  int failures = 0;
  std::vector<std::string> errors;  // the first few failures, said once each
  void add(const SpinSample& s) {
    eperm += s.eperm;
    if (!s.allowed) {
      ++failures;
      if (errors.size() < 5) errors.push_back(s.error);
      return;
    }
    reaction_us.push_back(s.reaction_us);
    window_us.push_back(s.window_us);
    if (s.from_exit_us != -1) from_exit_us.push_back(s.from_exit_us);
    allowed_before_exit += s.allowed_before_exit;
    if (s.eperm == 0) ++clean;
  }
};

struct VersionFigures {
  StyleFigures styles[kStyles];
  std::vector<double> idle_cpu_s, load_cpu_s;  // per session, over --load-seconds
  long loads = 0, failed_loads = 0;
  long foreign_idle = 0, foreign_load = 0;  // programs others loaded in those windows
  double samples_cpu_s = 0;  // the daemon's CPU while the re-apply samples ran (all sessions)
  int samples_run = 0;       // re-applies made in those phases
  double rss_mib = -1;       // the largest, after the samples
  // Where a reaction's time goes, over the samples: the daemon's own repair time (its
  // gpu_devwatch_repair_duration_seconds, event seen -> grant written), and the BPF programs
  // loaded on the machine (the spinners' re-applies and the daemon's wrappers: a wrapper the
  // cache did not hold costs a verifier run).
  double repair_s = 0, repairs = 0, programs_loaded = 0;
  // The probe's records of the re-applies, kernel timestamp -> read by the daemon
  // (gpu_devwatch_probe_record_delay_seconds): the wake-up part of a reaction.
  double record_delay_s = 0, records = 0;
  // The daemon's wrapper loads (gpu_devwatch_device_programs_loaded_total): while a repair
  // waited (a verifier run on the reaction's path), and ahead of repairs. -1: a build
  // without that metric.
  double loads_on_path = -1, loads_ahead = -1;
  // The wake-ups taken between the re-applies: with the daemon's scheduler slice, and with
  // the kernel's default.
  std::vector<double> floor_us, floor_default_us;
  bool floor_slice_refused = false;  // the kernel kept its default for the first waiter too
  bool measured = false;
  StyleFigures& style(ReapplyStyle s) { return styles[static_cast<int>(s)]; }
  const StyleFigures& style(ReapplyStyle s) const { return styles[static_cast<int>(s)]; }
};

struct BuildFigures {
  VersionFigures v2, v1;
};

// ---- output -----------------------------------------------------------------------------

inline void print_cell(double v, int decimals) {
  if (v < 0) std::printf(" %17s", "-");
  else std::printf(" %17.*f", decimals, v);
}

inline void print_build(const char* title, const BuildFigures& b, const Options& o) {
  std::printf("\n%s\n", title);
  const StyleFigures* cols[] = {&b.v2.style(ReapplyStyle::kRuncV2), &b.v2.style(ReapplyStyle::kSystemdV2),
                                &b.v1.style(ReapplyStyle::kOldRuncV1)};
  std::printf("%-48s %17s %17s %17s\n", "figure", "v2 runc-style", "v2 systemd-style", "v1 old runc");
  auto row = [&](const char* what, auto value, int decimals, const char* unit) {
    std::printf("%-48s", what);
    for (const StyleFigures* s : cols) print_cell(s->reaction_us.empty() && s->failures == 0 ? -1 : value(*s), decimals);
    std::printf(" %s\n", unit);
  };
  for (auto [what, q] : {std::pair{"reaction p50 (attach/last write -> allowed open starts)", .5}, {"reaction p99", .99},
                         {"reaction max", 1.0}})
    row(what, [q = q](const StyleFigures& s) { return pct(s.reaction_us, q); }, 1, "µs");
  for (auto [what, q] : {std::pair{"window p50 (first harmful call -> allowed open starts)", .5}, {"window p99", .99},
                         {"window max", 1.0}})
    row(what, [q = q](const StyleFigures& s) { return pct(s.window_us, q); }, 1, "µs");
  if (o.runtime_process)
    for (auto [what, q] : {std::pair{"from exit p50 (runc process exits -> allowed open)", .5}, {"from exit p90", .9},
                           {"from exit p99", .99}})
      row(what, [q = q](const StyleFigures& s) { return pct(s.from_exit_us, q); }, 1, "µs");
  if (o.runtime_process)
    row("granted before the runc process exited (an allowed open returned first)",
        [](const StyleFigures& s) { return double(s.allowed_before_exit); }, 0, "samples");
  row("EPERM opens seen by the spinners (all samples)", [](const StyleFigures& s) { return double(s.eperm); }, 0, "");
  row("EPERM opens per re-apply (mean)", [](const StyleFigures& s) {
    const auto n = s.reaction_us.size() + static_cast<std::size_t>(s.failures);
    return n ? double(s.eperm) / double(n) : -1;
  }, 1, "");
  row("re-applies with no EPERM at all", [](const StyleFigures& s) { return double(s.clean); }, 0, "");
  row("samples measured", [](const StyleFigures& s) { return double(s.reaction_us.size()); }, 0, "");
  row("samples failed (no allowed open)", [](const StyleFigures& s) { return double(s.failures); }, 0, "");

  std::printf("\n%-48s %17s %17s\n", "figure", "v2", "v1");
  auto cpu_row = [&](const char* what, double v2, double v1, int decimals, const char* unit) {
    std::printf("%-48s", what);
    print_cell(b.v2.measured ? v2 : -1, decimals);
    print_cell(b.v1.measured ? v1 : -1, decimals);
    std::printf(" %s\n", unit);
  };
  char load_title[96];
  std::snprintf(load_title, sizeof load_title, "daemon CPU, %d unrelated loads/s, per %d s", o.load_hz, o.load_seconds);
  char idle_title[96];
  std::snprintf(idle_title, sizeof idle_title, "daemon CPU idle, per %d s (utime+stime)", o.load_seconds);
  cpu_row(idle_title, mean(b.v2.idle_cpu_s), mean(b.v1.idle_cpu_s), 2, "s");
  cpu_row(load_title, mean(b.v2.load_cpu_s), mean(b.v1.load_cpu_s), 2, "s");
  cpu_row("  = share of one core", 100 * mean(b.v2.load_cpu_s) / o.load_seconds,
          100 * mean(b.v1.load_cpu_s) / o.load_seconds, 1, "%");
  cpu_row("  programs loaded", double(b.v2.loads), double(b.v1.loads), 0, "");
  // Someone else's BPF activity (another test run on a shared machine) makes these windows
  // neither idle nor "50 loads/s": said here rather than hidden in the figure.
  cpu_row("BPF programs others loaded, idle windows", double(b.v2.foreign_idle), double(b.v1.foreign_idle), 0, "");
  cpu_row("BPF programs others loaded, load windows", double(b.v2.foreign_load), double(b.v1.foreign_load), 0, "");
  if (b.v2.failed_loads + b.v1.failed_loads > 0)
    std::printf("  of which refused: v2 %ld, v1 %ld\n", b.v2.failed_loads, b.v1.failed_loads);
  auto per_reapply = [](const VersionFigures& v) { return v.samples_run ? 1000 * v.samples_cpu_s / v.samples_run : -1; };
  cpu_row("daemon CPU per re-apply (CPU-time clock)", per_reapply(b.v2), per_reapply(b.v1), 2, "ms");
  auto per_sample = [](const VersionFigures& v, double n) { return v.samples_run ? n / v.samples_run : -1; };
  cpu_row("daemon repairs per re-apply", per_sample(b.v2, b.v2.repairs), per_sample(b.v1, b.v1.repairs), 2, "");
  auto repair_us = [](const VersionFigures& v) { return v.repairs > 0 ? 1e6 * v.repair_s / v.repairs : -1; };
  auto delay_us = [](const VersionFigures& v) { return v.records > 0 ? 1e6 * v.record_delay_s / v.records : -1; };
  cpu_row("probe record -> daemon reads it, mean", delay_us(b.v2), delay_us(b.v1), 1, "µs");
  cpu_row("daemon repair time, mean (record read -> grant)", repair_us(b.v2), repair_us(b.v1), 1, "µs");
  cpu_row("BPF programs loaded per re-apply (all)", per_sample(b.v2, b.v2.programs_loaded),
          per_sample(b.v1, b.v1.programs_loaded), 2, "");
  cpu_row("daemon wrapper loads while a repair waited", b.v2.loads_on_path, b.v1.loads_on_path, 0, "");
  cpu_row("daemon wrapper loads ahead of repairs", b.v2.loads_ahead, b.v1.loads_ahead, 0, "");
  cpu_row("daemon RSS after the samples (VmRSS)", b.v2.rss_mib, b.v1.rss_mib, 1, "MiB");
  for (const StyleFigures* s : cols)
    for (const auto& e : s->errors) std::printf("failure: %s\n", e.c_str());
}

// The --compare-daemon build beside the measured one: its figure, and compared/measured.
inline void print_compared(const BuildFigures& d, const BuildFigures& x, const Options& o) {
  std::printf("\n%-48s %14s %14s %8s\n", "figure", "gpu-devwatch", "compared", "cmp/gdw");
  auto line = [](const std::string& what, double a, double b, int decimals = 1) {
    std::printf("%-48s %14.*f %14.*f %8.2f\n", what.c_str(), decimals, a, decimals, b, a > 0 ? b / a : 0.0);
  };
  const std::pair<const char*, ReapplyStyle> styles[] = {{"v2 runc-style", ReapplyStyle::kRuncV2},
                                                         {"v2 systemd-style", ReapplyStyle::kSystemdV2},
                                                         {"v1 old runc", ReapplyStyle::kOldRuncV1}};
  for (auto [name, style] : styles) {
    const VersionFigures& dv = style == ReapplyStyle::kOldRuncV1 ? d.v1 : d.v2;
    const VersionFigures& xv = style == ReapplyStyle::kOldRuncV1 ? x.v1 : x.v2;
    if (!dv.measured) continue;
    line(std::string(name) + " reaction p50 (µs)", pct(dv.style(style).reaction_us, .5), pct(xv.style(style).reaction_us, .5));
    line(std::string(name) + " reaction p99 (µs)", pct(dv.style(style).reaction_us, .99), pct(xv.style(style).reaction_us, .99));
    line(std::string(name) + " window p99 (µs)", pct(dv.style(style).window_us, .99), pct(xv.style(style).window_us, .99));
    if (o.runtime_process) {
      line(std::string(name) + " from exit p50 (µs)", pct(dv.style(style).from_exit_us, .5),
           pct(xv.style(style).from_exit_us, .5));
      line(std::string(name) + " from exit p99 (µs)", pct(dv.style(style).from_exit_us, .99),
           pct(xv.style(style).from_exit_us, .99));
    }
    line(std::string(name) + " EPERM opens", double(dv.style(style).eperm), double(xv.style(style).eperm));
  }
  const std::string per = " (s per " + std::to_string(o.load_seconds) + " s)";
  for (auto [name, dv, xv] : {std::tuple{"v2", &d.v2, &x.v2}, {"v1", &d.v1, &x.v1}}) {
    if (!dv->measured) continue;
    line(std::string(name) + " CPU idle" + per, mean(dv->idle_cpu_s), mean(xv->idle_cpu_s), 2);
    line(std::string(name) + " CPU, unrelated loads" + per, mean(dv->load_cpu_s), mean(xv->load_cpu_s), 2);
    line(std::string(name) + " CPU per re-apply (ms)", 1000 * dv->samples_cpu_s / std::max(1, dv->samples_run),
         1000 * xv->samples_cpu_s / std::max(1, xv->samples_run), 2);
  }
}

// The floor beside each style's reaction and window: a percentile below the floor's is
// beyond any repairer that reacts in user space on this machine.
inline void print_floor(const BuildFigures& b, const Options& o) {
  std::printf("\nfloor: an idle process woken through epoll_wait by a busy one (eventfd), twice between each two "
              "re-applies (%d ms apart), the daemon idle; with the daemon's default scheduler slice (%u µs) and with "
              "the kernel's; beside it the reactions and windows above\n",
              o.gap_ms, gdw::Config{}.daemon.event_loop_slice_us);
  auto cell = [](double v) { v < 0 ? std::printf(" %13s", "-") : std::printf(" %13.1f", v); };
  for (const VersionFigures* v : {&b.v2, &b.v1}) {
    if (!v->measured) continue;
    if (v->floor_slice_refused) std::printf("(this kernel kept its default slice: both floors are that one's)\n");
    const bool v2 = v == &b.v2;
    std::printf("%-6s %13s %13s", v2 ? "v2" : "v1", "floor, slice", "floor, dflt");
    if (v2) std::printf(" %13s %13s %13s %13s\n", "runc react", "runc window", "sd react", "sd window");
    else std::printf(" %13s %13s\n", "react", "window");
    for (auto [what, q] : {std::pair{"p50", .5}, {"p90", .9}, {"p99", .99}, {"max", 1.0}}) {
      std::printf("%-6s", what);
      cell(pct(v->floor_us, q));
      cell(pct(v->floor_default_us, q));
      const std::vector<ReapplyStyle> styles =
          v2 ? std::vector{ReapplyStyle::kRuncV2, ReapplyStyle::kSystemdV2} : std::vector{ReapplyStyle::kOldRuncV1};
      for (ReapplyStyle s : styles) {
        cell(pct(v->style(s).reaction_us, q));
        cell(pct(v->style(s).window_us, q));
      }
      std::printf(" µs\n");
    }
  }
}

// The same run as ratios (absolute times move between runs here, ratios much less): each
// style's reaction over the floor with the daemon's slice (at or under 1: nothing of the
// daemon's own is left on the tail), and what the tenant lives through on v2 against v1,
// the window (the first harmful call -> allowed): v1's reaction starts at the runtime's
// last write, when the daemon has been awake since its first, v2's at its only call.
inline void print_ratios(const BuildFigures& b) {
  auto ratio = [](double a, double f) { return a >= 0 && f > 0 ? a / f : -1.0; };
  auto cell = [](double v) { v < 0 ? std::printf(" %9s", "-") : std::printf(" %9.2f", v); };
  std::printf("\nratios, this run%28s %9s %9s\n", "p50", "p90", "p99");
  const std::tuple<const char*, const VersionFigures*, ReapplyStyle> styles[] = {
      {"v2 runc-style", &b.v2, ReapplyStyle::kRuncV2},
      {"v2 systemd-style", &b.v2, ReapplyStyle::kSystemdV2},
      {"v1 old runc", &b.v1, ReapplyStyle::kOldRuncV1}};
  for (auto [name, v, style] : styles) {
    if (!v->measured) continue;
    std::printf("%-16s reaction / floor  ", name);
    for (double q : {.5, .9, .99}) cell(ratio(pct(v->style(style).reaction_us, q), pct(v->floor_us, q)));
    std::printf("\n");
  }
  if (!b.v2.measured || !b.v1.measured) return;
  const auto& v1_window = b.v1.style(ReapplyStyle::kOldRuncV1).window_us;
  for (auto [name, v, style] : styles) {
    if (v == &b.v1) continue;
    std::printf("%-16s window / v1's     ", name);
    for (double q : {.5, .9, .99}) cell(ratio(pct(v->style(style).window_us, q), pct(v1_window, q)));
    std::printf("\n");
  }
}

}  // namespace gdw::bench::v2_reaction
