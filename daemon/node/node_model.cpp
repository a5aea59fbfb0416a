#include "node/node_model.h"

#include "hostfs/bounded_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "backend/systemd_scope.h"

namespace gdw {

Result<std::string> read_text_file(const std::string& path, std::size_t max_bytes) {
  // Blocking, as before: the configuration and kubelet's files are the operator's.
  return read_bounded_file(path, {.max_bytes = max_bytes, .nonblocking = false});
}

NodeModel::NodeModel(Config config) : config_(std::move(config)), bundles_(config_.runtime.state_dirs) {
  if (auto id = read_boot_id(config_.devices.proc_root)) boot_id_ = *id;
}

Status NodeModel::locate() {
  auto hierarchy = locate_hierarchy(config_.cgroup.root, config_.cgroup.version);
  if (!hierarchy) return hierarchy.error();
  auto loc = locate_kubepods(hierarchy->root, config_.cgroup.kubepods);
  if (!loc) return loc.error();
  hierarchy_ = *hierarchy;
  kubepods_ = *loc;
  return {};
}

Status NodeModel::load_checkpoint() {
  // kubelet replaces the file by rename: the same inode, size and mtime mean the same record.
  struct stat st{};
  std::optional<FileStamp> stamp;
  if (::stat(config_.kubelet.checkpoint.c_str(), &st) == 0)
    stamp = FileStamp{st.st_ino, st.st_size, st.st_mtim.tv_sec * 1'000'000'000L + st.st_mtim.tv_nsec};
  if (stamp && checkpoint_.loaded && checkpoint_.error.empty() && stamp == checkpoint_stamp_) return {};
  auto text = read_text_file(config_.kubelet.checkpoint);
  Result<Checkpoint> parsed = text ? parse_checkpoint(*text) : Result<Checkpoint>(text.error());
  if (!parsed) {
    checkpoint_.error = parsed.error().message;
    return with_context("kubelet checkpoint " + config_.kubelet.checkpoint, parsed.error());
  }
  checkpoint_.loaded = true;
  checkpoint_.error.clear();
  checkpoint_.checkpoint = std::move(*parsed);
  checkpoint_stamp_ = stamp;
  ++inputs_generation_;
  checkpoint_.used = checkpoint_.checkpoint.checksum_valid ||
                     config_.kubelet.on_invalid_checksum == InvalidChecksumPolicy::kUse;
  rebuild_allocations();
  add_device_spec_nodes();
  return {};
}

void NodeModel::set_pod_resources(std::vector<PodResourcesContainer> containers) {
  if (pod_resources_ == containers) return;
  pod_resources_ = std::move(containers);
  ++inputs_generation_;
  rebuild_allocations();
}

void NodeModel::rebuild_allocations() {
  if (allocations_generation_ == generation()) return;
  // Pod names come from the bundles' runtime keys and pod UIDs from the cgroup tree (never
  // from an annotation): the join that maps PodResources entries to UIDs. Not located yet:
  // no live pods, so PodResources entries stay unmapped.
  KubepodsTree tree;
  if (!kubepods_.hierarchy_root.empty()) tree = scan();
  LivePodIndex live = collect_live_pods(tree.containers, pod_uids_of(tree.parent_dirs),
                                        [&](const std::string& id) { return bundles_.find_or_load(id); });
  AllocationSources sources;
  if (checkpoint_.used) sources.checkpoint = &checkpoint_.checkpoint.entries;
  if (pod_resources_) sources.pod_resources = &*pod_resources_;
  sources.live = &live;
  merged_ = merge_allocations(sources, config_.kubelet.source, config_.devices.resources, config_.devices.dra_drivers);
  allocations_ = AllocationIndex(merged_.entries, policy());
  allocations_generation_ = generation();
}

StaleCheckpointReport NodeModel::stale_report() const {
  return detect_stale_checkpoint(checkpoint_.checkpoint, inventory_, boot_id_, config_.devices.resources);
}

void NodeModel::add_device_spec_nodes() {
  std::vector<std::string> names;
  for (const auto& e : checkpoint_.checkpoint.entries) {
    for (const auto& spec : e.device_specs) {
      if (spec.host_path.rfind("/dev/", 0) != 0) continue;
      std::string name = spec.host_path.substr(5);
      if (!inventory_.dev_nodes.count(name)) names.push_back(name);
    }
  }
  if (!names.empty()) add_dev_nodes(inventory_, config_.devices.dev_root, names);
}

void NodeModel::load_inventory() {
  Inventory fresh = read_inventory(InventoryOptions{config_.devices.proc_root, config_.devices.dev_root,
                                                    config_.devices.mig_map});
  // NVML is the authority for the MIG UUIDs it reports; devices.mig_map covers the rest.
  if (nvml_) merge_nvml_answer(fresh, *nvml_);
  load_cdi(fresh);
  std::swap(fresh, inventory_);
  add_device_spec_nodes();
  if (!(fresh == inventory_)) ++inputs_generation_;
}

bool NodeModel::needs_nvml() const {
  for (const auto& e : checkpoint_.checkpoint.entries) {
    if (!resource_matches(config_.devices.resources, e.resource)) continue;
    for (const auto& id : e.device_ids) {
      if (id.rfind("MIG-", 0) == 0 && !inventory_.mig_by_uuid(strip_replica_suffix(id))) return true;
    }
  }
  return false;
}

void NodeModel::set_nvml_answer(NvmlAnswer answer) {
  nvml_ = std::move(answer);
  load_inventory();
}

ContainerTarget NodeModel::resolve(const DiscoveredContainer& cgroup) {
  ContainerTarget t = resolve_container(cgroup, bundles_.find_or_load(cgroup.leaf.container_id), allocations_,
                                        inventory_, policy());
  if (t.kind == TargetKind::kGpu && t.bundle) add_scope_policy(t);
  return t;
}

void NodeModel::add_scope_policy(ContainerTarget& t) const {
  if (t.cgroup.leaf.driver != CgroupDriver::kSystemd) {
    t.exposure = compute_exposure(t.desired.wanted, t.bundle->info.device_rules, nullptr, inventory_);
    return;
  }
  // systemd driver: a daemon-reload re-applies the scope's DeviceAllow= as well.
  auto scope = read_scope_device_allow(config_.systemd.unit_dirs, scope_unit_of(t.cgroup.cgroup_dir));
  if (!scope) {
    t.exposure =
        compute_exposure(t.desired.wanted, t.bundle->info.device_rules, nullptr, inventory_, scope.error().message);
    return;
  }
  t.scope_restricts_devices = scope_restricts_devices(*scope);
  t.exposure = compute_exposure(t.desired.wanted, t.bundle->info.device_rules, &*scope, inventory_);
}

}  // namespace gdw
