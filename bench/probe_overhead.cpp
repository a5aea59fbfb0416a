// What the probe costs unrelated processes: ns per write() to /dev/null, per
// openat()+close() of a regular file, per mmap()+munmap() of a private writable page
// (which passes a CAP_SYS_ADMIN check, where the capability hook runs), and two calls that
// allocate with kmalloc, where the attach hook's program runs (it returns after one
// comparison of the call site): a read of /proc/self/stat (seq_file's buffer) and a 4000
// byte send+receive on a unix socket (the skb's data). The configurations alternate in the
// same run, each attach hook kind side by side wherever this kernel loads it (the others
// are listed with why they were refused):
//   none            no probe
//   none:again      no probe either: the A/A control, measured like any configuration, whose
//                   spread is the run's noise
//   v2:lsm          the probe on a cgroup v2 node with the attach hook on lsm/bpf (bpf in
//                   the active LSM list; only bpf() calls pass it)
//   v2:fexit        ... on fexit/cgroup_bpf_prog_attach (BPF trampolines; only cgroup
//                   attaches pass it)
//   v2:kmalloc      ... on tp_btf/kmalloc (every kmalloc passes it)
//   v2:capability   ... without an attach hook (probe.attach_hook: false): program loads at
//                   the capability hook
//   v1              the probe on a cgroup v1 node (the capability hook, or before 6.14 the
//                   write path hook)
//   both            every always-on hook: the probe before it knows the node's cgroup
//                   version
//   v2+hook         the default v2 probe with the syscall hook attached (while a GPU
//                   container misses devices, or probe.syscall_hook: always)
// The default on a v2 node is the first v2:<kind> listed; the issue 39 target is < 1 % on
// every call where that is lsm or fexit.
// The loops run in a worker process forked before any probe is loaded, so the probe's
// maps and ring buffer never share its address space: it is the unrelated process. With
// the probe loaded a few cgroups and the GPU major are watched (none of them the
// worker's), as in a daemon that watches GPU containers.
//
// Each round measures no probe between every two configurations (none, A, none, B, none,
// ...; the order of A, B, ... rotates from round to round), and each configuration's
// round ratio is its time over the mean of the two no-probe times beside it, so drift of
// the machine (an emulated guest's, a shared VM's) cancels. The summary gives, per
// configuration and call, the median of those round ratios with their quartiles and range
// (the A/A control's show how far nothing moves), and the minimum of each as before.
//
// Before each measurement the bench sleeps --settle-ms (default 100) after the last probe
// load or unload and runs every loop a tenth as long untimed.
//
//   probe_overhead [--modes=NAME,...] [--settle-ms=MS] [rounds] [writes-per-round] [opens-per-round] [mmaps-per-round]
// (the /proc and socket loops run as many calls as the open loop; --modes: the
// configurations to measure besides none, e.g. --modes=none:again,v2:lsm,v2:fexit)
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "probe/probe.h"
#include "support/temp_dir.h"

namespace {

using Clock = std::chrono::steady_clock;

double ns_per_call(Clock::time_point start, Clock::time_point end, long calls) {
  return std::chrono::duration<double, std::nano>(end - start).count() / static_cast<double>(calls);
}

double time_writes(int fd, long calls) {
  char byte = 'x';
  auto start = Clock::now();
  for (long i = 0; i < calls; ++i) {
    if (::write(fd, &byte, 1) != 1) std::abort();
  }
  return ns_per_call(start, Clock::now(), calls);
}

double time_opens(const std::string& path, long calls) {
  auto start = Clock::now();
  for (long i = 0; i < calls; ++i) {
    int fd = ::openat(AT_FDCWD, path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) std::abort();
    ::close(fd);
  }
  return ns_per_call(start, Clock::now(), calls);
}

double time_mmaps(long calls) {
  auto start = Clock::now();
  for (long i = 0; i < calls; ++i) {
    void* page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) std::abort();
    ::munmap(page, 4096);
  }
  return ns_per_call(start, Clock::now(), calls);
}

double time_proc_reads(long calls) {
  char buf[4096];
  auto start = Clock::now();
  for (long i = 0; i < calls; ++i) {
    int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::read(fd, buf, sizeof buf) <= 0) std::abort();
    ::close(fd);
  }
  return ns_per_call(start, Clock::now(), calls);
}

double time_socket_round_trips(long calls) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) std::abort();
  static char buf[4000];
  auto start = Clock::now();
  for (long i = 0; i < calls; ++i) {
    if (::send(pair[0], buf, sizeof buf, 0) != sizeof buf) std::abort();
    for (std::size_t got = 0; got < sizeof buf;) {
      ssize_t n = ::recv(pair[1], buf + got, sizeof buf - got, 0);
      if (n <= 0) std::abort();
      got += static_cast<std::size_t>(n);
    }
  }
  const double ns = ns_per_call(start, Clock::now(), calls);
  ::close(pair[0]);
  ::close(pair[1]);
  return ns;
}

// The q-quantile (0..1) of `values`, interpolated between the two nearest.
double quantile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  const double at = q * static_cast<double>(values.size() - 1);
  const auto below = static_cast<std::size_t>(at);
  if (below + 1 >= values.size()) return values.back();
  return values[below] + (at - static_cast<double>(below)) * (values[below + 1] - values[below]);
}

double median(std::vector<double> values) { return quantile(std::move(values), 0.5); }

// The unrelated process: runs one timed loop per request on a pipe, answers ns per call.
class Worker {
 public:
  Worker(int null_fd, std::string file) {
    int requests[2], answers[2];
    if (::pipe2(requests, O_CLOEXEC) != 0 || ::pipe2(answers, O_CLOEXEC) != 0) std::abort();
    pid_ = ::fork();
    if (pid_ < 0) std::abort();
    if (pid_ == 0) {
      ::close(requests[1]);
      ::close(answers[0]);
      struct Request {
        char loop;
        long calls;
      } request;
      while (::read(requests[0], &request, sizeof(request)) == sizeof(request)) {
        double ns = request.loop == 'w'   ? time_writes(null_fd, request.calls)
                    : request.loop == 'o' ? time_opens(file, request.calls)
                    : request.loop == 'p' ? time_proc_reads(request.calls)
                    : request.loop == 'u' ? time_socket_round_trips(request.calls)
                                          : time_mmaps(request.calls);
        if (::write(answers[1], &ns, sizeof(ns)) != sizeof(ns)) _exit(1);
      }
      _exit(0);
    }
    ::close(requests[0]);
    ::close(answers[1]);
    to_ = requests[1];
    from_ = answers[0];
  }
  ~Worker() {
    ::close(to_);
    ::close(from_);
    ::waitpid(pid_, nullptr, 0);
  }
  double run(char loop, long calls) {
    struct {
      char loop;
      long calls;
    } request{loop, calls};
    double ns = 0;
    if (::write(to_, &request, sizeof(request)) != sizeof(request) || ::read(from_, &ns, sizeof(ns)) != sizeof(ns))
      std::abort();
    return ns;
  }

 private:
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
};

// One configuration: how its probe is loaded and focused.
struct Mode {
  std::string name;
  bool probe = true;
  gdw::DevicePolicyForm form = gdw::DevicePolicyForm::kPrograms;
  std::optional<gdw::AttachHookKind> kind;  // v2:<kind>: that kind alone
  bool syscall_hook = false;
};

std::vector<Mode> all_modes() {
  using gdw::AttachHookKind;
  using gdw::DevicePolicyForm;
  std::vector<Mode> modes{{"none", false}, {"none:again", false}};
  for (AttachHookKind kind : gdw::kAttachHookKinds)
    modes.push_back({"v2:" + std::string(gdw::to_string(kind)), true, DevicePolicyForm::kPrograms, kind});
  modes.push_back({"v1", true, DevicePolicyForm::kRuleFiles});
  modes.push_back({"both", true, DevicePolicyForm::kUnknown});
  modes.push_back({"v2+hook", true, DevicePolicyForm::kPrograms, std::nullopt, true});
  return modes;
}

// The probe of `mode`, or why this kernel does not load it.
gdw::Result<std::unique_ptr<gdw::Probe>> load_probe(const Mode& mode) {
  gdw::ProbeOptions options;
  options.syscall_hook = mode.syscall_hook;
  if (mode.kind == gdw::AttachHookKind::kCapability)
    options.attach_hook = false;
  else if (mode.kind)
    options.attach_hook_kinds = {*mode.kind};
  auto probe = gdw::Probe::load(options);
  if (!probe) return probe.error();
  if (auto focused = (*probe)->focus(mode.form); !focused) return focused.error();
  // Ids that are no cgroup of this process: the open filter runs and finds nothing.
  for (std::uint64_t id : {0xfffff001ull, 0xfffff002ull, 0xfffff003ull}) {
    if (auto s = (*probe)->watch_cgroup(id); !s) return s.error();
  }
  if (auto s = (*probe)->watch_major(195); !s) return s.error();
  if (const gdw::AttachHookChoice choice = (*probe)->attach_hook_choice(); mode.kind && choice.chosen != mode.kind) {
    for (const auto& [kind, why] : choice.refused)
      if (kind == *mode.kind) return gdw::Error{std::string(gdw::hook_point(kind)) + " refused: " + why};
    return gdw::Error{choice.describe()};
  }
  if (mode.form == gdw::DevicePolicyForm::kPrograms && !mode.kind && !(*probe)->attach_hook())
    return gdw::Error{"no attach hook: " + (*probe)->attach_hook_choice().describe()};
  return std::move(*probe);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> chosen;  // --modes: empty for all
  std::vector<const char*> numbers;
  int settle_ms = 100;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--modes=", 8) == 0) {
      std::string list = argv[i] + 8;
      for (std::size_t at = 0; at <= list.size();) {
        const std::size_t comma = std::min(list.find(',', at), list.size());
        if (comma > at) chosen.push_back(list.substr(at, comma - at));
        at = comma + 1;
      }
    } else if (std::strncmp(argv[i], "--settle-ms=", 12) == 0) {
      settle_ms = std::atoi(argv[i] + 12);
    } else {
      numbers.push_back(argv[i]);
    }
  }
  int rounds = numbers.size() > 0 ? std::atoi(numbers[0]) : 7;
  long writes = numbers.size() > 1 ? std::atol(numbers[1]) : 500000;
  long opens = numbers.size() > 2 ? std::atol(numbers[2]) : 100000;
  long mmaps = numbers.size() > 3 ? std::atol(numbers[3]) : 100000;
  for (const std::string& name : chosen) {
    const auto known = all_modes();
    if (std::none_of(known.begin(), known.end(), [&](const Mode& m) { return m.name == name; })) {
      std::fprintf(stderr, "probe_overhead: unknown mode '%s' (known:", name.c_str());
      for (const Mode& m : known) std::fprintf(stderr, " %s", m.name.c_str());
      std::fprintf(stderr, ")\n");
      return 2;
    }
  }
  if (rounds < 1) return 2;

  // One CPU for the worker: no migrations between the timed loops.
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(0, &cpus);
  ::sched_setaffinity(0, sizeof(cpus), &cpus);

  gdw::test::TempDir dir("gdw-probe-bench");
  std::string file = dir.write("regular", "x");
  int null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null_fd < 0) return 1;
  Worker worker(null_fd, file);

  // Which configurations this kernel loads (each tried once, unloaded before the rounds).
  // modes[0] is none, the baseline.
  std::vector<Mode> modes;
  std::string default_mode;
  for (const Mode& mode : all_modes()) {
    if (mode.name != "none" && !chosen.empty() && std::find(chosen.begin(), chosen.end(), mode.name) == chosen.end())
      continue;
    if (!mode.probe) {
      modes.push_back(mode);
      continue;
    }
    auto probe = load_probe(mode);
    if (!probe) {
      std::printf("%-14s not measured: %s\n", mode.name.c_str(), probe.error().message.c_str());
      continue;
    }
    if (default_mode.empty() && mode.kind) default_mode = mode.name;
    modes.push_back(mode);
  }
  const std::size_t n = modes.size();
  if (n < 2) {
    std::fprintf(stderr, "probe_overhead: nothing to measure against no probe\n");
    return 1;
  }

  // The loops: the call, its letter for the worker, and calls per round.
  struct Loop {
    const char* call;
    char letter;
    long calls;
    std::vector<std::vector<double>> ns;      // per mode: every measurement
    std::vector<std::vector<double>> ratios;  // per mode: its round ratios to the none beside it
  };
  std::vector<Loop> loops = {{"write(/dev/null, 1)", 'w', writes, {}, {}},
                             {"openat+close(regular)", 'o', opens, {}, {}},
                             {"mmap+munmap(4 KiB)", 'm', mmaps, {}, {}},
                             {"read(/proc/self/stat)", 'p', opens, {}, {}},
                             {"unix send+recv 4000 B", 'u', opens, {}, {}}};
  for (auto& loop : loops) {
    loop.ns.resize(n);
    loop.ratios.resize(n);
  }
  // Warm caches and the dentry before measuring.
  for (const auto& loop : loops) worker.run(loop.letter, loop.calls / 10);

  // One measurement of every loop under mode m (its probe loaded for it, unloaded after).
  auto measure = [&](int round, std::size_t m) -> std::optional<std::vector<double>> {
    std::unique_ptr<gdw::Probe> probe;
    if (modes[m].probe) {
      auto loaded = load_probe(modes[m]);
      if (!loaded) {
        std::fprintf(stderr, "probe_overhead: %s: %s\n", modes[m].name.c_str(), loaded.error().message.c_str());
        return std::nullopt;
      }
      probe = std::move(*loaded);
    }
    // Let the kernel's deferred work of the last load or unload (freeing programs, maps and
    // trampolines after RCU) run before timing, then warm the loops again: without it the
    // measurement after a change pays for the change.
    ::usleep(static_cast<useconds_t>(settle_ms) * 1000);
    for (const auto& loop : loops) worker.run(loop.letter, loop.calls / 10);
    std::vector<double> ns;
    std::printf("%-5d %-14s", round, modes[m].name.c_str());
    for (auto& loop : loops) {
      ns.push_back(worker.run(loop.letter, loop.calls));
      loop.ns[m].push_back(ns.back());
      std::printf(" %22.1f", ns.back());
    }
    std::printf("\n");
    std::fflush(stdout);
    return ns;
  };

  std::printf("%-5s %-14s", "round", "mode");
  for (const auto& loop : loops) std::printf(" %22s", loop.call);
  std::printf("   (ns per call)\n");
  for (int round = 0; round < rounds; ++round) {
    // none, A, none, B, none, ...: the order of A, B, ... rotates so drift favours none of them.
    auto before = measure(round, 0);
    if (!before) return 1;
    for (std::size_t step = 0; step + 1 < n; ++step) {
      const std::size_t m = 1 + (static_cast<std::size_t>(round) + step) % (n - 1);
      auto ns = measure(round, m);
      auto after = ns ? measure(round, 0) : std::nullopt;
      if (!after) return 1;
      for (std::size_t l = 0; l < loops.size(); ++l)
        loops[l].ratios[m].push_back((*ns)[l] / (((*before)[l] + (*after)[l]) / 2));
      before = std::move(after);
    }
  }
  ::close(null_fd);

  // Per configuration, against none: the median of the round ratios, their quartiles and
  // range (a configuration within the A/A control's range is within noise), and the
  // minimums as before (the least disturbed of each, independent of pairing).
  const auto pct = [](double ratio) { return (ratio - 1) * 100; };
  std::printf("\n%d rounds, %ld writes, %ld opens, %ld mmaps per round; the default here: %s\n", rounds, writes, opens,
              mmaps, default_mode.empty() ? "(no attach hook kind loaded)" : default_mode.c_str());
  std::printf("overhead against no probe: median of the %d round ratios [quartiles] (range); min against min\n",
              rounds);
  for (std::size_t m = 1; m < n; ++m) {
    std::printf("\n%-24s %9s %9s  %-14s %8s %19s %19s %8s\n", "call", "none med", "mode med",
                (modes[m].name + (modes[m].name == default_mode ? "*" : "")).c_str(), "median", "[quartiles]",
                "(range)", "min");
    for (const auto& loop : loops) {
      const auto& r = loop.ratios[m];
      const double min0 = *std::min_element(loop.ns[0].begin(), loop.ns[0].end());
      const double min1 = *std::min_element(loop.ns[m].begin(), loop.ns[m].end());
      std::printf("%-24s %9.1f %9.1f  %14s %+7.2f%% [%+7.2f%%,%+7.2f%%] (%+7.2f%%,%+7.2f%%) %+7.2f%%\n", loop.call,
                  median(loop.ns[0]), median(loop.ns[m]), "", pct(median(r)), pct(quantile(r, 0.25)),
                  pct(quantile(r, 0.75)), pct(*std::min_element(r.begin(), r.end())),
                  pct(*std::max_element(r.begin(), r.end())), pct(min1 / min0));
    }
  }
  return 0;
}
