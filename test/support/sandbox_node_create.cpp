// SandboxNode: a container whose runtime's create has not ended (sandbox_node.h).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

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

pid_t SandboxNode::apply_as_runtime(const std::string& rel, bool make, const std::string& pid_file) {
  const std::string dir = cgroups_.path(rel);
  if (make && ::mkdir(dir.c_str(), 0755) != 0) return -1;
  if (options_.v2) {
    ForeignProgram runtime("", spec_rules());
    if (runtime.fd < 0 || runtime.attach(dir) != 0) return -1;
  } else {
    if (!write_runtime_file(dir + "/devices.deny", "a")) return -1;
    for (const auto& rule : spec_allow_rules())
      if (!write_runtime_file(dir + "/devices.allow", rule)) return -1;
  }
  // The container's first process, this runtime's child until it exits (as runc's init is).
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return -1;
  const pid_t first = ::fork();
  if (first < 0) return -1;
  if (first == 0) {
    ::close(ready[0]);
    const char in = move_to_cgroup(dir, ::getpid()) == 0 ? 1 : 0;
    (void)!::write(ready[1], &in, 1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char in = 0;
  (void)!::read(ready[0], &in, 1);
  ::close(ready[0]);
  if (!in) return -1;
  // The pid file, as a runtime writes it once the container's process is set up.
  if (!pid_file.empty() && !write_runtime_file(pid_file, std::to_string(first), O_WRONLY | O_CREAT | O_TRUNC))
    return -1;
  return first;
}

const SandboxContainer& SandboxNode::add_container_in_create(SandboxContainerSpec spec, const char* comm,
                                                             CreateShape shape, RuntimeShape runtime) {
  spec.with_bundle = true;
  SandboxContainer c = new_container(std::move(spec));
  if (c.spec.runtime != RuntimeKind::kContainerd) throw std::runtime_error("a create in progress is containerd's");
  if (shape == CreateShape::kRuntimeMakesCgroup) {
    c.cgroup_dir = cgroups_.path(c.cgroup_rel);
    cgroups_.make(c.cgroup_rel.substr(0, c.cgroup_rel.rfind('/')));  // the pod's, kubelet's
  } else {
    c.cgroup_dir = cgroups_.make(c.cgroup_rel);  // the scope, systemd's
  }
  if (shape == CreateShape::kCrunSubgroup) c.process_rel = c.cgroup_rel + "/container";
  const std::string apply_rel = c.process_rel.empty() ? c.cgroup_rel : c.process_rel;
  const bool make = shape != CreateShape::kSystemdScope;
  const std::string pid_file = state_dir() + "/" + c.id + "/init.pid";
  // Both run in the runtime's child: `first_there` is its copy's.
  pid_t first_there = -1;
  auto work = [&] {
    first_there = apply_as_runtime(apply_rel, make, runtime.pid_file_at_exit ? "" : pid_file);
    return first_there;
  };
  auto at_exit = [&] {
    if (!runtime.pid_file_at_exit || first_there <= 0) return;
    const std::string temporary = pid_file.substr(0, pid_file.rfind('/') + 1) + ".init.pid";
    if (write_runtime_file(temporary, std::to_string(first_there), O_WRONLY | O_CREAT | O_TRUNC))
      (void)::rename(temporary.c_str(), pid_file.c_str());
  };
  const auto [pid, first] = start_lingering(comm, work, runtime.touched_mb, at_exit);
  c.runtime = pid;
  c.sleeper = first;
  if (first > 0) cgroups_.adopt_sleeper(first);  // killed by PID with the cgroup
  containers_.push_back(c);  // kept before anything throws: removed with the node
  if (first <= 0) throw std::runtime_error("the runtime's create of " + apply_rel + " failed");
  return containers_.back();
}

std::pair<pid_t, pid_t> SandboxNode::start_lingering(const char* comm, const std::function<pid_t()>& work,
                                                     std::size_t touched_mb, const std::function<void()>& at_exit,
                                                     const std::vector<std::string>& then_exec) {
  int ready[2], hold[2];
  if (::pipe2(ready, O_CLOEXEC) != 0 || ::pipe2(hold, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::close(ready[0]);
    ::close(hold[1]);
    ::prctl(PR_SET_NAME, comm);
    pid_t answer = -1;
    if (touched_mb > 0) {  // never unmapped: the kernel's to tear down at the exit
      void* touched = ::mmap(nullptr, touched_mb << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (touched == MAP_FAILED) _exit(1);
      // Small pages, whatever the node's transparent huge pages say: torn down one 4 KiB
      // page at a time (huge pages would go in a few hundred frees, no slower than runc's).
      (void)::madvise(touched, touched_mb << 20, MADV_NOHUGEPAGE);
      std::memset(touched, 1, touched_mb << 20);
    }
    try {
      answer = work();
    } catch (const std::exception&) {
    }
    (void)!::write(ready[1], &answer, sizeof answer);
    if (!then_exec.empty() && answer > 0 && ::dup2(hold[0], STDIN_FILENO) == STDIN_FILENO) {
      std::vector<char*> argv;
      for (const auto& a : then_exec) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      _exit(127);
    }
    char byte = 0;
    (void)!::read(hold[0], &byte, 1);  // until finish_lingering()
    if (at_exit) at_exit();
    _exit(answer > 0 ? 0 : 1);
  }
  ::close(ready[1]);
  ::close(hold[0]);
  lingering_[pid] = hold[1];
  pid_t answer = -1;
  if (::read(ready[0], &answer, sizeof answer) != sizeof answer) answer = -1;
  ::close(ready[0]);
  return {pid, answer};
}

void SandboxNode::release_lingering(pid_t pid) {
  const auto it = lingering_.find(pid);
  if (it == lingering_.end() || it->second < 0) return;
  (void)!::write(it->second, "x", 1);  // a byte: processes forked since (sleepers) hold the pipe too
  ::close(it->second);
  it->second = -1;
}

void SandboxNode::finish_lingering(pid_t pid) {
  const auto it = lingering_.find(pid);
  if (it == lingering_.end()) return;
  release_lingering(pid);
  ::waitpid(pid, nullptr, 0);
  lingering_.erase(it);
}

pid_t SandboxNode::start_lingering_reapply(const SandboxContainer& c, const char* comm) {
  const auto [pid, ok] = start_lingering(comm, [&] {
    reapply_spec(c);  // throws on failure
    return pid_t{1};
  });
  if (ok <= 0) {
    finish_lingering(pid);
    throw std::runtime_error("the re-apply of " + c.cgroup_rel + " as " + comm + " failed");
  }
  return pid;
}

pid_t SandboxNode::start_lingering_as(const char* comm, const std::function<int()>& reapply) {
  const auto [pid, ok] = start_lingering(comm, [&] { return reapply() == 0 ? pid_t{1} : pid_t{0}; });
  if (ok <= 0) {
    finish_lingering(pid);
    throw std::runtime_error(std::string("the re-apply as ") + comm + " failed");
  }
  return pid;
}

pid_t SandboxNode::start_lingering_runtime(const SandboxContainer& c, const char* comm, const std::string& verb,
                                           const SandboxContainer* inside) {
  // A script whose name is `comm`: the kernel names its process after the script's file.
  // It reads one byte (release_lingering()'s) and exits.
  const std::string program = files_.path() + "/bin/" + comm;
  ::mkdir((files_.path() + "/bin").c_str(), 0755);
  if (!write_runtime_file(program, "#!/bin/bash\nread -r -n 1 _\n", O_WRONLY | O_CREAT | O_TRUNC) ||
      ::chmod(program.c_str(), 0755) != 0)
    throw std::runtime_error("cannot write " + program);
  const std::string bundle = state_dir() + "/" + c.id;
  const std::string where = inside ? cgroups_.path(inside->process_rel.empty() ? inside->cgroup_rel : inside->process_rel) : "";
  const auto [pid, ok] = start_lingering(
      comm,
      [&] {
        if (!where.empty() && move_to_cgroup(where, ::getpid()) != 0) return pid_t{-1};
        reapply_spec(c);  // throws on failure
        return pid_t{1};
      },
      0, {},
      verb == "create" ? std::vector<std::string>{program, "--root", "/run/containerd/runc/k8s.io", "create", "--bundle",
                                                  bundle, "--pid-file", bundle + "/init.pid", c.id}
                       : std::vector<std::string>{program, "--root", "/run/containerd/runc/k8s.io", verb,
                                                  "--resources", "-", c.id});
  if (ok <= 0) {
    finish_lingering(pid);
    throw std::runtime_error("the " + verb + " of " + c.cgroup_rel + " as " + comm + " failed");
  }
  // Returned once it is that program: its command line names the update.
  const std::string cmdline = "/proc/" + std::to_string(pid) + "/cmdline";
  for (int look = 0; look < 400; ++look) {
    std::string text;
    try {
      text = read_file(cmdline);
    } catch (const std::exception&) {  // gone: its exec failed
      break;
    }
    if (text.find('\0' + verb + '\0') != std::string::npos) return pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  finish_lingering(pid);
  throw std::runtime_error("the " + verb + " of " + c.cgroup_rel + " as " + comm + " did not start " + program);
}

void SandboxNode::finish_runtime(const SandboxContainer& c) {
  for (auto& x : containers_) {
    if (x.id != c.id || x.runtime <= 0) continue;
    finish_lingering(x.runtime);
    x.runtime = -1;
  }
}

}  // namespace gdw::test
