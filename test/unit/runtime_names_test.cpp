#include <gtest/gtest.h>

#include "runtime/cgroup_names.h"
#include "runtime/oci_config.h"

namespace gdw {
namespace {

const std::string kId = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const std::string kUid = "3f1c9a2e-8d4b-4c6a-9e2f-7b1d5c3a9e10";
const std::string kUidUnderscored = "3f1c9a2e_8d4b_4c6a_9e2f_7b1d5c3a9e10";

TEST(CgroupNames, QosDirs) {
  EXPECT_EQ(parse_qos_dir("burstable"), QosClass::kBurstable);
  EXPECT_EQ(parse_qos_dir("besteffort"), QosClass::kBestEffort);
  EXPECT_EQ(parse_qos_dir("kubepods-burstable.slice"), QosClass::kBurstable);
  EXPECT_EQ(parse_qos_dir("kubepods-besteffort.slice"), QosClass::kBestEffort);
  EXPECT_FALSE(parse_qos_dir("pod" + kUid));
}

TEST(CgroupNames, PodDirsOfBothDrivers) {
  auto cgfs = parse_pod_dir("pod" + kUid);
  ASSERT_TRUE(cgfs);
  EXPECT_EQ(cgfs->pod_uid, kUid);
  EXPECT_EQ(cgfs->driver, CgroupDriver::kCgroupfs);
  for (const std::string& name : {"kubepods-burstable-pod" + kUidUnderscored + ".slice",
                                 "kubepods-besteffort-pod" + kUidUnderscored + ".slice",
                                 "kubepods-pod" + kUidUnderscored + ".slice"}) {
    auto sd = parse_pod_dir(name);
    ASSERT_TRUE(sd) << name;
    EXPECT_EQ(sd->pod_uid, kUid) << name;
    EXPECT_EQ(sd->driver, CgroupDriver::kSystemd);
  }
  EXPECT_FALSE(parse_pod_dir("podXYZ"));
  EXPECT_FALSE(parse_pod_dir("system.slice"));
  EXPECT_FALSE(parse_pod_dir("kubepods-burstable.slice"));
}

TEST(CgroupNames, ContainerLeavesOfEveryRuntime) {
  struct Case {
    std::string name;
    RuntimeKind runtime;
    CgroupDriver driver;
  };
  const Case cases[] = {
      {kId, RuntimeKind::kUnknown, CgroupDriver::kCgroupfs},  // containerd or docker, cgroupfs
      {"crio-" + kId, RuntimeKind::kCrio, CgroupDriver::kCgroupfs},
      {"cri-containerd-" + kId + ".scope", RuntimeKind::kContainerd, CgroupDriver::kSystemd},
      {"crio-" + kId + ".scope", RuntimeKind::kCrio, CgroupDriver::kSystemd},
      {"docker-" + kId + ".scope", RuntimeKind::kDocker, CgroupDriver::kSystemd},
  };
  for (const auto& c : cases) {
    auto leaf = parse_container_leaf(c.name);
    ASSERT_TRUE(leaf) << c.name;
    EXPECT_EQ(leaf->container_id, kId);
    EXPECT_EQ(leaf->runtime, c.runtime) << c.name;
    EXPECT_EQ(leaf->driver, c.driver) << c.name;
  }
  for (const std::string& bad : {"crio-conmon-" + kId, std::string("abc"), kId.substr(1), "cri-containerd-" + kId,
                                std::string("init.scope"), kId + "x"}) {
    EXPECT_FALSE(parse_container_leaf(bad)) << bad;
  }
}

TEST(CgroupNames, PodUidFromCgroupsPath) {
  EXPECT_EQ(pod_uid_from_cgroups_path("/kubepods/burstable/pod" + kUid + "/" + kId), kUid);
  EXPECT_EQ(pod_uid_from_cgroups_path("/kubepods/pod" + kUid + "/" + kId), kUid);
  EXPECT_EQ(pod_uid_from_cgroups_path("kubepods-burstable-pod" + kUidUnderscored + ".slice:cri-containerd:" + kId),
            kUid);
  EXPECT_FALSE(pod_uid_from_cgroups_path("/system.slice/foo"));
  EXPECT_FALSE(pod_uid_from_cgroups_path(""));
}

TEST(OciConfig, ContainerdAnnotationsAndDeviceRules) {
  auto info = parse_oci_config(R"({
    "ociVersion": "1.0.2",
    "annotations": {
      "io.kubernetes.cri.container-type": "container",
      "io.kubernetes.cri.container-name": "trainer",
      "io.kubernetes.cri.sandbox-name": "trainer-0",
      "io.kubernetes.cri.sandbox-namespace": "ml",
      "io.kubernetes.cri.sandbox-uid": "3f1c9a2e-8d4b-4c6a-9e2f-7b1d5c3a9e10",
      "io.kubernetes.cri.sandbox-id": "abc"
    },
    "linux": {
      "cgroupsPath": "/kubepods/burstable/pod3f1c9a2e-8d4b-4c6a-9e2f-7b1d5c3a9e10/0123",
      "resources": {"devices": [
        {"allow": false, "access": "rwm"},
        {"allow": true, "type": "c", "major": 1, "minor": 3, "access": "rwm"},
        {"allow": true, "type": "c", "major": 136, "access": "rwm"},
        {"allow": true, "type": "b", "major": -1, "minor": -1, "access": "m"}
      ]},
      "devices": [{"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0, "fileMode": 8630}]
    }
  })");
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_EQ(info->type, ContainerType::kContainer);
  EXPECT_EQ(info->container_name, "trainer");
  EXPECT_EQ(info->pod_name, "trainer-0");
  EXPECT_EQ(info->pod_namespace, "ml");
  EXPECT_EQ(info->pod_uid, kUid);
  ASSERT_EQ(info->device_rules.size(), 4u);
  EXPECT_EQ(info->device_rules[0], (OciDeviceCgroupRule{false, DeviceRule{}}));
  EXPECT_EQ(info->device_rules[1], (OciDeviceCgroupRule{true, {DeviceType::kChar, 1, 3, kAccessAll}}));
  EXPECT_EQ(info->device_rules[2], (OciDeviceCgroupRule{true, {DeviceType::kChar, 136, kAnyNumber, kAccessAll}}));
  EXPECT_EQ(info->device_rules[3],
            (OciDeviceCgroupRule{true, {DeviceType::kBlock, kAnyNumber, kAnyNumber, kAccessMknod}}));
  ASSERT_EQ(info->devices.size(), 1u);
  EXPECT_EQ(info->devices[0].major, 195u);
}

TEST(OciConfig, CrioAnnotationsAndUidFallback) {
  auto crio = parse_oci_config(R"({"annotations": {
      "io.kubernetes.cri-o.ContainerType": "sandbox",
      "io.kubernetes.cri-o.Labels": "{\"io.kubernetes.pod.name\":\"p\",\"io.kubernetes.pod.namespace\":\"ns\",\"io.kubernetes.pod.uid\":\"u-1\"}"}})",
                               RuntimeKind::kCrio);
  ASSERT_TRUE(crio.ok());
  EXPECT_EQ(crio->runtime, RuntimeKind::kCrio);
  EXPECT_EQ(crio->type, ContainerType::kSandbox);
  EXPECT_EQ(crio->pod_uid, "u-1");

  // containerd < 1.6.11: no sandbox-uid annotation; the UID comes from the cgroups path.
  auto old = parse_oci_config(R"({"annotations": {"io.kubernetes.cri.container-type": "container"},
      "linux": {"cgroupsPath": "kubepods-besteffort-pod3f1c9a2e_8d4b_4c6a_9e2f_7b1d5c3a9e10.slice:cri-containerd:x"}})");
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->pod_uid, kUid);
}

TEST(OciConfig, BadInputIsAnErrorNotACrash) {
  for (const char* text : {"", "{", "[]", "{\"linux\": 3}", "{\"linux\": {\"resources\": {\"devices\": {}}}}",
                           "{\"linux\": {\"resources\": {\"devices\": [{\"allow\": \"yes\"}]}}}",
                           "{\"linux\": {\"resources\": {\"devices\": [{\"allow\": true, \"type\": \"x\"}]}}}",
                           "{\"linux\": {\"resources\": {\"devices\": [{\"allow\": true, \"major\": 1e99}]}}}",
                           "{\"linux\": {\"devices\": [{\"major\": 99999999999}]}}"}) {
    auto r = parse_oci_config(text);
    EXPECT_FALSE(r.ok()) << text;
  }
}

}  // namespace
}  // namespace gdw
