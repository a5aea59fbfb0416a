// SandboxNode: a container whose runtime's create has not ended (sandbox_node.h).
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>
#include <string>

#include "support/foreign_device_program.h"
#include "support/sandbox_node.h"

namespace gdw::test {
namespace {

bool write_runtime_file(const std::string& path, const std::string& text, int flags = O_WRONLY) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

}  // namespace

bool SandboxNode::apply_as_runtime(const std::string& rel, const std::string& pid_file) {
  const std::string dir = cgroups_.path(rel);
  if (::mkdir(dir.c_str(), 0755) != 0) return false;
  if (options_.v2) {
    ForeignProgram runtime("", spec_rules());
    if (runtime.fd < 0 || runtime.attach(dir) != 0) return false;
  } else {
    if (!write_runtime_file(dir + "/devices.deny", "a")) return false;
    for (const auto& rule : spec_allow_rules())
      if (!write_runtime_file(dir + "/devices.allow", rule)) return false;
  }
  // The pid file, as a runtime writes it once the container's process is set up.
  return write_runtime_file(pid_file, std::to_string(::getpid()), O_WRONLY | O_CREAT | O_TRUNC);
}

const SandboxContainer& SandboxNode::add_container_in_create(SandboxContainerSpec spec, const char* comm,
                                                             bool crun_subgroup) {
  spec.with_bundle = true;
  SandboxContainer c = new_container(std::move(spec));
  if (c.spec.runtime != RuntimeKind::kContainerd) throw std::runtime_error("a create in progress is containerd's");
  if (crun_subgroup) {
    c.cgroup_dir = cgroups_.make(c.cgroup_rel);  // the scope, systemd's
    c.process_rel = c.cgroup_rel + "/container";
  } else {
    c.cgroup_dir = cgroups_.path(c.cgroup_rel);
    cgroups_.make(c.cgroup_rel.substr(0, c.cgroup_rel.rfind('/')));  // the pod's, kubelet's
  }
  const std::string apply_rel = crun_subgroup ? c.process_rel : c.cgroup_rel;
  const std::string pid_file = state_dir() + "/" + c.id + "/init.pid";
  int ready[2], hold[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  if (::pipe2(hold, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::close(ready[0]);
    ::close(hold[1]);
    ::prctl(PR_SET_NAME, comm);
    const char ok = apply_as_runtime(apply_rel, pid_file) ? 1 : 0;
    (void)!::write(ready[1], &ok, 1);
    char byte = 0;
    (void)!::read(hold[0], &byte, 1);  // until finish_runtime() (or the test's end)
    _exit(ok ? 0 : 1);
  }
  ::close(ready[1]);
  ::close(hold[0]);
  char ok = 0;
  (void)!::read(ready[0], &ok, 1);
  ::close(ready[0]);
  c.runtime = pid;
  c.runtime_hold = hold[1];
  containers_.push_back(c);  // kept before anything throws: removed with the node
  if (!ok) throw std::runtime_error("the runtime's create of " + apply_rel + " failed");
  // The container's process, as runc's init is there when the pid file is written.
  containers_.back().sleeper = cgroups_.add_sleeper(apply_rel);
  return containers_.back();
}

void SandboxNode::finish_runtime(const SandboxContainer& c) {
  for (auto& x : containers_) {
    if (x.id != c.id || x.runtime <= 0) continue;
    // A byte rather than EOF: processes forked since (the sleepers) hold the pipe too.
    (void)!::write(x.runtime_hold, "x", 1);
    ::close(x.runtime_hold);
    ::waitpid(x.runtime, nullptr, 0);
    x.runtime = -1;
    x.runtime_hold = -1;
  }
}

}  // namespace gdw::test
