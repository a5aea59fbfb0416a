#include "service/node_inputs.h"

#include <sys/inotify.h>
#include <sys/stat.h>

#include "cdi/cdi_spec.h"
#include "log/log.h"
#include "node/node_loader.h"

namespace gdw {
namespace {

std::string base_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }
std::string dir_name(const std::string& path) { return path.substr(0, path.rfind('/')); }

}  // namespace

NodeInputs::NodeInputs(const Config& config, Metrics& metrics)
    : config_(config), metrics_(metrics), daemon_metrics_(metrics), node_(std::make_unique<NodeModel>(config)) {}

Status NodeInputs::start() {
  auto in = Inotify::create();
  if (!in) return in.error();
  inotify_.emplace(std::move(*in));
  watches_.emplace(*inotify_, daemon_metrics_);
  return {};
}

bool NodeInputs::locate() {
  if (located_) return true;
  if (auto s = node_->locate(); !s) {
    if (locate_error_.first()) log::warn(s.error().message + "; will look again at every resync");
    return false;
  }
  located_ = true;
  locate_error_.reset();
  log::info("watching " + node_->kubepods().dir());
  return true;
}

void NodeInputs::load(BundleRefreshDepth depth) {
  ensure_watches();
  NodeLoad load = load_node_inputs(*node_, depth);
  report_checkpoint(load.checkpoint, load.checkpoint_warnings);
}

void NodeInputs::reload_checkpoint() {
  Status read = node_->load_checkpoint();
  report_checkpoint(read, read ? checkpoint_warnings(*node_) : std::vector<std::string>{});
}

void NodeInputs::report_checkpoint(const Status& read, const std::vector<std::string>& warnings) {
  metrics_.set_checkpoint_loaded(read.ok());
  if (!read) {
    log::warn(read.error().message + (node_->checkpoint().loaded ? "; keeping the last good record" : ""));
    return;
  }
  metrics_.set_checkpoint_checksum_valid(node_->checkpoint().checkpoint.checksum_valid);
  struct stat st{};
  if (::stat(config_.kubelet.checkpoint.c_str(), &st) == 0)
    metrics_.set_checkpoint_last_write(static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec / 1e9);
  for (const auto& w : warnings) log::warn(w);
}

void NodeInputs::ensure_watches() {
  const std::string& ckpt = config_.kubelet.checkpoint;
  watches_->add(dir_name(ckpt), IN_MOVED_TO | IN_CLOSE_WRITE | IN_DELETE | IN_ONLYDIR,
                {WatchTarget::kCheckpointDir, dir_name(ckpt)});
  for (const auto& dir : config_.runtime.state_dirs)
    watches_->add(dir, IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_ONLYDIR, {WatchTarget::kBundleDir, dir});
  for (const auto& dir : {config_.devices.dev_root, config_.devices.dev_root + "/nvidia-caps"})
    watches_->add(dir, IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_ATTRIB | IN_ONLYDIR, {WatchTarget::kDevDir, dir});
  for (const auto& dir : config_.cdi.spec_dirs)
    watches_->add(dir, IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_ONLYDIR, {WatchTarget::kCdiDir, dir});
}

InputChanges NodeInputs::read() {
  InputChanges changes;
  changes.overflow = watches_->drain([&](const Inotify::Event& ev, const WatchTarget& target) {
    switch (target.kind) {
      case WatchTarget::kCheckpointDir:
        changes.checkpoint |= ev.name == base_name(config_.kubelet.checkpoint);
        break;
      case WatchTarget::kBundleDir:
        changes.bundles.push_back(ev.name);
        break;
      case WatchTarget::kCdiDir:  // a refreshed or new CDI spec (per-claim specs of DRA drivers)
        changes.inventory |= is_cdi_spec_file_name(ev.name);
        break;
      case WatchTarget::kDevDir:
        changes.inventory |= ev.name.rfind("nvidia", 0) == 0;
        break;
      default:
        break;
    }
  });
  return changes;
}

}  // namespace gdw
