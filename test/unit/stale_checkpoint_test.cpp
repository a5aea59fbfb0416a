#include "node/stale_checkpoint.h"

#include <gtest/gtest.h>

#include "nvidia/inventory.h"
#include "support/temp_dir.h"

namespace gdw {
namespace {

const std::vector<std::string> kGlobs = {"nvidia.com/gpu", "nvidia.com/mig-*"};
constexpr const char* kHostGpu0 = "GPU-11111111-2222-4333-8444-555555555555";
constexpr const char* kHostGpu1 = "GPU-66666666-7777-4888-9999-aaaaaaaaaaaa";
constexpr const char* kOtherGpu = "GPU-bbbbbbbb-cccc-4ddd-aeee-ffffffffffff";  // another host's
constexpr const char* kMig = "MIG-9d2b5c1e-3f4a-5b6c-8d7e-0f1a2b3c4d5e";
constexpr const char* kBoot = "3f1c2a9e-6d0b-4c57-9a1e-2b7d8c4f5e60";
constexpr const char* kOldBoot = "a0b1c2d3-e4f5-4a6b-8c7d-9e0f1a2b3c4d";

// A /proc tree with the given GPUs (minor = position) and boot id.
class ProcTree {
 public:
  ProcTree(const std::vector<std::string>& gpu_uuids, const std::string& boot_id) {
    for (std::size_t i = 0; i < gpu_uuids.size(); ++i) {
      const std::string bus = "0000:0" + std::to_string(i) + ":00.0";
      dir_.write("proc/driver/nvidia/gpus/" + bus + "/information",
                 "Model:           NVIDIA H20\nGPU UUID:        " + gpu_uuids[i] + "\nBus Location:    " + bus +
                     "\nDevice Minor:    " + std::to_string(i) + "\nGPU Excluded:    No\n");
    }
    dir_.write("proc/sys/kernel/random/boot_id", boot_id + "\n");
    dir_.mkdirs("dev");
  }
  std::string proc() const { return dir_ / "proc"; }
  Inventory inventory() const { return read_inventory({dir_ / "proc", dir_ / "dev", {}}); }

 private:
  test::TempDir dir_{"gdw-stale"};
};

Checkpoint checkpoint(const std::vector<std::string>& registered, const std::vector<std::string>& allocated,
                      const std::optional<std::string>& boot_id, const std::string& resource = "nvidia.com/gpu") {
  std::vector<CheckpointWriteEntry> entries;
  if (!allocated.empty()) entries.push_back({"uid-1", "worker", resource, {{-1, allocated}}, {}});
  auto parsed = parse_checkpoint(write_checkpoint(entries, {{resource, registered}}, boot_id));
  EXPECT_TRUE(parsed.ok()) << (parsed.ok() ? "" : parsed.error().message);
  return parsed.ok() ? *parsed : Checkpoint{};
}

StaleCheckpointReport detect(const Checkpoint& cp, const ProcTree& host) {
  auto boot = read_boot_id(host.proc());
  EXPECT_TRUE(boot.ok()) << (boot.ok() ? "" : boot.error().message);
  return detect_stale_checkpoint(cp, host.inventory(), boot.ok() ? std::optional(*boot) : std::nullopt, kGlobs);
}

TEST(StaleCheckpoint, CurrentCheckpointOfThisHostIsNotStale) {
  ProcTree host({kHostGpu0, kHostGpu1}, kBoot);
  StaleCheckpointReport report = detect(checkpoint({kHostGpu0, kHostGpu1}, {kHostGpu1}, kBoot), host);

  EXPECT_FALSE(report.stale);
  EXPECT_TRUE(report.reasons.empty());
  EXPECT_TRUE(report.unknown_ids.empty());
  EXPECT_TRUE(report.unverifiable_ids.empty());
  EXPECT_FALSE(report.boot_id_mismatch);
  EXPECT_EQ(report.checkpoint_boot_id, kBoot);
  EXPECT_EQ(report.running_boot_id, kBoot);
}

TEST(StaleCheckpoint, CheckpointFromAnEarlierBootIsStale) {
  ProcTree host({kHostGpu0}, kBoot);
  StaleCheckpointReport report = detect(checkpoint({kHostGpu0}, {}, kOldBoot), host);

  EXPECT_TRUE(report.stale);
  EXPECT_TRUE(report.boot_id_mismatch);
  ASSERT_EQ(report.reasons.size(), 1u);
  EXPECT_EQ(report.reasons[0], std::string("checkpoint written in boot ") + kOldBoot + ", host running boot " + kBoot);
  EXPECT_TRUE(report.unknown_ids.empty());
}

TEST(StaleCheckpoint, CheckpointWithoutBootIdIsJudgedByItsDevices) {
  ProcTree host({kHostGpu0}, kBoot);

  StaleCheckpointReport same_devices = detect(checkpoint({kHostGpu0}, {kHostGpu0}, std::nullopt), host);
  EXPECT_FALSE(same_devices.stale);
  EXPECT_FALSE(same_devices.boot_id_mismatch);
  EXPECT_FALSE(same_devices.checkpoint_boot_id.has_value());

  StaleCheckpointReport other_devices = detect(checkpoint({kOtherGpu}, {}, std::nullopt), host);
  EXPECT_TRUE(other_devices.stale);
  EXPECT_FALSE(other_devices.boot_id_mismatch);
}

TEST(StaleCheckpoint, DevicesOfAnotherHostMakeItStale) {
  ProcTree host({kHostGpu0, kHostGpu1}, kBoot);
  // Registered: one GPU of this host, one of another; a pod holds a replica of the other one.
  StaleCheckpointReport report =
      detect(checkpoint({kHostGpu0, kOtherGpu}, {std::string(kOtherGpu) + "::2"}, kBoot), host);

  EXPECT_TRUE(report.stale);
  EXPECT_FALSE(report.boot_id_mismatch);
  EXPECT_EQ(report.unknown_ids, std::vector<std::string>{kOtherGpu});
  EXPECT_EQ(report.reasons,
            (std::vector<std::string>{
                std::string("RegisteredDevices names devices this host does not have: ") + kOtherGpu,
                std::string("pod entries hold devices this host does not have: ") + kOtherGpu}));
}

TEST(StaleCheckpoint, BothBootAndDevicesAreReported) {
  ProcTree host({kHostGpu0}, kBoot);
  StaleCheckpointReport report = detect(checkpoint({kOtherGpu}, {}, kOldBoot), host);

  EXPECT_TRUE(report.stale);
  EXPECT_TRUE(report.boot_id_mismatch);
  EXPECT_EQ(report.reasons.size(), 2u);
}

TEST(StaleCheckpoint, UnknownBootIdLeavesOnlyTheDeviceComparison) {
  ProcTree host({kHostGpu0}, kBoot);
  StaleCheckpointReport report =
      detect_stale_checkpoint(checkpoint({kHostGpu0}, {}, kOldBoot), host.inventory(), std::nullopt, kGlobs);

  EXPECT_FALSE(report.stale);
  EXPECT_FALSE(report.boot_id_mismatch);
}

TEST(StaleCheckpoint, HostWithoutVisibleGpusCannotVerifyGpuIds) {
  ProcTree host({}, kBoot);  // no driver loaded: /proc/driver/nvidia absent
  StaleCheckpointReport report = detect(checkpoint({kHostGpu0}, {kHostGpu0}, kBoot), host);

  EXPECT_FALSE(report.stale);
  EXPECT_TRUE(report.unknown_ids.empty());
  EXPECT_EQ(report.unverifiable_ids, std::vector<std::string>{kHostGpu0});
}

TEST(StaleCheckpoint, MigIdsAreUnverifiableWithoutAnNvmlMapping) {
  ProcTree host({kHostGpu0}, kBoot);
  Checkpoint cp = checkpoint({kMig}, {kMig}, kBoot, "nvidia.com/mig-1g.12gb");

  StaleCheckpointReport unmapped = detect(cp, host);
  EXPECT_FALSE(unmapped.stale);
  EXPECT_EQ(unmapped.unverifiable_ids, std::vector<std::string>{kMig});

  // An operator-configured map may just not list it: still unverifiable.
  Inventory configured = host.inventory();
  configured.migs = {{"MIG-00000000-0000-4000-8000-000000000000", 0, 1, 0}};
  configured.mig_source = "config";
  EXPECT_FALSE(detect_stale_checkpoint(cp, configured, std::string(kBoot), kGlobs).stale);
}

TEST(StaleCheckpoint, MigIdsNvmlDoesNotKnowAreStaleAndKnownOnesAreFine) {
  ProcTree host({kHostGpu0}, kBoot);
  Checkpoint cp = checkpoint({kMig}, {}, kBoot, "nvidia.com/mig-1g.12gb");
  Inventory nvml = host.inventory();
  nvml.mig_source = "nvml";

  nvml.migs = {{"MIG-00000000-0000-4000-8000-000000000000", 0, 1, 0}};
  StaleCheckpointReport unknown = detect_stale_checkpoint(cp, nvml, std::string(kBoot), kGlobs);
  EXPECT_TRUE(unknown.stale);
  EXPECT_EQ(unknown.unknown_ids, std::vector<std::string>{kMig});

  nvml.migs.push_back({kMig, 0, 2, 0});
  StaleCheckpointReport known = detect_stale_checkpoint(cp, nvml, std::string(kBoot), kGlobs);
  EXPECT_FALSE(known.stale);
  EXPECT_TRUE(known.unverifiable_ids.empty());
}

TEST(StaleCheckpoint, UnwatchedResourcesAreIgnored) {
  ProcTree host({kHostGpu0}, kBoot);
  StaleCheckpointReport report = detect(checkpoint({"nic-7"}, {"nic-7"}, kBoot, "rdma/hca"), host);

  EXPECT_FALSE(report.stale);
  EXPECT_TRUE(report.unknown_ids.empty());
  EXPECT_TRUE(report.unverifiable_ids.empty());
}

TEST(BootId, ParsesTheKernelsFormat) {
  auto id = parse_boot_id(std::string(kBoot) + "\n");
  ASSERT_TRUE(id.ok()) << id.error().message;
  EXPECT_EQ(*id, kBoot);
  EXPECT_FALSE(parse_boot_id("\n").ok());
  EXPECT_FALSE(parse_boot_id("two words\n").ok());
}

TEST(BootId, ReadErrorsNameThePath) {
  test::TempDir dir("gdw-boot");
  auto missing = read_boot_id(dir.path());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find(dir / "sys/kernel/random/boot_id"), std::string::npos)
      << missing.error().message;

  dir.write("sys/kernel/random/boot_id", "");
  auto empty = read_boot_id(dir.path());
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.error().message.find("empty"), std::string::npos) << empty.error().message;
}

}  // namespace
}  // namespace gdw
