// The small pieces of state the repair path keeps so a storm costs less: the planner's
// device set, the writer's description formatted only for a line, and the metrics' memo of
// the container counted last. Each must behave exactly as what it replaced.
#include <gtest/gtest.h>

#include <string>

#include "core/device_set.h"
#include "core/revocation.h"
#include "metrics/metrics.h"
#include "metrics/node_metrics.h"
#include "metrics/repair_metrics.h"

namespace gdw {
namespace {

constexpr DeviceNumber kGpu0{DeviceType::kChar, 195, 0};
constexpr DeviceNumber kGpu1{DeviceType::kChar, 195, 1};
constexpr DeviceNumber kCtl{DeviceType::kChar, 195, 255};
constexpr DeviceNumber kBlock0{DeviceType::kBlock, 195, 0};

TEST(DeviceSet, HoldsEachNumberOnceInOrder) {
  DeviceSet s;
  EXPECT_TRUE(s.empty());
  EXPECT_TRUE(s.insert(kCtl));
  EXPECT_TRUE(s.insert(kGpu1));
  EXPECT_TRUE(s.insert(kGpu0));
  EXPECT_FALSE(s.insert(kGpu1)) << "already there";
  EXPECT_TRUE(s.insert(kBlock0)) << "a block device with the same numbers is another device";
  ASSERT_EQ(s.size(), 4u);
  std::vector<DeviceNumber> order(s.begin(), s.end());
  EXPECT_TRUE(std::is_sorted(order.begin(), order.end()));
  EXPECT_EQ(s.count(kGpu0), 1u);
  EXPECT_EQ(s.count(DeviceNumber{DeviceType::kChar, 195, 2}), 0u);
}

TEST(DeviceSet, EraseAndClearForgetNumbers) {
  DeviceSet s;
  s.insert(kGpu0);
  s.insert(kGpu1);
  EXPECT_EQ(s.erase(kGpu0), 1u);
  EXPECT_EQ(s.erase(kGpu0), 0u) << "erasing what is not there changes nothing";
  EXPECT_EQ(s.count(kGpu0), 0u);
  EXPECT_EQ(s.count(kGpu1), 1u);
  s.clear();
  EXPECT_TRUE(s.empty());
  DeviceSet other;
  EXPECT_EQ(s, other);
  s.insert(kCtl);
  other.insert(kCtl);
  EXPECT_EQ(s, other);
}

Revocation runc_write() {
  Revocation r;
  r.writer = "runc";
  r.pid = 4242;
  r.comm = "runc:[2:INIT]";
  r.exe = "/usr/bin/runc";
  r.parent_comm = "containerd-shim";
  r.rule_text = "a";
  return r;
}

TEST(RevocationDescription, NamesTheWriterAndTheRuleItWrote) {
  EXPECT_EQ(describe(runc_write()),
            "runc (pid 4242, comm runc:[2:INIT], /usr/bin/runc, parent containerd-shim) writing 'a' to devices.deny");
}

TEST(RevocationDescription, NamesTheActionOfAProgramChangeAndLeavesOutAnUnknownExecutable) {
  Revocation r = runc_write();
  r.writer = "systemd";
  r.pid = 1;
  r.comm = "systemd";
  r.exe.clear();  // the process was gone when its record was read
  r.parent_comm = "swapper/0";
  r.action = "loading a device program";
  EXPECT_EQ(describe(r), "systemd (pid 1, comm systemd, parent swapper/0) loading a device program");
}

const ContainerLabels kTrainer{"ml", "trainer-0", "cuda"};
const ContainerLabels kOther{"ml", "trainer-1", "cuda"};

std::string drift_line(const std::string& text, const std::string& pod, const std::string& device) {
  for (std::size_t at = 0; (at = text.find("gpu_devwatch_drift_total{", at)) != std::string::npos; ++at) {
    const auto end = text.find('\n', at);
    const std::string line = text.substr(at, end - at);
    if (line.find("pod=\"" + pod + "\"") != std::string::npos &&
        line.find("device=\"" + device + "\"") != std::string::npos)
      return line;
  }
  return "";
}

TEST(ContainerCounters, CountEachContainerApartWhenTheyAlternate) {
  Metrics m;
  for (int i = 0; i < 3; ++i) {
    RepairMetrics(m).drift(kTrainer, "nvidia0");
    RepairMetrics(m).drift(kTrainer, "nvidiactl");
    RepairMetrics(m).drift(kOther, "nvidia0");
  }
  RepairMetrics(m).drift(kTrainer, "nvidia0");
  const std::string text = m.render();
  EXPECT_NE(drift_line(text, "trainer-0", "nvidia0").find("} 4"), std::string::npos) << text;
  EXPECT_NE(drift_line(text, "trainer-0", "nvidiactl").find("} 3"), std::string::npos) << text;
  EXPECT_NE(drift_line(text, "trainer-1", "nvidia0").find("} 3"), std::string::npos) << text;
}

TEST(ContainerCounters, AForgottenContainerCountedAgainStartsFromZero) {
  Metrics m;
  RepairMetrics(m).drift(kTrainer, "nvidia0");
  RepairMetrics(m).drift(kTrainer, "nvidia0");
  NodeMetrics(m).forget(kTrainer);  // the container counted last
  EXPECT_EQ(drift_line(m.render(), "trainer-0", "nvidia0"), "");
  RepairMetrics(m).drift(kTrainer, "nvidia0");
  const std::string line = drift_line(m.render(), "trainer-0", "nvidia0");
  EXPECT_NE(line.find("} 1"), std::string::npos) << line;
}

}  // namespace
}  // namespace gdw
