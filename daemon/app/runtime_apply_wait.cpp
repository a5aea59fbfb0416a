#include "app/runtime_apply_wait.h"

#include <sys/stat.h>

#include <chrono>
#include <ctime>
#include <map>
#include <thread>
#include <vector>

#include "runtime/create_runtime.h"
#include "runtime/runtime_updates.h"

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

// What of an update goes on now for `bundle`'s container, or "".
std::string update_going_on(const Bundle& bundle, const std::multimap<std::string, RuntimeUpdate>& updates) {
  const auto it = updates.find(bundle.container_id);
  if (it == updates.end()) return {};
  return "its runtime (" + it->second.comm + ", pid " + std::to_string(it->second.pid) + ") is updating it";
}

}  // namespace

void wait_for_applies_end(const std::vector<const Bundle*>& bundles, Duration limit, const RuntimeProcesses& processes,
                          const std::function<void(std::size_t, std::string)>& ended) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  struct Pending {
    std::size_t index;
    bool bundle_new;
  };
  std::vector<Pending> pending;
  for (std::size_t i = 0; i < bundles.size(); ++i) {
    if (!bundles[i]) {
      ended(i, {});
      continue;
    }
    const auto age = written_ago(bundles[i]->config_path);
    pending.push_back({i, age && *age < limit});
  }
  while (!pending.empty()) {
    const bool at_limit = std::chrono::steady_clock::now() >= deadline;
    // One walk of the processes per look, for every container still pending.
    std::multimap<std::string, RuntimeUpdate> updates;
    for (auto& u : runtime_updates_at_work(processes.proc_root, processes.cgroup_controller, processes.in_a_container))
      updates.emplace(u.container_id, std::move(u));
    // One look at each still pending (erase_if asks its predicate once per element): those
    // whose applies ended, or all at the limit, are handed on and leave the list.
    std::erase_if(pending, [&](const Pending& p) {
      const Bundle& bundle = *bundles[p.index];
      std::string going_on = create_going_on(bundle, p.bundle_new, processes.proc_root);
      if (going_on.empty()) going_on = update_going_on(bundle, updates);
      if (!going_on.empty() && !at_limit) return false;
      ended(p.index, std::move(going_on));
      return true;
    });
    if (!pending.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace gdw
