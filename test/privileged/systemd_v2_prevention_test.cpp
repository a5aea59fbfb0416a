// Issue 23, goal 1: no harm on systemd reloads, under a real systemd 252 on cgroup v2
// (systemd-nspawn, test/support/nspawn_systemd.h), with the real daemon.
//
// The container is made as kubelet and runc's systemd driver make it: a scope
// `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/
// cri-containerd-<id>.scope` with DevicePolicy=strict and runc's default DeviceAllow=
// list. The GPU is granted as libnvidia-container does on v2: each attached program is
// swapped for a copy with "allow the GPU nodes" in front; DeviceAllow= never names it. A
// spinner inside the scope opens the GPU nodes in a loop and counts EPERM by phase:
//   reloads 1–25, a runc-update-style SetUnitProperties (DeviceAllow= emptied, then the
//   spec's list), reloads 26–50.
// The daemon must persist the GPU in DeviceAllow= at its first sight of the container
// (before any reload does harm) and again after the runc update: no reload may deny an
// open. The runc update itself cannot be prevented; the GPU must be back within
// kRuncUpdateBound. No program pile-up, and exposure says which re-applier still threatens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "support/device_program_tools.h"
#include "support/metrics_text.h"
#include "support/nspawn_systemd.h"
#include "support/open_spinner.h"
#include "support/process.h"
#include "support/sandbox_node.h"
#include "support/systemd_gpu_node.h"

namespace gdw::test {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kReloads = 50;
constexpr int kReloadsBeforeUpdate = 25;
// Spinner phases: 0 before the reloads; reload k in phase reload_phase(k); the runc update
// in its own phase between the two runs of reloads; kPhaseAfter at the end.
constexpr int kPhaseRuncUpdate = kReloadsBeforeUpdate + 1;
constexpr int kPhaseAfter = kReloads + 2;
int reload_phase(int reload) { return reload <= kReloadsBeforeUpdate ? reload : reload + 1; }

// How long the GPU may stay denied after a runc update (the daemon's repair), and how long
// persistence may take (one SetUnitProperties round trip, ~1–5 ms here).
constexpr milliseconds kRuncUpdateBound{100};
constexpr milliseconds kPersistBound{2000};
// After each reload returns, so that the programs it brings land in its own phase.
constexpr milliseconds kAfterReload{30};

// What libnvidia-container grants: the GPU, the control node and UVM's two nodes.
const std::vector<DeviceRule> kHookGrants = {{DeviceType::kChar, 195, 0, kAccessReadWrite},
                                             {DeviceType::kChar, 195, 255, kAccessReadWrite},
                                             {DeviceType::kChar, 237, 0, kAccessReadWrite},
                                             {DeviceType::kChar, 237, 1, kAccessReadWrite}};
const std::vector<std::string> kSpunNodes = {"nvidia0", "nvidiactl", "nvidia-uvm"};

double ms(std::int64_t ns) { return static_cast<double>(ns) / 1e6; }
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

class SystemdV2Prevention : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto boot = systemd_boot_prerequisites(CgroupMode::kV2);
    if (!boot.skip.empty()) GTEST_SKIP() << boot.skip;
    ASSERT_EQ(boot.failure, "");
    systemd_ = std::make_unique<NspawnSystemd>(boot.rootfs, CgroupMode::kV2);
    ASSERT_TRUE(systemd_->ok()) << systemd_->error();
    node_ = std::make_unique<SystemdGpuNode>(*systemd_);
    ASSERT_EQ(node_->error(), "");
    std::vector<std::string> properties = {"DevicePolicy=strict"};
    for (const auto& [path, access] : runc_default_device_allow())
      properties.push_back("DeviceAllow=" + path + " " + access);
    std::string why;
    c_ = node_->start_container(properties, SandboxNode::spec_rules(), &why);
    ASSERT_GT(c_.pid, 0) << why;
  }

  void TearDown() override {
    spinner_.reset();  // out of the scope before the machine goes
    if (daemon_) {
      daemon_->signal(SIGTERM);
      daemon_->wait(std::chrono::seconds(10));
    }
  }

  void daemon_reload() {
    auto r = systemd_->run_inside({"systemctl", "daemon-reload"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }

  // runc update with the systemd driver: one SetUnitProperties(runtime=true) with
  // DevicePolicy=strict, DeviceAllow=[] and DeviceAllow=[the spec's list].
  void runc_update() {
    const auto list = runc_default_device_allow();
    std::vector<std::string> argv = {"busctl", "call", "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                                     "org.freedesktop.systemd1.Manager", "SetUnitProperties", "sba(sv)", c_.unit,
                                     "true", "3", "DevicePolicy", "s", "strict", "DeviceAllow", "a(ss)", "0",
                                     "DeviceAllow", "a(ss)", std::to_string(list.size())};
    for (const auto& [path, access] : list) argv.insert(argv.end(), {path, access});
    auto r = systemd_->run_inside(argv);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }

  // The scope's DeviceAllow= as systemd holds it.
  std::string device_allow() const {
    return systemd_->run_inside({"systemctl", "show", "--property=DeviceAllow", c_.unit}).out;
  }
  bool gpu_persisted() const { return device_allow().find("/dev/char/195:0 rw") != std::string::npos; }
  // Waits up to kPersistBound for the GPU in DeviceAllow=; the time it took, or -1.
  double wait_for_persistence() const {
    const auto start = Clock::now();
    return eventually([&] { return gpu_persisted(); }, kPersistBound) ? ms_since(start) : -1;
  }
  bool gpu_allowed() const {
    return std::all_of(kSpunNodes.begin(), kSpunNodes.end(),
                       [&](const std::string& n) { return node_->open_errno(c_, n) == ENXIO; });
  }

  void run_reloads(int first, int last) {
    for (int k = first; k <= last; ++k) {
      spinner_->set_phase(reload_phase(k));
      daemon_reload();
      std::this_thread::sleep_for(kAfterReload);
    }
  }

  // Per reload: EPERM seen by the spinner and its longest denial; the total.
  std::uint64_t report_reloads(int first, int last) const {
    std::uint64_t total = 0;
    for (int k = first; k <= last; ++k) {
      const auto s = spinner_->stats(reload_phase(k));
      total += s.denied;
      if (s.denied > 0)
        std::printf("[ observed ] reload %2d: %llu EPERM of %llu opens, denied for up to %.2f ms\n", k,
                    static_cast<unsigned long long>(s.denied), static_cast<unsigned long long>(s.opens),
                    ms(s.longest_denial_ns));
    }
    std::printf("[ observed ] reloads %d-%d: %llu EPERM in all\n", first, last, static_cast<unsigned long long>(total));
    return total;
  }

  // The re-appliers here are systemd (its newest sd_devices) and the hook (its copy):
  // with at most one wrapper of the daemon's, three programs.
  void expect_no_pile_up() const {
    const auto programs = attached_device_programs(c_.cgroup);
    std::printf("[ observed ] after %d reloads and a runc update: %zu programs %s\n", kReloads, programs.size(),
                describe(programs).c_str());
    EXPECT_LE(programs.size(), 3u) << "programs piled up: " << describe(programs);
  }

  // DeviceAllow= holds the devices (a reload no longer threatens them), the spec does not
  // (a runtime re-apply still does): in `check --json` and in the daemon's gauge.
  void expect_exposed_only_to_the_runtime(const std::string& config) const {
    auto check = run_command({GDW_BINARY, "check", "--json", "--config", config});
    const auto doc = nlohmann::json::parse(check.out, nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << check.out << check.err;
    ASSERT_EQ(doc["containers"].size(), 1u) << check.out;
    const auto& container = doc["containers"][0];
    std::printf("[ observed ] check --json: exposed %s, device_allow %s\n", container["exposed"].dump().c_str(),
                container["device_allow"].dump().c_str());
    EXPECT_EQ(container["device_allow"]["checked"], true) << container.dump(2);
    ASSERT_FALSE(container["exposed"].empty()) << "the spec lacks the GPU: a runtime re-apply threatens it";
    for (const auto& d : container["exposed"]) {
      EXPECT_EQ(d["spec_denies"], true) << d.dump();
      EXPECT_EQ(d["device_allow_denies"], false) << "DeviceAllow= holds it: a reload does not threaten it; " << d.dump();
    }
    const std::map<std::string, std::string> labels = {{"namespace", "ml"}, {"pod", "cuda-0"}, {"container", "cuda"}};
    const auto gauge = metric_value(http_get(port_), "gpu_devwatch_exposed_devices", labels);
    std::printf("[ observed ] gpu_devwatch_exposed_devices = %s\n", gauge ? std::to_string(*gauge).c_str() : "absent");
    EXPECT_EQ(gauge.value_or(-1), static_cast<double>(container["exposed"].size()));
  }

  // The hook's grant, then the spinner and the daemon; returns the daemon's config.
  std::string grant_spin_and_start_daemon() {
    const auto before = attached_device_programs(c_.cgroup);
    EXPECT_NE(describe(before).find("sd_devices"), std::string::npos) << describe(before);
    EXPECT_EQ(node_->open_errno(c_, "nvidia0"), EPERM) << "DevicePolicy=strict without the GPU";
    EXPECT_EQ(nvidia_style_grant(c_.cgroup, kHookGrants), 0);
    EXPECT_TRUE(gpu_allowed()) << "the hook's grant";
    std::printf("[   state  ] after the hook's grant: %s\n", describe(attached_device_programs(c_.cgroup)).c_str());
    std::vector<std::string> nodes;
    for (const auto& n : kSpunNodes) nodes.push_back(node_->node_path(n));
    spinner_ = std::make_unique<OpenSpinner>(c_.cgroup, nodes);
    EXPECT_EQ(spinner_->error(), "");
    const std::string config = node_->config(port_);  // the default configuration otherwise
    daemon_ = std::make_unique<BackgroundProcess>(std::vector<std::string>{GDW_BINARY, "run", "--config", config});
    EXPECT_TRUE(daemon_->wait_for_output(" ready", std::chrono::seconds(20))) << daemon_->output();
    EXPECT_TRUE(eventually([&] { return metric_value(http_get(port_), "gpu_devwatch_containers_watched") == 1; },
                           std::chrono::seconds(10)))
        << http_get(port_) << daemon_->output();
    return config;
  }

  // The runc update's phase: EPERM there is expected (nothing can prevent it), for at most
  // kRuncUpdateBound; then DeviceAllow= must hold the GPU again.
  void runc_update_phase() {
    spinner_->set_phase(kPhaseRuncUpdate);
    const auto update_start = Clock::now();
    runc_update();
    const double call_ms = ms_since(update_start);  // nsenter + busctl: most of it is process start-up
    const bool back = eventually([&] { return gpu_allowed(); }, std::chrono::seconds(2));
    const double repersist_ms = wait_for_persistence();
    const auto update = spinner_->stats(kPhaseRuncUpdate);
    std::printf("[ observed ] runc update (busctl took %.1f ms): %llu EPERM, GPU denied for up to %.2f ms, %s; "
                "DeviceAllow= holds the GPU again %s\n",
                call_ms, static_cast<unsigned long long>(update.denied), ms(update.longest_denial_ns),
                back ? "allowed again" : "still denied 2 s after the call",
                repersist_ms >= 0 ? ("after " + std::to_string(repersist_ms) + " ms").c_str() : "never within 2 s");
    EXPECT_TRUE(back) << daemon_->output();
    EXPECT_LE(ms(update.longest_denial_ns), static_cast<double>(kRuncUpdateBound.count()));
    EXPECT_GE(repersist_ms, 0) << "not persisted again after the runc update:\n" << device_allow();
  }

  std::unique_ptr<NspawnSystemd> systemd_;
  std::unique_ptr<SystemdGpuNode> node_;
  ScopeContainer c_;
  std::unique_ptr<BackgroundProcess> daemon_;
  std::unique_ptr<OpenSpinner> spinner_;
  int port_ = free_port();
};

TEST_F(SystemdV2Prevention, NoReloadDeniesTheGpuNoPileUpAndExposureNamesTheRuntime) {
  const std::string config = grant_spin_and_start_daemon();
  ASSERT_FALSE(HasFailure()) << (daemon_ ? daemon_->output() : "");
  const double first_persist_ms = wait_for_persistence();
  EXPECT_GE(first_persist_ms, 0) << "the GPU is not in the scope's DeviceAllow= " << kPersistBound.count()
                                 << " ms after the daemon saw the container:\n" << device_allow();
  std::printf("[ observed ] DeviceAllow= holds the GPU %s\n",
              first_persist_ms >= 0 ? ("after " + std::to_string(first_persist_ms) + " ms").c_str()
                                    : "not within 2 s of the daemon seeing the container");

  run_reloads(1, kReloadsBeforeUpdate);
  runc_update_phase();
  run_reloads(kReloadsBeforeUpdate + 1, kReloads);
  spinner_->set_phase(kPhaseAfter);
  EXPECT_TRUE(eventually([&] { return gpu_allowed(); }, std::chrono::seconds(3))) << daemon_->output();

  EXPECT_EQ(report_reloads(1, kReloadsBeforeUpdate), 0u) << "a reload denied the GPU before the runc update";
  EXPECT_EQ(report_reloads(kReloadsBeforeUpdate + 1, kReloads), 0u) << "a reload denied the GPU after the runc update";
  std::printf("[ observed ] spinner: %llu rounds in all\n", static_cast<unsigned long long>(spinner_->rounds()));
  expect_no_pile_up();
  expect_exposed_only_to_the_runtime(config);
}

}  // namespace
}  // namespace gdw::test
