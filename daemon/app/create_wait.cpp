#include "app/create_wait.h"

#include <sys/stat.h>

#include <chrono>
#include <ctime>
#include <thread>

#include "runtime/create_runtime.h"

namespace gdw {
namespace {

// How long ago `path` was last written (its mtime against the wall clock); nullopt when it
// cannot be read.
std::optional<std::chrono::nanoseconds> written_ago(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return std::chrono::seconds(now.tv_sec - st.st_mtim.tv_sec) + std::chrono::nanoseconds(now.tv_nsec - st.st_mtim.tv_nsec);
}

// What of the create goes on now, or "". `bundle_new`: the bundle was written less than the
// limit ago at the first look.
std::string create_going_on(const Bundle& bundle, bool bundle_new, const std::string& proc_root) {
  const std::string pid_file = create_pid_file(bundle);
  if (pid_file.empty()) return {};
  struct stat st{};
  if (::stat(pid_file.c_str(), &st) != 0)
    return bundle_new ? "its runtime's create has not written " + pid_file + " yet" : std::string();
  if (const auto runtime = create_runtime_at_work(pid_file, proc_root))
    return "its runtime (" + runtime->comm + ", pid " + std::to_string(runtime->pid) + ") has not exited yet";
  return {};
}

}  // namespace

std::string wait_for_create_end(const Bundle& bundle, Duration limit, const std::string& proc_root) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  const auto age = written_ago(bundle.config_path);
  const bool bundle_new = age && *age < limit;
  for (;;) {
    std::string going_on = create_going_on(bundle, bundle_new, proc_root);
    if (going_on.empty() || std::chrono::steady_clock::now() >= deadline) return going_on;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace gdw
