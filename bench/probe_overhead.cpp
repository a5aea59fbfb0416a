// What the probe costs unrelated processes: ns per write() to /dev/null, per
// openat()+close() of a regular file, per mmap()+munmap() of a private writable page
// (which passes a CAP_SYS_ADMIN check, where the capability hook runs), and two calls that
// allocate with kmalloc, where the attach hook's program runs (it returns after one
// comparison of the call site): a read of /proc/self/stat (seq_file's buffer) and a 4000
// byte send+receive on a unix socket (the skb's data). Five configurations alternate in the
// same run:
//   none      no probe
//   v2        the probe as the daemon runs it by default on a cgroup v2 node (the attach
//             hook; syscall hook detached)
//   v1        the same on a cgroup v1 node (the capability hook)
//   both      both hooks: the probe before it knows the node's cgroup version (and every
//             node's default before 2026-11-27)
//   v2+hook   v2 with the syscall hook attached (while a GPU container misses devices,
//             or probe.syscall_hook: always)
// The loops run in a worker process forked before any probe is loaded, so the probe's
// maps and ring buffer never share its address space: it is the unrelated process. With
// the probe loaded a few cgroups and the GPU major are watched (none of them the
// worker's), as in a daemon that watches GPU containers.
//
//   probe_overhead [rounds] [writes-per-round] [opens-per-round] [mmaps-per-round]
// (the /proc and socket loops run as many calls as the open loop)
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
#include <memory>
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

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  std::size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

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

enum Mode { kNone, kV2, kV1, kBoth, kHook, kModes };
const char* const kModeNames[kModes] = {"none", "v2", "v1", "both", "v2+hook"};

std::unique_ptr<gdw::Probe> load_probe(Mode mode) {
  gdw::ProbeOptions options;
  options.syscall_hook = mode == kHook;
  auto probe = gdw::Probe::load(options);
  if (!probe) {
    std::fprintf(stderr, "probe_overhead: %s\n", probe.error().message.c_str());
    std::exit(1);
  }
  const gdw::DevicePolicyForm form = mode == kV1     ? gdw::DevicePolicyForm::kRuleFiles
                                     : mode == kBoth ? gdw::DevicePolicyForm::kUnknown
                                                     : gdw::DevicePolicyForm::kPrograms;
  if (auto focused = (*probe)->focus(form); !focused) {
    std::fprintf(stderr, "probe_overhead: %s\n", focused.error().message.c_str());
    std::exit(1);
  }
  // Ids that are no cgroup of this process: the open filter runs and finds nothing.
  for (std::uint64_t id : {0xfffff001ull, 0xfffff002ull, 0xfffff003ull}) {
    if (!(*probe)->watch_cgroup(id)) std::exit(1);
  }
  if (!(*probe)->watch_major(195)) std::exit(1);
  if (mode != kV1 && !(*probe)->attach_hook()) {
    std::fprintf(stderr, "probe_overhead: no attach hook: %s\n", (*probe)->attach_hook_choice().describe().c_str());
    std::exit(1);
  }
  return std::move(*probe);
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
  long writes = argc > 2 ? std::atol(argv[2]) : 500000;
  long opens = argc > 3 ? std::atol(argv[3]) : 100000;
  long mmaps = argc > 4 ? std::atol(argv[4]) : 100000;

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

  // The loops: the call, its letter for the worker, and calls per round.
  struct Loop {
    const char* call;
    char letter;
    long calls;
    std::vector<double> ns[kModes];
  };
  Loop loops[] = {{"write(/dev/null, 1)", 'w', writes, {}},
                  {"openat+close(regular)", 'o', opens, {}},
                  {"mmap+munmap(4 KiB)", 'm', mmaps, {}},
                  {"read(/proc/self/stat)", 'p', opens, {}},
                  {"unix send+recv 4000 B", 'u', opens, {}}};
  // Warm caches and the dentry before measuring.
  for (const auto& loop : loops) worker.run(loop.letter, loop.calls / 10);

  std::printf("%-5s %-8s", "round", "mode");
  for (const auto& loop : loops) std::printf(" %22s", loop.call);
  std::printf("   (ns per call)\n");
  for (int round = 0; round < rounds; ++round) {
    // Rotate which mode goes first so drift does not favour one.
    for (int step = 0; step < kModes; ++step) {
      const Mode mode = static_cast<Mode>((round + step) % kModes);
      std::unique_ptr<gdw::Probe> probe;
      if (mode != kNone) probe = load_probe(mode);
      std::printf("%-5d %-8s", round, kModeNames[mode]);
      for (auto& loop : loops) {
        loop.ns[mode].push_back(worker.run(loop.letter, loop.calls));
        std::printf(" %22.1f", loop.ns[mode].back());
      }
      std::printf("\n");
    }
  }
  ::close(null_fd);

  // The minimum is the least disturbed by other load on the machine; the median is shown
  // next to it so a noisy run is visible as a gap between the two.
  auto row = [](const char* call, const std::vector<double>* ns) {
    double min0 = *std::min_element(ns[kNone].begin(), ns[kNone].end()), med0 = median(ns[kNone]);
    std::printf("%-24s %8.1f %8.1f", call, min0, med0);
    for (int mode : {kV2, kV1, kBoth, kHook}) {
      double min1 = *std::min_element(ns[mode].begin(), ns[mode].end()), med1 = median(ns[mode]);
      std::printf(" | %8.1f %7.1f%% %8.1f %7.1f%%", min1, (min1 - min0) / min0 * 100, med1, (med1 - med0) / med0 * 100);
    }
    std::printf("\n");
  };
  std::printf("\n%d rounds, %ld writes, %ld opens, %ld mmaps per round; ns per call (min, median)\n", rounds, writes,
              opens, mmaps);
  std::printf("%-24s %8s %8s", "call", "none", "(med)");
  for (const char* mode : {"v2", "v1", "both", "v2+hook"})
    std::printf(" | %8s %8s %8s %8s", mode, "overhead", "(med)", "overhead");
  std::printf("\n");
  for (const auto& loop : loops) row(loop.call, loop.ns);
  return 0;
}
