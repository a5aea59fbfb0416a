// The daemon's side of an NVML query: a child process, read with a deadline.
#include "nvidia/nvml.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>

#include "core/clock.h"

namespace gdw {
namespace {

using std::chrono::milliseconds;

// A real answer is a few hundred bytes per GPU; more means something is wrong.
constexpr std::size_t kMaxAnswer = 1 << 20;
// The child's stderr is a memfd of this size sealed against growing: writes past the end
// fail (EPERM) instead of blocking the child, as a full pipe would while the parent only
// watches stdout, and its contents are read once the child is done.
constexpr std::size_t kMaxErrors = 4096;
// How long kill() and finish() may hold the caller (the event loop) waiting for an exit.
constexpr milliseconds kReapGrace{100};

// Children that were SIGKILLed but did not die within kReapGrace.
//
// SIGKILL ends a process at once unless it is in uninterruptible sleep in the kernel, as
// when nvmlInit blocks in a driver ioctl (the seed incident); then it dies only when that
// call returns, maybe never. A blocking waitpid() would freeze the daemon's loop, and a
// reaper thread per stuck child would pile up threads blocked forever, so such pids are
// parked here and reaped with WNOHANG whenever a query starts. While one is still alive no
// new query starts: each would get stuck the same way, and a wedged driver must cost one
// process, not one per inventory refresh.
std::mutex abandoned_mutex;
std::vector<pid_t> abandoned_children;

// Reaps parked children that have died; returns the first one still alive, or -1.
pid_t sweep_abandoned() {
  std::lock_guard lock(abandoned_mutex);
  std::erase_if(abandoned_children, [](pid_t pid) {
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    return r == pid || (r < 0 && errno == ECHILD);
  });
  return abandoned_children.empty() ? -1 : abandoned_children.front();
}

void park_abandoned(pid_t pid) {
  std::lock_guard lock(abandoned_mutex);
  abandoned_children.push_back(pid);
}

void sleep_for(milliseconds d) {
  struct timespec ts{static_cast<time_t>(d.count() / 1000), static_cast<long>(d.count() % 1000) * 1'000'000L};
  ::nanosleep(&ts, nullptr);
}

// Only async-signal-safe calls from here on: the daemon has other threads, and one of them
// may have held a lock (malloc's included) at the moment of fork().
void close_inherited_fds() {
#ifdef SYS_close_range
  if (::syscall(SYS_close_range, 3U, ~0U, 0U) == 0) return;
#endif
  // Kernels before 5.9 have no close_range: close one by one up to the fd limit.
  struct rlimit limit {};
  rlim_t max_fd = ::getrlimit(RLIMIT_NOFILE, &limit) == 0 ? limit.rlim_cur : 1024;
  if (max_fd == RLIM_INFINITY || max_fd > (1U << 20)) max_fd = 1U << 20;
  for (rlim_t fd = 3; fd < max_fd; ++fd) ::close(static_cast<int>(fd));
}

[[noreturn]] void exec_child(int stdin_fd, int stdout_fd, int stderr_fd, pid_t parent, char* const* argv,
                             const std::string& exec_failed_message) {
  // Move the three ends above 2 first: one of them may itself be 0, 1 or 2 when the daemon
  // runs with a standard stream closed, and dup2 onto it would clobber another.
  int ends[3] = {::fcntl(stdin_fd, F_DUPFD, 3), ::fcntl(stdout_fd, F_DUPFD, 3), ::fcntl(stderr_fd, F_DUPFD, 3)};
  for (int target = 0; target < 3; ++target)
    if (ends[target] < 0 || ::dup2(ends[target], target) < 0) ::_exit(127);
  close_inherited_fds();
  // The daemon's loop blocks the signals it handles through signalfd; a mask survives exec.
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // A child stuck in nvmlInit must not outlive a daemon that crashed or was restarted.
  // (The signal comes when the forking *thread* exits: queries are started from the
  // long-lived loop thread, or waited for by the thread that started them.)
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);
  ::execv(argv[0], argv);
  ssize_t ignored = ::write(2, exec_failed_message.data(), exec_failed_message.size());
  (void)ignored;
  ::_exit(127);
}

std::string format_seconds(milliseconds d) {
  std::string s = std::to_string(d.count() / 1000);
  if (auto frac = d.count() % 1000; frac != 0) {
    std::string digits = std::to_string(1000 + frac).substr(1);
    while (digits.back() == '0') digits.pop_back();
    s += "." + digits;
  }
  return s + "s";
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

Result<NvmlQuery> NvmlQuery::start(const std::string& exe, const std::string& library) {
  if (pid_t stuck = sweep_abandoned(); stuck > 0)
    return Error{"not starting an NVML query: the previous one (pid " + std::to_string(stuck) +
                 ") is still alive after SIGKILL, probably stuck in the driver"};

  int out[2] = {-1, -1};
  int err = -1;
  int devnull = -1;
  auto fail = [&](const std::string& what) {
    int e = errno;
    for (int fd : {out[0], out[1], err, devnull})
      if (fd >= 0) ::close(fd);
    return Error{"NVML query: " + what + ": " + errno_text(e)};
  };
  // The write end stays blocking (the child writes with plain stdio); only our read end
  // is non-blocking.
  if (::pipe2(out, O_CLOEXEC) != 0) return fail("pipe");
  if (::fcntl(out[0], F_SETFL, O_NONBLOCK) != 0) return fail("fcntl");
  err = ::memfd_create("nvml-query-stderr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (err < 0) return fail("memfd_create");
  if (::ftruncate(err, kMaxErrors) != 0 || ::fcntl(err, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) != 0)
    return fail("sealing the stderr memfd");
  devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0) return fail("/dev/null");

  // Everything the child needs is allocated before fork().
  std::vector<std::string> args = {exe, "nvml-query", "--library", library};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string exec_failed = "nvml-query: cannot execute " + exe + "\n";
  pid_t parent = ::getpid();

  pid_t pid = ::fork();
  if (pid < 0) return fail("fork");
  if (pid == 0) exec_child(devnull, out[1], err, parent, argv.data(), exec_failed);

  ::close(out[1]);
  ::close(devnull);
  return NvmlQuery(pid, out[0], err);
}

NvmlQuery::NvmlQuery(NvmlQuery&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      fd_(std::exchange(other.fd_, -1)),
      err_fd_(std::exchange(other.err_fd_, -1)),
      output_(std::move(other.output_)),
      too_large_(other.too_large_),
      exited_(other.exited_),
      abandoned_(other.abandoned_),
      wait_status_(other.wait_status_) {}

NvmlQuery& NvmlQuery::operator=(NvmlQuery&& other) noexcept {
  if (this != &other) {
    kill();
    close_fds();
    pid_ = std::exchange(other.pid_, -1);
    fd_ = std::exchange(other.fd_, -1);
    err_fd_ = std::exchange(other.err_fd_, -1);
    output_ = std::move(other.output_);
    too_large_ = other.too_large_;
    exited_ = other.exited_;
    abandoned_ = other.abandoned_;
    wait_status_ = other.wait_status_;
  }
  return *this;
}

NvmlQuery::~NvmlQuery() {
  kill();
  close_fds();
}

void NvmlQuery::close_fds() {
  if (fd_ >= 0) ::close(fd_);
  if (err_fd_ >= 0) ::close(err_fd_);
  fd_ = err_fd_ = -1;
}

bool NvmlQuery::read_available() {
  if (fd_ < 0 || too_large_) return true;
  char buf[16384];
  for (;;) {
    ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return false;
      return true;  // the pipe broke: nothing more will come
    }
    if (n == 0) return true;
    if (output_.size() + static_cast<std::size_t>(n) > kMaxAnswer) {
      too_large_ = true;
      kill();
      return true;
    }
    output_.append(buf, static_cast<std::size_t>(n));
  }
}

bool NvmlQuery::reap(milliseconds grace) {
  if (pid_ <= 0 || exited_) return true;
  auto end = Clock::now() + grace;
  milliseconds pause{1};
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exited_ = true;
      wait_status_ = status;
      return true;
    }
    if (r < 0 && errno != EINTR) {
      // ECHILD: someone else reaped it (a waitpid(-1) elsewhere in the process).
      exited_ = true;
      return true;
    }
    if (Clock::now() >= end) return false;
    sleep_for(pause);
    pause = std::min(pause * 2, milliseconds{16});
  }
}

void NvmlQuery::kill() {
  if (pid_ <= 0 || exited_ || abandoned_) return;
  ::kill(pid_, SIGKILL);
  if (!reap(kReapGrace)) {
    abandoned_ = true;
    park_abandoned(pid_);
  }
}

std::string NvmlQuery::describe_exit() const {
  std::string errors;
  if (err_fd_ >= 0) {
    char buf[kMaxErrors];
    ssize_t n = ::pread(err_fd_, buf, sizeof buf, 0);
    // The memfd is zero-filled past what the child wrote.
    if (n > 0) errors = trimmed(std::string(buf, ::strnlen(buf, static_cast<std::size_t>(n))));
  }
  std::string text;
  if (abandoned_) {
    text = "did not exit after SIGKILL";
  } else if (!exited_ || wait_status_ == -1) {
    text = "exit status unknown";
  } else if (WIFEXITED(wait_status_)) {
    text = "exited with status " + std::to_string(WEXITSTATUS(wait_status_));
  } else if (WIFSIGNALED(wait_status_)) {
    text = "killed by signal " + std::to_string(WTERMSIG(wait_status_));
  }
  if (!errors.empty()) text += ": " + errors;
  return text;
}

Result<NvmlAnswer> NvmlQuery::finish() {
  // The child closes stdout before nvmlShutdown, so it normally exits right after; one
  // that lingers (shutdown stuck in the driver) has answered already and is killed.
  if (!reap(kReapGrace)) kill();
  std::string who = "NVML query (pid " + std::to_string(pid_) + ")";
  if (too_large_) return Error{who + " printed more than " + std::to_string(kMaxAnswer) + " bytes; killed"};
  if (output_.empty()) return Error{who + " gave no answer, " + describe_exit()};
  auto answer = parse_nvml_answer(output_);
  if (!answer) return Error{who + ": " + answer.error().message + " (" + describe_exit() + ")"};
  return answer;
}

Result<NvmlAnswer> run_nvml_query(const std::string& exe, const std::string& library, milliseconds deadline) {
  auto query = NvmlQuery::start(exe, library);
  if (!query) return query.error();
  auto end = Clock::now() + deadline;
  for (;;) {
    auto left = std::chrono::ceil<milliseconds>(end - Clock::now());
    if (left.count() <= 0) break;
    struct pollfd pfd{query->fd(), POLLIN, 0};
    int r = ::poll(&pfd, 1, static_cast<int>(std::min<milliseconds::rep>(left.count(), 60'000)));
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      query->kill();
      return Error{"NVML query: poll: " + errno_text(e)};
    }
    if (r > 0 && query->read_available()) return query->finish();
  }
  pid_t pid = query->pid();
  query->kill();
  return Error{"NVML did not answer within " + format_seconds(deadline) + " (killed pid " + std::to_string(pid) + ")"};
}

}  // namespace gdw
