#include "app/runtime_apply_wait.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <thread>
#include <vector>

#include "runtime/create_runtime.h"
#include "runtime/runtime_applies.h"

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

// What a runtime's create or update of `bundle`'s container goes on now, or "". A runtime
// still exiting may have applied to any container: its apply ends as its last thread does.
std::string apply_going_on(const Bundle& bundle, const std::vector<RuntimeApply>& applies) {
  const auto named = [&](const std::string& id) {
    return std::find_if(applies.begin(), applies.end(), [&](const RuntimeApply& a) { return a.target.container_id == id; });
  };
  auto it = named(bundle.container_id);
  if (it == applies.end()) it = named("");
  if (it == applies.end()) return {};
  const RuntimeApply& a = *it;
  const std::string doing = a.target.verb == "create"   ? "is creating it"
                            : a.target.verb == "update" ? "is updating it"
                                                        : "is still exiting";
  return "its runtime (" + a.comm + ", pid " + std::to_string(a.pid) + ") " + doing;
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

void wait_for_creates_end(const std::vector<const Bundle*>& bundles, Duration limit, const std::string& proc_root,
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
  for (;;) {
    const bool at_limit = std::chrono::steady_clock::now() >= deadline;
    // One look at each create still pending (erase_if asks its predicate once per element):
    // those that ended, or all at the limit, are handed on and leave the list.
    std::erase_if(pending, [&](const Pending& p) {
      std::string going_on = create_going_on(*bundles[p.index], p.bundle_new, proc_root);
      if (!going_on.empty() && !at_limit) return false;
      ended(p.index, std::move(going_on));
      return true;
    });
    if (pending.empty()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::string ContainerApplies::going_on() const {
  return apply_going_on(bundle, runtime_applies_at_work(processes.proc_root, processes.cgroup_controller,
                                                        processes.in_a_container));
}

std::string ContainerApplies::wait_for_end() const {
  for (;;) {
    std::string still = going_on();
    if (still.empty() || std::chrono::steady_clock::now() >= deadline) return still;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace gdw
