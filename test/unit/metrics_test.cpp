// The metric families are a table (daemon/metrics/metric_catalogue.cpp): what /metrics shows must be
// exactly what the table declares — names, help, types and each series' label names.
#include "metrics/metrics.h"

#include "metrics/daemon_metrics.h"
#include "metrics/event_metrics.h"
#include "metrics/health_metrics.h"
#include "metrics/node_metrics.h"
#include "metrics/probe_metrics.h"
#include "metrics/repair_metrics.h"
#include "metrics/status_metrics.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>

namespace gdw {
namespace {

const ContainerLabels kContainer{"ml", "trainer-0", "cuda"};

// Calls every view method that makes or changes a series. A new metric's method belongs here.
void exercise_every_method(Metrics& m) {
  RepairMetrics(m).drift(kContainer, "/dev/nvidia0");
  RepairMetrics(m).regrant(true, "cgroupfs");
  RepairMetrics(m).regrant(false, "bpf");
  RepairMetrics(m).repair_duration(0.0001);
  RepairMetrics(m).throttled(kContainer);
  NodeMetrics(m).set_containers_watched(3);
  NodeMetrics(m).set_containers_missing_devices(1);
  NodeMetrics(m).set_containers_unidentified(1);
  NodeMetrics(m).set_containers_throttled(1);
  NodeMetrics(m).set_device_programs("ours", 2);
  RepairMetrics(m).programs_replaced(1);
  RepairMetrics(m).stale_swaps(1);
  RepairMetrics(m).set_swap_revisions(true);
  NodeMetrics(m).set_container_exposure(kContainer, NodeMetrics::ExposedDevices{2, 1}, true);
  NodeMetrics(m).set_checkpoint_checksum_valid(true);
  NodeMetrics(m).set_checkpoint_loaded(true);
  DaemonMetrics(m).event_loop_error("inotify");
  DaemonMetrics(m).resync("startup", 0.01);
  DaemonMetrics(m).inotify_overflow();
  DaemonMetrics(m).config_reload(true);
  HealthMetrics(m).pod_resources_call("ok", 0.002);
  HealthMetrics(m).set_allocation_disagreements(1);
  NodeMetrics(m).set_ambiguous_pod_identities(1);
  NodeMetrics(m).set_identity_conflicts(1);
  NodeMetrics(m).set_cdi_spec_errors(1);
  NodeMetrics(m).set_cdi_unresolved_devices(1);
  HealthMetrics(m).set_checkpoint_stale(true, 2);
  HealthMetrics(m).checkpoint_remediation(true);
  HealthMetrics(m).set_checkpoint_remediation_held("devices-in-use");
  HealthMetrics(m).set_device_plugin("/var/lib/kubelet/device-plugins/nvidia.sock", true, 0.01);
  NodeMetrics(m).set_checkpoint_last_write(100);
  NodeMetrics(m).set_newest_container_start(150);
  ProbeMetrics(m).set_probe_loaded(true);
  ProbeMetrics(m).set_syscall_hook_attached(true);
  ProbeMetrics(m).set_attach_hook_attached(AttachHookKind::kFexit);
  ProbeMetrics(m).set_write_path_hook_attached(true);
  ProbeMetrics(m).set_rule_writers_degraded(true);
  ProbeMetrics(m).revocation("runc");
  ProbeMetrics(m).denied_open(kContainer, "/dev/nvidia0", 2);
  ProbeMetrics(m).set_ring_buffer_drops(5);
  EventMetrics(m).event_sent();
  EventMetrics(m).event_dropped("rejected");
  StatusMetrics(m).set_node_condition("GPUDeviceAccessDegraded", true);
  StatusMetrics(m).status_write("node", "sent");
  StatusMetrics(m).set_readiness_gate_pods(2);
  StatusMetrics(m).set_pod_watch_up(true);
  StatusMetrics(m).pod_watch_lists(1);
  StatusMetrics(m).pod_watch_skipped(1);
}

const char* type_word(MetricType t) {
  switch (t) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "?";
}

struct Exposition {
  std::map<std::string, std::string> help, type;                // by family name
  std::map<std::string, std::set<std::set<std::string>>> label_names;  // by series name
  std::map<std::string, int> series;                                    // lines, by series name
};

// Reads the text format as prometheus-cpp writes it (label values here have no '"' or ',').
Exposition read_exposition(const std::string& text) {
  Exposition e;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) {
      const auto rest = line.substr(7);
      const auto sp = rest.find(' ');
      (line[2] == 'H' ? e.help : e.type)[rest.substr(0, sp)] = rest.substr(sp + 1);
      continue;
    }
    const auto brace = line.find('{');
    const auto name = line.substr(0, std::min(brace, line.find(' ')));
    std::set<std::string> labels;
    if (brace != std::string::npos) {
      for (auto i = brace + 1; i < line.size() && line[i] != '}';) {
        const auto eq = line.find('=', i);
        labels.insert(line.substr(i, eq - i));
        i = line.find('"', line.find('"', eq) + 1) + 1;
        if (line[i] == ',') ++i;
      }
    }
    e.label_names[name].insert(labels);
    ++e.series[name];
  }
  return e;
}

TEST(MetricFamilies, TheTableIsWellFormed) {
  std::set<std::string_view> names;
  for (const auto& f : metric_families()) {
    EXPECT_TRUE(names.insert(f.name).second) << f.name << " twice";
    EXPECT_TRUE(f.name.starts_with("gpu_devwatch_")) << f.name;
    EXPECT_EQ(f.type == MetricType::kCounter, f.name.ends_with("_total")) << f.name;
    EXPECT_EQ(f.type == MetricType::kHistogram, f.buckets != nullptr) << f.name;
    EXPECT_FALSE(f.help.empty()) << f.name;
    if (!f.values.empty()) {
      EXPECT_EQ(f.series, MetricFamilySpec::Series::kAtStart) << f.name;
      EXPECT_EQ(f.labels.size(), 1u) << f.name << ": preset values name one label";
    }
  }
  EXPECT_NO_THROW(Metrics{}) << "every Id has exactly one row";
}

TEST(MetricFamilies, EveryFamilyIsExportedAsDeclared) {
  Metrics m;
  exercise_every_method(m);
  const auto e = read_exposition(m.render());
  std::set<std::string> declared;
  for (const auto& f : metric_families()) {
    const std::string name(f.name);
    declared.insert(name);
    ASSERT_TRUE(e.help.count(name)) << name << " not exported: exercise its method in exercise_every_method";
    EXPECT_EQ(e.help.at(name), f.help) << name;
    EXPECT_EQ(e.type.at(name), type_word(f.type)) << name;
    std::set<std::string> labels(f.labels.begin(), f.labels.end());
    const bool histogram = f.type == MetricType::kHistogram;
    for (const char* suffix : histogram ? std::vector<const char*>{"_count", "_sum"} : std::vector<const char*>{""}) {
      ASSERT_TRUE(e.label_names.count(name + suffix)) << name << suffix;
      for (const auto& series : e.label_names.at(name + suffix)) EXPECT_EQ(series, labels) << name << suffix;
    }
    if (histogram) {
      labels.insert("le");
      for (const auto& series : e.label_names.at(name + "_bucket")) EXPECT_EQ(series, labels) << name;
    }
  }
  for (const auto& [name, help] : e.help) EXPECT_TRUE(declared.count(name)) << name << " exported but not in the table";
}

TEST(MetricFamilies, SeriesMadeAtStartExistBeforeAnyMethodIsCalled) {
  const auto e = read_exposition(Metrics{}.render());
  for (const auto& f : metric_families()) {
    const std::string name(f.name);
    const bool at_start = f.series == MetricFamilySpec::Series::kAtStart || name == "gpu_devwatch_build_info";
    EXPECT_EQ(e.help.count(name) > 0, at_start) << name;
  }
  EXPECT_EQ(e.series.at("gpu_devwatch_events_dropped_total"), 5) << "one series per reason";
  EXPECT_EQ(e.series.at("gpu_devwatch_checkpoint_remediation_held"), 3);
}

TEST(MetricFamilies, AContainerThatIsGoneLeavesNoSeries) {
  Metrics m;
  exercise_every_method(m);
  ASSERT_NE(m.render().find("pod=\"trainer-0\""), std::string::npos);
  NodeMetrics(m).forget(kContainer);
  const auto text = m.render();
  EXPECT_EQ(text.find("pod=\"trainer-0\""), std::string::npos) << text;
  EXPECT_NE(text.find("gpu_devwatch_env_visible_containers 0"), std::string::npos);
  EXPECT_NE(text.find("gpu_devwatch_containers_exposed 0"), std::string::npos);
}

}  // namespace
}  // namespace gdw
