#include "support/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>

extern char** environ;

namespace gdw::test {
namespace {

std::vector<char*> make_env(const std::vector<std::string>& extra, std::vector<std::string>& storage) {
  storage.clear();
  for (char** e = environ; *e; ++e) storage.emplace_back(*e);
  for (const auto& kv : extra) {
    auto key = kv.substr(0, kv.find('=') + 1);
    std::erase_if(storage, [&](const std::string& s) { return s.rfind(key, 0) == 0; });
    storage.push_back(kv);
  }
  std::vector<char*> env;
  for (auto& s : storage) env.push_back(s.data());
  env.push_back(nullptr);
  return env;
}

pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env, const std::string& out_path,
            const std::string& err_path) {
  std::vector<std::string> env_storage;
  auto env = make_env(extra_env, env_storage);
  std::vector<char*> args;
  std::vector<std::string> argv_copy = argv;
  for (auto& a : argv_copy) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    int in = ::open("/dev/null", O_RDONLY);
    int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    int err = err_path == out_path ? out : ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    if (in < 0 || out < 0 || err < 0) _exit(126);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::setpgid(0, 0);
    // A command under test that writes without end (a read of a real device that never
    // ends) is stopped by SIGXFSZ before it fills the disk; nothing a test runs writes a
    // file this large.
    constexpr rlim_t kMaxFileBytes = rlim_t{1} << 30;
    struct rlimit fsize{kMaxFileBytes, kMaxFileBytes};
    ::setrlimit(RLIMIT_FSIZE, &fsize);
    ::execvpe(args[0], args.data(), env.data());
    _exit(127);
  }
  return pid;
}

void sleep_ms(int ms) {
  struct timespec ts{ms / 1000, (ms % 1000) * 1'000'000L};
  nanosleep(&ts, nullptr);
}

}  // namespace

CommandResult run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                          const std::vector<std::string>& extra_env) {
  TempDir dir("gdw-cmd");
  std::string out = dir / "out", err = dir / "err";
  pid_t pid = spawn(argv, extra_env, out, err);
  CommandResult result;
  auto end = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  for (;;) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (std::chrono::steady_clock::now() > end) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      result.timed_out = true;
      break;
    }
    sleep_ms(2);
  }
  if (!result.timed_out && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  result.out = read_file(out);
  result.err = read_file(err);
  return result;
}

BackgroundProcess::BackgroundProcess(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env)
    : log_path_(dir_ / "log") {
  pid_ = spawn(argv, extra_env, log_path_, log_path_);
}

BackgroundProcess::~BackgroundProcess() {
  if (running()) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status_, 0);
  }
}

bool BackgroundProcess::running() {
  if (reaped_) return false;
  pid_t r = ::waitpid(pid_, &status_, WNOHANG);
  if (r == pid_) reaped_ = true;
  return !reaped_;
}

std::string BackgroundProcess::output() const {
  try {
    return read_file(log_path_);
  } catch (...) {
    return {};
  }
}

void BackgroundProcess::signal(int sig) {
  if (!reaped_) ::kill(pid_, sig);
}

int BackgroundProcess::wait(std::chrono::milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (running()) {
    if (std::chrono::steady_clock::now() > end) return -2;
    sleep_ms(2);
  }
  return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
}

bool BackgroundProcess::wait_for_output(const std::string& needle, std::chrono::milliseconds timeout) {
  return eventually([&] { return output().find(needle) != std::string::npos; }, timeout);
}

bool is_root() { return ::geteuid() == 0; }

int connect_loopback(int port, int receive_timeout_s) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (receive_timeout_s > 0) {
    struct timeval tv{receive_timeout_s, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::string http_get(int port, const std::string& path) {
  const int fd = connect_loopback(port, 5);
  if (fd < 0) return {};
  std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (::write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return {};
  }
  std::string resp;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    resp.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  auto body = resp.find("\r\n\r\n");
  return body == std::string::npos ? std::string{} : resp.substr(body + 4);
}

namespace {

// Binds a loopback TCP socket to `port` (0: the kernel's choice); the port it got, or 0.
int bind_loopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  int got = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    socklen_t len = sizeof addr;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) got = ntohs(addr.sin_port);
  }
  ::close(fd);
  return got;
}

}  // namespace

// From below the kernel's ephemeral range (ip_local_port_range): the port is free again
// until its user binds it, and a socket bound to port 0 meanwhile (a test's API server)
// is given an ephemeral port, so it can never take this one. A port the kernel chose
// itself could be handed out again to the next bind(0) (seen: the daemon's metrics port
// and the fake API server's were the same).
int free_port() {
  int low = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low;
  constexpr int kFirst = 10000;  // above the ports services are commonly configured on
  if (low - 1 > kFirst) {
    static std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
    std::uniform_int_distribution<int> pick(kFirst, low - 1);
    for (int attempt = 0; attempt < 200; ++attempt)
      if (int port = bind_loopback(pick(rng)); port != 0) return port;
  }
  return bind_loopback(0);
}

}  // namespace gdw::test
