#include "kube/pod_gates.h"

#include <nlohmann/json.hpp>

namespace gdw::kube {
namespace {

using json = nlohmann::json;

// Longest field kept: a DNS subdomain (name, node name). A longer one makes the pod invalid.
constexpr std::size_t kMaxName = 253;
constexpr std::size_t kMaxShort = 64;  // UID, resourceVersion, phase, a condition's status
constexpr std::size_t kMaxContinue = 4096;
// Keys of our paths are short; a longer key only needs to differ from all of them.
constexpr std::size_t kMaxKey = 64;
// Nesting followed: ours is at most 5 levels below the pod; deeper levels are only counted.
constexpr std::size_t kMaxDepth = 16;

// Follows the path of each value as "/key/[]/key" and keeps the fields of PodFacts found at
// their place below `pod_base` (the list's "/items/[]", a watch event's "/object").
class PodSax : public nlohmann::json_sax<json> {
 public:
  explicit PodSax(std::string pod_base, std::size_t max_items) : base_(std::move(pod_base)), max_items_(max_items) {}

  std::vector<PodFacts> pods;
  std::string top_resource_version, continue_token, event_type;
  long error_code = 0;
  bool too_many = false;

  bool null() override { return true; }
  bool boolean(bool v) override {
    if (v && in_pod_ && !deep_ && rel() == "/status/containerStatuses/[]/started") ++pod_.started;
    return true;
  }
  bool number_integer(number_integer_t v) override { return number(static_cast<long>(v)); }
  bool number_unsigned(number_unsigned_t v) override { return number(static_cast<long>(v)); }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

  bool string(string_t& v) override {
    if (in_pod_ && starts_with_base()) return pod_string(std::string_view(path_).substr(base_.size()), v);
    if (path_ == "/metadata/resourceVersion") keep(top_resource_version, v, kMaxShort, nullptr);
    if (path_ == "/metadata/continue") keep(continue_token, v, kMaxContinue, nullptr);
    if (path_ == "/type") keep(event_type, v, kMaxShort, nullptr);
    return true;
  }

  bool start_object(std::size_t) override {
    if (!deep_ && path_ == base_) {
      if (pods.size() >= max_items_) {
        too_many = true;
        return false;
      }
      in_pod_ = true;
      pod_ = PodFacts{};
      pod_ok_ = true;
    } else if (in_pod_ && !deep_ && rel() == "/status/conditions/[]") {
      cond_is_gate_ = false;
      cond_status_.clear();
    } else if (in_pod_ && !deep_ && rel() == "/spec/containers/[]") {
      ++pod_.containers;
    }
    return push("");
  }
  bool key(string_t& k) override {
    if (deep_) return true;
    path_.resize(starts_.back());
    path_ += '/';
    path_ += k.size() <= kMaxKey ? std::string_view(k) : std::string_view("?");
    return true;
  }
  bool end_object() override {
    pop();
    if (deep_) return true;
    if (in_pod_ && path_ == base_) finish_pod();
    else if (in_pod_ && rel() == "/status/conditions/[]" && cond_is_gate_) pod_.gate_status = cond_status_ == "True";
    return true;
  }
  bool start_array(std::size_t) override { return push("/[]"); }
  bool end_array() override {
    pop();
    return true;
  }

 private:
  bool starts_with_base() const { return path_.size() > base_.size() && path_.compare(0, base_.size(), base_) == 0; }
  std::string_view rel() const {
    return starts_with_base() ? std::string_view(path_).substr(base_.size()) : std::string_view();
  }
  bool push(std::string_view segment) {
    if (deep_ || starts_.size() >= kMaxDepth) {
      ++deep_;
      return true;
    }
    starts_.push_back(path_.size());
    path_ += segment;
    return true;
  }
  void pop() {
    if (deep_) {
      --deep_;
      return;
    }
    path_.resize(starts_.back());
    starts_.pop_back();
  }
  // A field copied only when it fits; `ok` (when given) turns false when it does not.
  static void keep(std::string& out, const std::string& v, std::size_t max, bool* ok) {
    if (v.size() <= max) {
      out = v;
    } else if (ok) {
      *ok = false;
    }
  }
  bool number(long v) {
    if (path_ == "/object/code") error_code = v;
    return true;
  }
  bool pod_string(std::string_view rel, const std::string& v) {
    if (rel == "/metadata/name") keep(pod_.pod.name, v, kMaxName, &pod_ok_);
    else if (rel == "/metadata/namespace") keep(pod_.pod.pod_namespace, v, kMaxName, &pod_ok_);
    else if (rel == "/metadata/uid") keep(pod_.pod.uid, v, kMaxShort, &pod_ok_);
    else if (rel == "/metadata/resourceVersion") keep(pod_.resource_version, v, kMaxShort, &pod_ok_);
    else if (rel == "/spec/nodeName") keep(pod_.node_name, v, kMaxName, &pod_ok_);
    else if (rel == "/status/phase") keep(pod_.phase, v, kMaxShort, &pod_ok_);
    else if (rel == "/spec/readinessGates/[]/conditionType" && v == kReadinessGate) pod_.declares_gate = true;
    else if (rel == "/status/conditions/[]/type") cond_is_gate_ = v == kReadinessGate;
    else if (rel == "/status/conditions/[]/status") keep(cond_status_, v, kMaxShort, nullptr);
    return true;
  }
  void finish_pod() {
    in_pod_ = false;
    pod_.valid = pod_ok_ && valid_pod_ref(pod_.pod);
    pods.push_back(std::move(pod_));
  }

  std::string base_;
  std::size_t max_items_;
  std::string path_;
  std::vector<std::size_t> starts_;
  std::size_t deep_ = 0;
  bool in_pod_ = false;
  bool pod_ok_ = true;
  PodFacts pod_;
  bool cond_is_gate_ = false;
  std::string cond_status_;
};

WatchEvent::Type event_type(const std::string& t) {
  if (t == "ADDED") return WatchEvent::Type::kAdded;
  if (t == "MODIFIED") return WatchEvent::Type::kModified;
  if (t == "DELETED") return WatchEvent::Type::kDeleted;
  if (t == "BOOKMARK") return WatchEvent::Type::kBookmark;
  if (t == "ERROR") return WatchEvent::Type::kError;
  return WatchEvent::Type::kOther;
}

}  // namespace

bool gate_applies(const PodFacts& pod, const std::string& node) {
  return pod.valid && pod.declares_gate && pod.node_name == node && pod.phase != "Succeeded" &&
         pod.phase != "Failed";
}

bool all_started(const PodFacts& pod) {
  return pod.phase == "Running" && pod.containers > 0 && pod.started >= pod.containers;
}

Result<PodListPage> parse_pod_list(std::string_view text, std::size_t max_items) {
  PodSax sax("/items/[]", max_items);
  if (!json::sax_parse(text.begin(), text.end(), &sax)) {
    if (sax.too_many) return Error{"the pod list has more than " + std::to_string(max_items) + " items"};
    return Error{"the pod list is not valid JSON"};
  }
  PodListPage page;
  page.pods = std::move(sax.pods);
  page.resource_version = std::move(sax.top_resource_version);
  page.continue_token = std::move(sax.continue_token);
  return page;
}

Result<WatchEvent> parse_watch_event(std::string_view text) {
  PodSax sax("/object", 1);
  if (!json::sax_parse(text.begin(), text.end(), &sax)) return Error{"a watch event is not valid JSON"};
  WatchEvent e;
  e.type = event_type(sax.event_type);
  if (!sax.pods.empty()) e.pod = std::move(sax.pods.front());
  e.error_code = sax.error_code;
  return e;
}

}  // namespace gdw::kube
