#include "core/config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace gdw {
namespace {

TEST(Config, EmptyDocumentGivesDefaults) {
  auto c = parse_config("", "empty.yaml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->mode, Mode::kEnforce);
  EXPECT_EQ(c->cgroup.root, "/sys/fs/cgroup");
  EXPECT_EQ(c->cgroup.kubepods, "");
  EXPECT_EQ(c->kubelet.checkpoint, "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint");
  EXPECT_EQ(c->devices.resources, (std::vector<std::string>{"nvidia.com/gpu", "nvidia.com/mig-*"}));
  EXPECT_EQ(c->devices.control,
            (std::vector<std::string>{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"}));
  EXPECT_EQ(c->runtime.state_dirs.size(), 2u);
  EXPECT_EQ(c->daemon.resync_interval, Duration(60000));
  EXPECT_EQ(c->probe.syscall_hook, SyscallHookPolicy::kAuto);
  EXPECT_EQ(c->probe.syscall_hook_linger, Duration(30000));
}

TEST(Config, ReadsEveryKind) {
  auto c = parse_config(R"(
mode: observe
cgroup:
  root: /tmp/cg/
  kubepods: /gdw-test/kubepods
kubelet:
  checkpoint: /tmp/ckpt
runtime:
  state_dirs: [/a, /b]
devices:
  dev_root: /tmp/dev
  proc_root: /tmp/proc
  resources: [example.com/gpu]
  control: []
  mig_map:
    MIG-abc: {gpu: 1, gi: 2, ci: 0}
daemon:
  resync_interval: 2m
metrics:
  listen: "127.0.0.1:9100"
probe:
  enabled: false
  syscall_hook: on-drift
  syscall_hook_linger: 0s
)",
                        "ok.yaml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->mode, Mode::kObserve);
  EXPECT_EQ(c->cgroup.root, "/tmp/cg");
  EXPECT_EQ(c->cgroup.kubepods, "gdw-test/kubepods");
  EXPECT_EQ(c->runtime.state_dirs, (std::vector<std::string>{"/a", "/b"}));
  EXPECT_TRUE(c->devices.control.empty());
  ASSERT_EQ(c->devices.mig_map.size(), 1u);
  EXPECT_EQ(c->devices.mig_map[0], (MigDevice{"MIG-abc", 1, 2, 0}));
  EXPECT_EQ(c->daemon.resync_interval, Duration(120000));
  EXPECT_EQ(c->metrics.listen, "127.0.0.1:9100");
  EXPECT_FALSE(c->probe.enabled);
  EXPECT_EQ(c->probe.syscall_hook, SyscallHookPolicy::kOnDrift);
  EXPECT_EQ(c->probe.syscall_hook_linger, Duration(0));
}

struct BadCase {
  const char* yaml;
  const char* expect;  // substring of the error: file, line, key and problem
};

TEST(Config, ErrorsNameTheKeyAndTheLine) {
  const BadCase cases[] = {
      {"mode: enforce\nmdoe: observe\n", "bad.yaml:2: unknown key 'mdoe'"},
      {"cgroup:\n  rooot: /x\n", "bad.yaml:2: unknown key 'cgroup.rooot'"},
      {"mode: fast\n", "bad.yaml:1: mode: must be one of enforce | observe, got 'fast'"},
      {"cgroup:\n  root: relative/path\n", "bad.yaml:2: cgroup.root: must be an absolute path"},
      {"devices:\n  resources: nvidia.com/gpu\n", "bad.yaml:2: devices.resources: expected a list"},
      {"devices:\n  resources: []\n", "bad.yaml:2: devices.resources: must list at least one"},
      {"daemon:\n  resync_interval: 10\n", "bad.yaml:2: daemon.resync_interval: duration '10' needs a unit"},
      {"daemon:\n  resync_interval: 10ms\n", "bad.yaml:2: daemon.resync_interval: must be between 1s and"},
      {"metrics:\n  listen: 0.0.0.0:70000\n", "bad.yaml:2: metrics.listen: port must be 1-65535"},
      {"probe:\n  enabled: maybe\n", "bad.yaml:2: probe.enabled: expected true or false"},
      {"probe:\n  syscall_hook: sometimes\n",
       "bad.yaml:2: probe.syscall_hook: must be one of auto | always | on-drift | off, got 'sometimes'"},
      {"probe:\n  syscall_hook_linger: 2d\n", "bad.yaml:2: probe.syscall_hook_linger:"},
      {"repair:\n  burst: 0\n", "bad.yaml:2: repair.burst: must be between 1"},
      {"repair:\n  burst: -3\n", "bad.yaml:2: repair.burst: expected an integer"},
      {"cgroup: /sys\n", "bad.yaml:1: cgroup: expected a mapping"},
      {"mode: enforce\nmode: observe\n", "bad.yaml:2: mode: duplicate key"},
      {"devices:\n  control: [/dev/nvidiactl]\n", "bad.yaml:2: devices.control: '/dev/nvidiactl' must be a node name"},
      {"devices:\n  mig_map:\n    GPU-x: {gpu: 0, gi: 1, ci: 0}\n", "devices.mig_map: 'GPU-x' (line 3): key must be a MIG UUID"},
      {"devices:\n  mig_map:\n    MIG-x: {gpu: 0, gi: 1}\n", "needs all of gpu, gi, ci"},
      {"mode: [enforce\n", "bad.yaml:2: invalid YAML"},
      {"- a\n- b\n", "bad.yaml:1: the document: expected a mapping"},
  };
  for (const auto& c : cases) {
    auto r = parse_config(c.yaml, "bad.yaml");
    ASSERT_FALSE(r.ok()) << c.yaml;
    EXPECT_NE(r.error().message.find(c.expect), std::string::npos)
        << "yaml:\n" << c.yaml << "error: " << r.error().message << "\nexpected: " << c.expect;
  }
}

TEST(Config, ShippedFileIsValidAndDocumentsEveryKey) {
  std::ifstream in(std::string(GDW_SOURCE_DIR) + "/config/gpu-devwatch.yaml");
  ASSERT_TRUE(in) << "config/gpu-devwatch.yaml missing";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  auto c = parse_config(text, "gpu-devwatch.yaml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  // Every key appears (commented out or set) in the shipped file, so operators see them all.
  for (const auto& key : config_keys()) {
    std::string leaf = key.substr(key.rfind('.') + 1) + ":";
    EXPECT_NE(text.find(leaf), std::string::npos) << "shipped config does not mention " << key;
  }
  // The shipped file states the defaults: parsing it gives the same as no file.
  auto defaults = parse_config("", "none");
  EXPECT_EQ(c->devices.resources, defaults->devices.resources);
  EXPECT_EQ(c->devices.control, defaults->devices.control);
  EXPECT_EQ(c->runtime.state_dirs, defaults->runtime.state_dirs);
  EXPECT_EQ(c->metrics.listen, defaults->metrics.listen);
}

TEST(Durations, ParseAndFormat) {
  EXPECT_EQ(*parse_duration("250ms"), Duration(250));
  EXPECT_EQ(*parse_duration("3s"), Duration(3000));
  EXPECT_EQ(*parse_duration("2h"), Duration(7'200'000));
  EXPECT_FALSE(parse_duration("s").ok());
  EXPECT_FALSE(parse_duration("1.5s").ok());
  EXPECT_EQ(format_duration(Duration(90000)), "90s");
  EXPECT_EQ(format_duration(Duration(120000)), "2m");
}

}  // namespace
}  // namespace gdw
