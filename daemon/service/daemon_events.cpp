// The daemon's side of Kubernetes Events: who the pod is and what happened, from what the
// daemon already knows about the container (kube/ does the rest, off the loop).
#include "service/daemon.h"

namespace gdw {

void Daemon::start_events() {
  events_.reset();  // joins the old worker; its in-flight request is aborted
  events_ = kube::EventReporter::create(config_, *loop_, metrics_);
}

void Daemon::report_event(const Watched& w, kube::Cause cause, const std::vector<WantedDevice>& devices,
                          const std::string& problem) {
  if (!events_ || !w.target.identity) return;
  kube::IncidentFacts f;
  // The UID from the kernel-enforced cgroup path; namespace and name as the runtime set them.
  f.pod = {w.target.identity->pod_namespace, w.target.identity->pod_name, w.cgroup.pod.pod_uid};
  f.container = w.target.identity->container_name;
  for (const auto& d : devices) f.devices.push_back(d.name);
  // Who revoked, when the probe saw the write that this repair (or this loss) answers.
  const auto at = cause == kube::Cause::kRevoked ? w.unlogged.trigger : Clock::now();
  if (w.last_revocation && names_repair(*w.last_revocation, at)) {
    f.writer = w.last_revocation->writer;
    f.writer_detail = w.last_revocation->detail;
  }
  f.repair_time = std::chrono::duration_cast<std::chrono::nanoseconds>(w.unlogged.repair_time);
  f.problem = problem;
  events_->report(cause, f);
}

}  // namespace gdw
