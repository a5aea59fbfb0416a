// The systemd backend without a systemd: unit names, DeviceAllow= entries, and the
// deadlines of calls to peers that never answer or hang up (plain unix sockets). What a
// real systemd does with the call is in test/privileged/systemd_scope_test.cpp.
#include "backend/systemd_scope.h"
#include "service/systemd_persistence.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <systemd/sd-event.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <optional>
#include <thread>

#include "support/temp_dir.h"

namespace gdw {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

WantedDevice device(DeviceType type, std::uint32_t major, std::uint32_t minor, std::uint8_t access) {
  return WantedDevice{DeviceNumber{type, major, minor}, access, "dev", "test"};
}

TEST(ScopeUnitOf, TakesTheLeafOfSystemdDriverPaths) {
  EXPECT_EQ(scope_unit_of("/sys/fs/cgroup/devices/kubepods.slice/kubepods-burstable.slice/"
                          "kubepods-burstable-pod1_2.slice/cri-containerd-abc.scope"),
            "cri-containerd-abc.scope");
  EXPECT_EQ(scope_unit_of("/sys/fs/cgroup/kubepods.slice/crio-abc.scope/"), "crio-abc.scope");
  EXPECT_EQ(scope_unit_of("docker-abc.scope"), "docker-abc.scope");
}

TEST(ScopeUnitOf, IsEmptyForCgroupfsPathsAndNonScopes) {
  EXPECT_EQ(scope_unit_of("/sys/fs/cgroup/devices/kubepods/burstable/pod1-2/abc"), "");
  EXPECT_EQ(scope_unit_of("/sys/fs/cgroup/kubepods.slice/kubepods-pod1.slice"), "");
  EXPECT_EQ(scope_unit_of("/sys/fs/cgroup/x/.scope"), "");
  EXPECT_EQ(scope_unit_of("/sys/fs/cgroup/x.scope/container"), "");  // crun's sub-cgroup
  EXPECT_EQ(scope_unit_of(""), "");
}

TEST(DeviceAllowEntries, NamesDevicesByNumberWithTheirAccess) {
  const auto entries = device_allow_entries({device(DeviceType::kChar, 195, 0, kAccessReadWrite),
                                             device(DeviceType::kChar, 237, 1, kAccessAll),
                                             device(DeviceType::kBlock, 8, 16, kAccessRead)});
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0], std::make_pair(std::string("/dev/char/195:0"), std::string("rw")));
  EXPECT_EQ(entries[1], std::make_pair(std::string("/dev/char/237:1"), std::string("rwm")));
  EXPECT_EQ(entries[2], std::make_pair(std::string("/dev/block/8:16"), std::string("r")));
}

TEST(DeviceAllowEntries, LeavesOutDevicesWithoutAccess) {
  // systemd would read an empty access string as "rwm".
  EXPECT_TRUE(device_allow_entries({device(DeviceType::kChar, 195, 0, 0)}).empty());
}

// A unix socket that accepts connections into its backlog and never says a word.
class MuteBus {
 public:
  MuteBus() : path_(dir_ / "bus") {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path_.c_str());
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd_, 16) != 0)
      throw std::runtime_error("cannot listen on " + path_);
  }
  ~MuteBus() { ::close(fd_); }
  std::string address() const { return "unix:path=" + path_; }
  int fd() const { return fd_; }

 private:
  test::TempDir dir_{"gdw-mute-bus"};
  std::string path_;
  int fd_ = -1;
};

struct EventDeleter {
  void operator()(sd_event* e) const { sd_event_unref(e); }
};
using EventPtr = std::unique_ptr<sd_event, EventDeleter>;

EventPtr new_event() {
  sd_event* e = nullptr;
  if (sd_event_new(&e) < 0) throw std::runtime_error("sd_event_new failed");
  return EventPtr(e);
}

bool run_until(sd_event* event, const std::function<bool()>& done, std::chrono::milliseconds limit) {
  const auto end = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() > end) return false;
    sd_event_run(event, 10'000);
  }
  return true;
}

const std::vector<WantedDevice> kGpu = {device(DeviceType::kChar, 195, 0, kAccessReadWrite)};

TEST(SystemdClient, ACallToAPeerThatNeverAnswersEndsAtItsDeadline) {
  MuteBus bus;
  auto event = new_event();
  auto client = SystemdClient::connect(bus.address(), event.get(), 300ms);
  ASSERT_TRUE(client.ok()) << client.error().message;

  std::optional<Status> outcome;
  const auto start = Clock::now();
  auto started = (*client)->add_device_allow("cri-containerd-abc.scope", kGpu, [&](Status s) {
    outcome = std::move(s);
    client.value().reset();  // `done` may destroy the client
  });
  ASSERT_TRUE(started.ok()) << started.error().message;
  EXPECT_FALSE(outcome.has_value()) << "done must not run inside add_device_allow";

  ASSERT_TRUE(run_until(event.get(), [&] { return outcome.has_value(); }, 5s));
  const auto took = Clock::now() - start;
  ASSERT_FALSE(outcome->ok());
  EXPECT_NE(outcome->error().message.find("no answer within 300 ms"), std::string::npos) << outcome->error().message;
  EXPECT_NE(outcome->error().message.find("cri-containerd-abc.scope"), std::string::npos);
  EXPECT_GE(took, 290ms);
  EXPECT_LT(took, 1500ms);
}

TEST(SystemdClient, TheBlockingCallIsBoundedToo) {
  MuteBus bus;
  Config config;
  config.systemd.bus_address = bus.address();
  config.systemd.timeout = 300ms;
  const auto start = Clock::now();
  // What `check --repair` uses (service/systemd_persistence.h).
  auto status = SystemdPersistence::persist_blocking(config, "/sys/fs/cgroup/x/cri-containerd-abc.scope", kGpu);
  const auto took = Clock::now() - start;
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error().message.find("no answer within 300 ms"), std::string::npos) << status.error().message;
  EXPECT_LT(took, 1500ms);  // sd_bus_call alone would wait 90 s in the authentication phase
}

TEST(SystemdClient, APeerThatHangsUpFailsAtOnce) {
  MuteBus bus;
  std::thread hang_up([&] {
    pollfd pfd{bus.fd(), POLLIN, 0};
    if (::poll(&pfd, 1, 5000) != 1) return;
    int conn = ::accept(bus.fd(), nullptr, nullptr);
    if (conn >= 0) ::close(conn);
  });
  auto event = new_event();
  const auto start = Clock::now();
  // Depending on when the peer closes, connecting (the authentication request is written
  // at once) or the call fails: either way at once, not at the deadline.
  std::string failure;
  auto client = SystemdClient::connect(bus.address(), event.get(), 5s);
  if (!client) {
    failure = client.error().message;
  } else {
    std::optional<Status> outcome;
    auto started = (*client)->add_device_allow("x.scope", kGpu, [&](Status s) { outcome = std::move(s); });
    if (!started) {
      failure = started.error().message;
    } else if (run_until(event.get(), [&] { return outcome.has_value(); }, 10s)) {
      failure = outcome->ok() ? std::string() : outcome->error().message;
    } else {
      failure = "(no outcome)";
    }
  }
  hang_up.join();
  EXPECT_FALSE(failure.empty()) << "a peer that hung up cannot have answered";
  EXPECT_EQ(failure.find("no answer within"), std::string::npos) << failure;
  EXPECT_EQ(failure.find("(no outcome)"), std::string::npos);
  EXPECT_LT(Clock::now() - start, 2s);
}

TEST(SystemdClient, ConnectingToAMissingSocketFailsWithTheAddress) {
  test::TempDir dir("gdw-no-bus");
  auto event = new_event();
  const std::string address = "unix:path=" + dir.path() + "/absent";
  auto client = SystemdClient::connect(address, event.get(), 300ms);
  ASSERT_FALSE(client.ok());
  EXPECT_NE(client.error().message.find(address), std::string::npos) << client.error().message;
}

TEST(SystemdClient, RefusesAnEmptyDeviceListInsteadOfResettingTheUnitsList) {
  MuteBus bus;
  auto event = new_event();
  auto client = SystemdClient::connect(bus.address(), event.get(), 300ms);
  ASSERT_TRUE(client.ok());
  bool called = false;
  auto started = (*client)->add_device_allow("x.scope", {device(DeviceType::kChar, 195, 0, 0)},
                                             [&](Status) { called = true; });
  ASSERT_FALSE(started.ok());
  EXPECT_NE(started.error().message.find("no devices"), std::string::npos) << started.error().message;
  run_until(event.get(), [] { return false; }, 400ms);
  EXPECT_FALSE(called);
}

}  // namespace
}  // namespace gdw
