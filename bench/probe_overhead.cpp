// What the probe costs unrelated processes: ns per write() to /dev/null and per
// openat()+close() of a regular file, without and with the probe attached, alternating
// in the same run. With the probe loaded a few cgroups and the GPU major are watched
// (none of them this process's), as in a daemon that watches GPU containers.
//
//   probe_overhead [rounds] [writes-per-round] [opens-per-round]
#include <fcntl.h>
#include <sched.h>
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

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  std::size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

std::unique_ptr<gdw::Probe> load_probe() {
  auto probe = gdw::Probe::load();
  if (!probe) {
    std::fprintf(stderr, "probe_overhead: %s\n", probe.error().message.c_str());
    std::exit(1);
  }
  // Ids that are no cgroup of this process: the open filter runs and finds nothing.
  for (std::uint64_t id : {0xfffff001ull, 0xfffff002ull, 0xfffff003ull}) {
    if (!(*probe)->watch_cgroup(id)) std::exit(1);
  }
  if (!(*probe)->watch_major(195)) std::exit(1);
  return std::move(*probe);
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
  long writes = argc > 2 ? std::atol(argv[2]) : 500000;
  long opens = argc > 3 ? std::atol(argv[3]) : 100000;

  // One CPU: no migrations between the timed loops.
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(0, &cpus);
  ::sched_setaffinity(0, sizeof(cpus), &cpus);

  gdw::test::TempDir dir("gdw-probe-bench");
  std::string file = dir.write("regular", "x");
  int null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null_fd < 0) return 1;

  // Warm caches and the dentry before measuring.
  time_writes(null_fd, writes / 10);
  time_opens(file, opens / 10);

  std::vector<double> write_without, write_with, open_without, open_with;
  std::printf("%-5s %-8s %14s %14s\n", "round", "probe", "write ns/call", "openat ns/call");
  for (int round = 0; round < rounds; ++round) {
    // Alternate which mode goes first so drift does not favour one.
    for (int step = 0; step < 2; ++step) {
      bool with_probe = (round + step) % 2 == 1;
      std::unique_ptr<gdw::Probe> probe;
      if (with_probe) probe = load_probe();
      double w = time_writes(null_fd, writes);
      double o = time_opens(file, opens);
      (with_probe ? write_with : write_without).push_back(w);
      (with_probe ? open_with : open_without).push_back(o);
      std::printf("%-5d %-8s %14.1f %14.1f\n", round, with_probe ? "loaded" : "none", w, o);
    }
  }
  ::close(null_fd);

  // The minimum is the least disturbed by other load on the machine; the median is shown
  // next to it so a noisy run is visible as a gap between the two.
  auto row = [](const char* call, const std::vector<double>& without, const std::vector<double>& with) {
    double min0 = *std::min_element(without.begin(), without.end());
    double min1 = *std::min_element(with.begin(), with.end());
    double med0 = median(without), med1 = median(with);
    std::printf("%-22s %9.1f %9.1f %8.1f%% %9.1f %9.1f %8.1f%%\n", call, min0, min1, (min1 - min0) / min0 * 100,
                med0, med1, (med1 - med0) / med0 * 100);
  };
  std::printf("\n%d rounds, %ld writes and %ld opens per round; ns per call\n", rounds, writes, opens);
  std::printf("%-22s %9s %9s %9s %9s %9s %9s\n", "call", "min none", "min probe", "overhead", "med none",
              "med probe", "overhead");
  row("write(/dev/null, 1)", write_without, write_with);
  row("openat+close(regular)", open_without, open_with);
  return 0;
}
