#include "kube/event_model.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <ctime>

#include "kube/api_names.h"

namespace gdw::kube {
namespace {

// Who revoked is tenant-influenced text (comm, executable path): kept short enough that
// the devices and the outcome always fit in the message.
constexpr std::size_t kMaxWriterDetailBytes = 256;
// Object names are DNS subdomains of at most 253 characters; ".<16 hex digits>" follows.
constexpr std::size_t kMaxNamePrefix = 253 - 17;

// Control characters become spaces; the text is cut (on a UTF-8 boundary) to `max` bytes.
std::string bounded(const std::string& text, std::size_t max) {
  std::string out;
  out.reserve(std::min(text.size(), max));
  for (unsigned char ch : text) out += (ch < 0x20 || ch == 0x7f) ? ' ' : static_cast<char>(ch);
  if (out.size() <= max) return out;
  std::size_t cut = max - 3;
  while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
  out.resize(cut);
  return out + "...";
}

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

std::string human_duration(std::chrono::nanoseconds d) {
  char buf[32];
  const double ms = std::chrono::duration<double, std::milli>(d).count();
  if (ms < 1000) {
    std::snprintf(buf, sizeof buf, ms < 10 ? "%.2f ms" : "%.0f ms", ms);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f s", ms / 1000);
  }
  return buf;
}

std::string revoked_by(const IncidentFacts& f) {
  if (f.writer_detail.empty()) return f.writer.empty() ? "" : " by " + f.writer;
  return " by " + bounded(f.writer_detail, kMaxWriterDetailBytes);
}

}  // namespace

bool valid_pod_ref(const PodRef& pod) {
  return dns_label(pod.pod_namespace) && dns_subdomain(pod.name) && uid_text(pod.uid);
}

Incident make_incident(Cause cause, const IncidentFacts& f) {
  Incident in;
  in.pod = f.pod;
  const std::string who = "container " + f.container;
  const std::string devices = join(f.devices);
  std::string message;
  switch (cause) {
    case Cause::kRevoked:
      in.reason = "GPUAccessRevoked";
      message = "Access of " + who + " to " + devices + " was revoked" + revoked_by(f) +
                "; gpu-devwatch restored it in " + human_duration(f.repair_time);
      break;
    case Cause::kObserveMode:
      in.reason = "GPUAccessLost";
      message = who + " lost access to " + devices + revoked_by(f) +
                "; not restored: gpu-devwatch runs in observe mode";
      break;
    case Cause::kGrantRefused:
      in.reason = "GPUAccessLost";
      message = who + " lost access to " + devices + "; the kernel refused to grant it back: " + f.problem;
      break;
    case Cause::kThrottled:
      in.reason = "GPUAccessLost";
      message = who + " keeps losing access to " + devices + revoked_by(f) + "; " + f.problem;
      break;
  }
  // Kubernetes capitalises event messages; "container" leads the lost ones.
  if (!message.empty() && message[0] >= 'a' && message[0] <= 'z') message[0] = static_cast<char>(message[0] - 'a' + 'A');
  in.message = bounded(message, kMaxMessageBytes);
  // The same container, devices and (bounded) writer are the same incident repeating; the
  // duration and the writer's pid are not part of it.
  in.key = std::to_string(static_cast<int>(cause)) + "|" + f.container + "|" + devices + "|" + f.writer;
  return in;
}

std::string rfc3339(WallClock::time_point t) {
  const std::time_t secs = WallClock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string event_name(const std::string& pod_name, WallClock::time_point t) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  char hex[24];
  std::snprintf(hex, sizeof hex, "%llx", static_cast<unsigned long long>(ns));
  std::string prefix = pod_name.substr(0, kMaxNamePrefix);
  while (!prefix.empty() && (prefix.back() == '.' || prefix.back() == '-')) prefix.pop_back();
  return prefix + "." + hex;
}

std::string create_body(const EventState& e, const ReportingSource& source) {
  nlohmann::json j = {
      {"apiVersion", "v1"},
      {"kind", "Event"},
      {"metadata", {{"name", e.name}, {"namespace", e.pod.pod_namespace}}},
      {"involvedObject",
       {{"apiVersion", "v1"}, {"kind", "Pod"}, {"namespace", e.pod.pod_namespace}, {"name", e.pod.name},
        {"uid", e.pod.uid}}},
      {"reason", e.reason},
      {"message", e.message},
      {"type", "Warning"},
      {"count", e.count},
      {"firstTimestamp", rfc3339(e.first_seen)},
      {"lastTimestamp", rfc3339(e.last_seen)},
      {"source", {{"component", source.component}, {"host", source.host}}},
      {"reportingComponent", source.component},
      {"reportingInstance", source.host},
  };
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string patch_body(const EventState& e) {
  nlohmann::json j = {{"count", e.count}, {"lastTimestamp", rfc3339(e.last_seen)}, {"message", e.message}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string events_path(const std::string& pod_namespace) { return "/api/v1/namespaces/" + pod_namespace + "/events"; }

std::string event_path(const std::string& pod_namespace, const std::string& name) {
  return events_path(pod_namespace) + "/" + name;
}

}  // namespace gdw::kube
