// Exposure: wanted devices + the OCI spec's device rules (+ the scope's DeviceAllow=) →
// the devices the next re-apply would revoke. Table tests of the pure function and the
// unit-file parser; the reader against files in a temp directory.
#include "node/exposure.h"

#include <gtest/gtest.h>

#include "support/temp_dir.h"

namespace gdw {
namespace {

const DeviceNumber kGpu0{DeviceType::kChar, 195, 0};
const DeviceNumber kGpu1{DeviceType::kChar, 195, 1};
const DeviceNumber kCtl{DeviceType::kChar, 195, 255};
const DeviceNumber kUvm{DeviceType::kChar, 237, 0};

Inventory host() {
  Inventory inv;
  inv.char_majors = {{"nvidia", 195}, {"nvidiactl", 195}, {"nvidia-uvm", 237}};
  inv.dev_nodes = {{"nvidia0", kGpu0}, {"nvidia1", kGpu1}, {"nvidiactl", kCtl}, {"nvidia-uvm", kUvm}};
  return inv;
}

std::vector<WantedDevice> wanted() {
  return {{kGpu0, kAccessReadWrite, "nvidia0", "GPU-a"},
          {kCtl, kAccessReadWrite, "nvidiactl", "control"},
          {kUvm, kAccessReadWrite, "nvidia-uvm", "control"}};
}

std::vector<OciDeviceCgroupRule> rules(std::vector<std::pair<bool, std::string>> list) {
  std::vector<OciDeviceCgroupRule> out;
  for (const auto& [allow, text] : list) out.push_back({allow, *parse_device_rule(text)});
  return out;
}

std::string names(const Exposure& e) {
  std::string s;
  for (const auto& d : e.exposed) s += (s.empty() ? "" : " ") + d.device.name + ":" + exposure_reason(d);
  return s;
}

struct SpecCase {
  const char* what;
  std::vector<std::pair<bool, std::string>> spec;
  const char* exposed;
};

TEST(Exposure, OciSpecRulesInOrderLastMatchWins) {
  const std::vector<SpecCase> cases = {
      {"runc default (deny all, pseudo devices): GPU came out of band", {{false, "a"}, {true, "c 1:3 rwm"}},
       "nvidia0:spec nvidiactl:spec nvidia-uvm:spec"},
      {"passDeviceSpecs: every node in the spec", {{false, "a"}, {true, "c 195:0 rw"}, {true, "c 195:255 rw"},
                                                    {true, "c 237:0 rw"}}, ""},
      {"a later deny wins", {{false, "a"}, {true, "c 195:* rw"}, {true, "c 237:0 rw"}, {false, "c 195:255 rwm"}},
       "nvidiactl:spec"},
      {"a later allow wins", {{false, "c 195:0 rwm"}, {true, "c 195:0 rw"}, {true, "c 195:255 rw"}, {true, "c 237:* rw"}},
       ""},
      {"read-only is not enough for rw", {{false, "a"}, {true, "c 195:0 r"}, {true, "c 195:255 rw"}, {true, "c 237:0 rw"}},
       "nvidia0:spec"},
      {"privileged: allow all", {{true, "a"}}, ""},
      {"no rules: runc denies", {}, "nvidia0:spec nvidiactl:spec nvidia-uvm:spec"},
      {"block rule does not cover a char device", {{false, "a"}, {true, "b 195:0 rw"}, {true, "c 195:255 rw"},
                                                   {true, "c 237:0 rw"}}, "nvidia0:spec"},
  };
  for (const auto& c : cases) {
    auto e = compute_exposure(wanted(), rules(c.spec), nullptr, host());
    EXPECT_EQ(names(e), c.exposed) << c.what;
    EXPECT_FALSE(e.device_allow_checked) << c.what;
  }
}

struct UnitCase {
  const char* what;
  const char* unit_text;
  const char* exposed;  // with a spec that allows everything
};

TEST(Exposure, ScopeDeviceAllowOnTheSystemdDriver) {
  const std::vector<UnitCase> cases = {
      {"no DeviceAllow under DevicePolicy=auto restricts nothing", "[Scope]\nDelegate=yes\n", ""},
      {"strict, only pseudo devices", "[Scope]\nDevicePolicy=strict\nDeviceAllow=/dev/char/1:3 rwm\n",
       "nvidia0:DeviceAllow nvidiactl:DeviceAllow nvidia-uvm:DeviceAllow"},
      {"/dev/char/M:m entries", "DevicePolicy=strict\nDeviceAllow=/dev/char/195:0 rw\nDeviceAllow=/dev/char/195:255 rw\n"
                                "DeviceAllow=/dev/char/237:0 rw\n", ""},
      {"char-<driver> globs from /proc/devices", "DevicePolicy=strict\nDeviceAllow=char-nvidia* rw\n", ""},
      {"paths through the node's device nodes", "DevicePolicy=strict\nDeviceAllow=/dev/nvidia0 rw\n"
                                                "DeviceAllow=/dev/nvidiactl\nDeviceAllow=/dev/nvidia-uvm rwm\n", ""},
      {"a path that does not exist allows nothing", "DevicePolicy=strict\nDeviceAllow=/dev/nvidia7 rw\n"
                                                    "DeviceAllow=char-nvidia-uvm rw\nDeviceAllow=/dev/char/195:255 rw\n",
       "nvidia0:DeviceAllow"},
      {"an empty DeviceAllow= resets the list", "DevicePolicy=strict\nDeviceAllow=char-* rw\nDeviceAllow=\n"
                                                "DeviceAllow=/dev/char/195:0 rw\n",
       "nvidiactl:DeviceAllow nvidia-uvm:DeviceAllow"},
      {"read access alone is not rw", "DevicePolicy=closed\nDeviceAllow=char-* r\n",
       "nvidia0:DeviceAllow nvidiactl:DeviceAllow nvidia-uvm:DeviceAllow"},
      {"a bad access is ignored, as systemd does", "DevicePolicy=strict\nDeviceAllow=char-* rwx\n",
       "nvidia0:DeviceAllow nvidiactl:DeviceAllow nvidia-uvm:DeviceAllow"},
  };
  for (const auto& c : cases) {
    ScopeDeviceAllow scope;
    apply_unit_text(c.unit_text, scope);
    auto e = compute_exposure(wanted(), rules({{true, "a"}}), &scope, host());
    EXPECT_EQ(names(e), c.exposed) << c.what;
    EXPECT_TRUE(e.device_allow_checked);
  }
}

TEST(Exposure, SpecAndDeviceAllowTogether) {
  ScopeDeviceAllow scope;
  apply_unit_text("DevicePolicy=strict\nDeviceAllow=/dev/char/195:0 rw\nDeviceAllow=/dev/char/237:0 rw\n", scope);
  auto e = compute_exposure(wanted(), rules({{false, "a"}, {true, "c 195:0 rw"}}), &scope, host());
  EXPECT_EQ(names(e), "nvidiactl:spec+DeviceAllow nvidia-uvm:spec");
  auto unknown = compute_exposure(wanted(), rules({{false, "a"}, {true, "c 195:* rw"}, {true, "c 237:* rw"}}), nullptr,
                                  host(), "no unit file");
  EXPECT_EQ(names(unknown), "");
  EXPECT_EQ(unknown.device_allow_problem, "no unit file");
}

TEST(Exposure, NothingWantedNothingExposed) {
  EXPECT_TRUE(compute_exposure({}, {}, nullptr, host()).exposed.empty());
}

TEST(ScopeUnitFiles, TransientUnitThenDropInsByNameHigherDirectoryMasks) {
  test::TempDir dir("gdw-units");
  const std::string unit = "cri-containerd-abc.scope";
  dir.write("transient/" + unit, "[Scope]\nDevicePolicy=strict\nDeviceAllow=/dev/char/1:3 rwm\n");
  // SetUnitProperties(runtime=true) writes the whole list after a reset.
  dir.write("transient/" + unit + ".d/50-DeviceAllow.conf",
            "[Scope]\nDeviceAllow=\nDeviceAllow=/dev/char/1:3 rwm\nDeviceAllow=/dev/char/195:0 rw\n");
  dir.write("transient/" + unit + ".d/60-Other.conf", "[Scope]\nDeviceAllow=/dev/char/195:1 rw\n");
  // Masks transient's 60-Other.conf: 195:1 is not allowed in the end.
  dir.write("control/" + unit + ".d/60-Other.conf", "[Scope]\nCPUWeight=10\n");
  auto scope = read_scope_device_allow({dir.path() + "/control", dir.path() + "/transient"}, unit);
  ASSERT_TRUE(scope) << scope.error().message;
  EXPECT_EQ(scope->device_policy, "strict");
  EXPECT_EQ(scope->files.size(), 3u);
  EXPECT_TRUE(device_allow_allows(*scope, host(), kGpu0, kAccessReadWrite));
  EXPECT_FALSE(device_allow_allows(*scope, host(), kGpu1, kAccessReadWrite));
  EXPECT_FALSE(device_allow_allows(*scope, host(), kCtl, kAccessReadWrite));

  auto missing = read_scope_device_allow({dir.path() + "/control"}, "cri-containerd-zzz.scope");
  EXPECT_FALSE(missing);
  EXPECT_FALSE(read_scope_device_allow({dir.path()}, "../transient/" + unit)) << "a unit name is not a path";
}

}  // namespace
}  // namespace gdw
