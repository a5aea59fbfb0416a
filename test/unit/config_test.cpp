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
  EXPECT_EQ(c->kubelet.device_plugins_dir, "/var/lib/kubelet/device-plugins");
  EXPECT_EQ(c->kubelet.pod_resources_socket, "/var/lib/kubelet/pod-resources/kubelet.sock");
  // Time-slicing's renamed resources (renameByDefault: true) are watched by default.
  EXPECT_EQ(c->devices.resources, (std::vector<std::string>{"nvidia.com/gpu", "nvidia.com/mig-*",
                                                            "nvidia.com/gpu.shared", "nvidia.com/mig-*.shared"}));
  EXPECT_EQ(c->devices.dra_drivers, (std::vector<std::string>{"gpu.nvidia.com", "gpu.amd.com", "gpu.intel.com"}));
  EXPECT_EQ(c->cdi.spec_dirs, (std::vector<std::string>{"/etc/cdi", "/var/run/cdi"}));
  EXPECT_EQ(c->devices.control,
            (std::vector<std::string>{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"}));
  EXPECT_EQ(c->runtime.state_dirs.size(), 2u);
  EXPECT_EQ(c->daemon.resync_interval, Duration(60000));
  EXPECT_EQ(c->daemon.event_loop_slice_us, 100u);
  EXPECT_EQ(c->daemon.grant_handover_us, 30u);
  EXPECT_EQ(c->daemon.event_loop_fifo_priority, 0u);
  EXPECT_EQ(c->probe.syscall_hook, SyscallHookPolicy::kAuto);
  EXPECT_EQ(c->probe.syscall_hook_linger, Duration(30000));
  EXPECT_TRUE(c->probe.attach_hook);
}

TEST(Config, KubeletPathsFollowRootDir) {
  auto c = parse_config("kubelet:\n  root_dir: /var/lib/k0s/kubelet/\n", "k0s.yaml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->kubelet.root_dir, "/var/lib/k0s/kubelet");
  EXPECT_EQ(c->kubelet.checkpoint, "/var/lib/k0s/kubelet/device-plugins/kubelet_internal_checkpoint");
  EXPECT_EQ(c->kubelet.device_plugins_dir, "/var/lib/k0s/kubelet/device-plugins");
  EXPECT_EQ(c->kubelet.pod_resources_socket, "/var/lib/k0s/kubelet/pod-resources/kubelet.sock");
}

TEST(Config, ExplicitKubeletPathBeatsRootDir) {
  auto c = parse_config("kubelet:\n  root_dir: /k\n  checkpoint: /elsewhere/ckpt\n", "mixed.yaml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->kubelet.checkpoint, "/elsewhere/ckpt");
  EXPECT_EQ(c->kubelet.device_plugins_dir, "/k/device-plugins");
  EXPECT_EQ(c->kubelet.pod_resources_socket, "/k/pod-resources/kubelet.sock");
}

TEST(Config, KubeletRootDirMustBeAbsolute) {
  auto c = parse_config("kubelet:\n  root_dir: var/lib/kubelet\n", "bad.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("bad.yaml:2: kubelet.root_dir: must be an absolute path"), std::string::npos)
      << c.error().message;
}

TEST(Config, KubernetesEventsKeys) {
  auto d = parse_config("", "empty.yaml");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->kubernetes.api_server, "") << "in-cluster: KUBERNETES_SERVICE_HOST/_PORT";
  EXPECT_EQ(d->kubernetes.token_file, "/var/run/secrets/kubernetes.io/serviceaccount/token");
  EXPECT_EQ(d->kubernetes.ca_file, "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt");
  EXPECT_EQ(d->events.enabled, EventsPolicy::kAuto);
  EXPECT_EQ(d->events.pod_writes_per_minute, 4u);
  auto c = parse_config("kubernetes:\n  api_server: https://10.0.0.1:6443/\n  token_file: /t\n  ca_file: /ca.crt\n"
                        "events:\n  enabled: false\n  pod_writes_per_minute: 10\n",
                        "k.yaml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->kubernetes.api_server, "https://10.0.0.1:6443");
  EXPECT_EQ(c->kubernetes.token_file, "/t");
  EXPECT_EQ(c->kubernetes.ca_file, "/ca.crt");
  EXPECT_EQ(c->events.enabled, EventsPolicy::kOff);
  EXPECT_EQ(c->events.pod_writes_per_minute, 10u);
  EXPECT_EQ(parse_config("events:\n  enabled: true\n", "k.yaml")->events.enabled, EventsPolicy::kOn);
  for (const auto& [yaml, expect] : std::vector<std::pair<std::string, std::string>>{
           {"kubernetes:\n  api_server: http://10.0.0.1:8080\n", "k.yaml:2: kubernetes.api_server: must be https://"},
           {"kubernetes:\n  api_server: https://h/api?x\n", "kubernetes.api_server: must be https://"},
           {"kubernetes:\n  token_file: token\n", "k.yaml:2: kubernetes.token_file: must be an absolute path"},
           {"events:\n  enabled: sometimes\n", "events.enabled: must be one of auto | true | false"},
           {"events:\n  pod_writes_per_minute: 0\n", "events.pod_writes_per_minute: must be between 1"},
           {"events:\n  rate: 3\n", "unknown key 'events.rate'"}}) {
    auto r = parse_config(yaml, "k.yaml");
    ASSERT_FALSE(r.ok()) << yaml;
    EXPECT_NE(r.error().message.find(expect), std::string::npos) << r.error().message;
  }
}

TEST(Config, ConditionsKeys) {
  auto d = parse_config("", "empty.yaml");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->conditions.enabled, EventsPolicy::kAuto) << "on when an API server is known, as events";
  EXPECT_EQ(d->conditions.grace, std::chrono::seconds(10));
  EXPECT_EQ(d->conditions.resync, std::chrono::minutes(5));
  EXPECT_TRUE(d->conditions.readiness_gate);
  auto c = parse_config("conditions:\n  enabled: false\n  grace: 0ms\n  resync: 2s\n  readiness_gate: false\n",
                        "c.yaml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->conditions.enabled, EventsPolicy::kOff);
  EXPECT_EQ(c->conditions.grace, std::chrono::milliseconds(0));
  EXPECT_EQ(c->conditions.resync, std::chrono::seconds(2));
  EXPECT_FALSE(c->conditions.readiness_gate);
  EXPECT_EQ(parse_config("conditions:\n  enabled: true\n", "c.yaml")->conditions.enabled, EventsPolicy::kOn);
  for (const auto& [yaml, expect] : std::vector<std::pair<std::string, std::string>>{
           {"conditions:\n  enabled: maybe\n", "c.yaml:2: conditions.enabled: must be one of auto | true | false"},
           {"conditions:\n  grace: 2h\n", "conditions.grace: must be between 0ms and 1h"},
           {"conditions:\n  resync: 500ms\n", "conditions.resync: must be between 1s and"},
           {"conditions:\n  readiness_gate: yes please\n", "conditions.readiness_gate: expected true or false"},
           {"conditions:\n  heartbeat: 1m\n", "unknown key 'conditions.heartbeat'"}}) {
    auto r = parse_config(yaml, "c.yaml");
    ASSERT_FALSE(r.ok()) << yaml;
    EXPECT_NE(r.error().message.find(expect), std::string::npos) << r.error().message;
  }
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
  event_loop_slice_us: 0
  event_loop_fifo_priority: 1
  grant_handover_us: 0
metrics:
  listen: "127.0.0.1:9100"
probe:
  enabled: false
  syscall_hook: on-drift
  syscall_hook_linger: 0s
  attach_hook: false
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
  EXPECT_EQ(c->daemon.event_loop_slice_us, 0u);
  EXPECT_EQ(c->daemon.event_loop_fifo_priority, 1u);
  EXPECT_EQ(c->daemon.grant_handover_us, 0u);
  EXPECT_EQ(c->metrics.listen, "127.0.0.1:9100");
  EXPECT_FALSE(c->probe.enabled);
  EXPECT_EQ(c->probe.syscall_hook, SyscallHookPolicy::kOnDrift);
  EXPECT_EQ(c->probe.syscall_hook_linger, Duration(0));
  EXPECT_FALSE(c->probe.attach_hook);
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
      {"cdi:\n  spec_dirs: [etc/cdi]\n", "bad.yaml:2: cdi.spec_dirs: 'etc/cdi' must be an absolute path"},
      {"devices:\n  dra_drivers: gpu.nvidia.com\n", "bad.yaml:2: devices.dra_drivers: expected a list"},
      {"daemon:\n  resync_interval: 10\n", "bad.yaml:2: daemon.resync_interval: duration '10' needs a unit"},
      {"daemon:\n  resync_interval: 10ms\n", "bad.yaml:2: daemon.resync_interval: must be between 1s and"},
      {"daemon:\n  event_loop_slice_us: 50\n", "bad.yaml:2: daemon.event_loop_slice_us: must be 0 or between 100 and 100000, got 50"},
      {"daemon:\n  grant_handover_us: 1001\n", "bad.yaml:2: daemon.grant_handover_us: must be between 0 and 1000"},
      {"daemon:\n  event_loop_slice_us: 200000\n", "bad.yaml:2: daemon.event_loop_slice_us: must be between 0 and 100000"},
      {"daemon:\n  event_loop_fifo_priority: 100\n", "bad.yaml:2: daemon.event_loop_fifo_priority: must be between 0 and 99"},
      {"metrics:\n  listen: 0.0.0.0:70000\n", "bad.yaml:2: metrics.listen: port must be 1-65535"},
      {"probe:\n  enabled: maybe\n", "bad.yaml:2: probe.enabled: expected true or false"},
      {"probe:\n  syscall_hook: sometimes\n",
       "bad.yaml:2: probe.syscall_hook: must be one of auto | always | on-drift | off, got 'sometimes'"},
      {"probe:\n  syscall_hook_linger: 2d\n", "bad.yaml:2: probe.syscall_hook_linger:"},
      {"probe:\n  attach_hook: sometimes\n", "bad.yaml:2: probe.attach_hook: expected true or false"},
      {"repair:\n  burst: 0\n", "bad.yaml:2: repair.burst: must be between 1"},
      {"repair:\n  burst: -3\n", "bad.yaml:2: repair.burst: expected an integer"},
      {"repair:\n  burst: 1000001\n", "bad.yaml:2: repair.burst: must be between 1"},
      {"repair:\n  log_burst: 0\n", "bad.yaml:2: repair.log_burst: must be between 1"},
      {"repair:\n  log_interval: 10ms\n", "bad.yaml:2: repair.log_interval: must be between 100ms and"},
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
  EXPECT_EQ(c->devices.dra_drivers, defaults->devices.dra_drivers);
  EXPECT_EQ(c->cdi.spec_dirs, defaults->cdi.spec_dirs);
  EXPECT_EQ(c->runtime.state_dirs, defaults->runtime.state_dirs);
  EXPECT_EQ(c->metrics.listen, defaults->metrics.listen);
  EXPECT_EQ(c->repair.burst, defaults->repair.burst);
  EXPECT_EQ(c->repair.max_per_minute, defaults->repair.max_per_minute);
  EXPECT_EQ(c->repair.log_burst, defaults->repair.log_burst);
  EXPECT_EQ(c->repair.log_interval, defaults->repair.log_interval);
  EXPECT_EQ(c->daemon.event_loop_slice_us, defaults->daemon.event_loop_slice_us);
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
