// The lines a bench prints before its figures, so that a pasted run says when, how and
// where it was measured: the date (UTC), the command line, the machine, and how loaded the
// machine was (the CI machine kind is shared with other builds).
#pragma once

#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>

namespace gdw::bench {

// The three load averages of /proc/loadavg ("1.52 1.31 0.98").
inline std::string loadavg() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

// "<model name>, <n> CPUs, <MemTotal> GiB, kernel <release>"
inline std::string machine_description() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(cpuinfo, line))
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kib = 0;
  meminfo >> key >> kib;  // MemTotal: <kB>
  utsname u{};
  ::uname(&u);
  char text[512];
  std::snprintf(text, sizeof text, "%s, %ld CPUs, %.0f GiB, kernel %s", model.c_str(), ::sysconf(_SC_NPROCESSORS_ONLN),
                kib / 1024 / 1024, u.release);
  return text;
}

inline void print_run_header(int argc, char** argv) {
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  std::printf("date:     %s\ncommand:  %s\nmachine:  %s\nloadavg:  %s (at start)\n", date, command.c_str(),
              machine_description().c_str(), loadavg().c_str());
  std::fflush(stdout);
}

}  // namespace gdw::bench
