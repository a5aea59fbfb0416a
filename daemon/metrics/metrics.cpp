#include "metrics/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <stdexcept>

#include "build_info.h"

namespace gdw {

namespace {

using Id = MetricId;
using Type = MetricType;

// A method asked its family for what its row does not make: a programming error.
template <class T>
T& must(T* p, Id id, const char* what) {
  if (!p) throw std::logic_error("metric family " + std::to_string(std::size_t(id)) + " has no " + what);
  return *p;
}

}  // namespace

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()), families_(std::size_t(Id::kCount)) {
  for (const auto& spec : metric_families()) register_family(spec);
  for (std::size_t i = 0; i < families_.size(); ++i) {
    const Registered& f = families_[i];
    if (!f.counters && !f.gauges && !f.histograms)
      throw std::logic_error("metric family " + std::to_string(i) + " has no row in the table");
  }
  gauges(Id::kBuildInfo).Add({{"version", GDW_VERSION}, {"revision", GDW_GIT_REVISION}}).Set(1);
}

void Metrics::register_family(const MetricFamilySpec& spec) {
  Registered& f = families_.at(std::size_t(spec.id));
  if (f.counters || f.gauges || f.histograms) throw std::logic_error(std::string(spec.name) + ": its Id has two rows");
  const std::string name(spec.name), help(spec.help);
  switch (spec.type) {
    case Type::kCounter:
      f.counters = &prometheus::BuildCounter().Name(name).Help(help).Register(*registry_);
      break;
    case Type::kGauge:
      f.gauges = &prometheus::BuildGauge().Name(name).Help(help).Register(*registry_);
      break;
    case Type::kHistogram:
      f.histograms = &prometheus::BuildHistogram().Name(name).Help(help).Register(*registry_);
      break;
  }
  if (spec.series != MetricFamilySpec::Series::kAtStart) return;
  if (spec.values.empty()) {
    if (f.counters) f.counter = &f.counters->Add({});
    if (f.gauges) f.gauge = &f.gauges->Add({});
    if (f.histograms) f.histogram = &f.histograms->Add({}, *spec.buckets);
    return;
  }
  for (auto value : spec.values) {
    const prometheus::Labels labels{{std::string(spec.labels.at(0)), std::string(value)}};
    if (f.counters) f.counters->Add(labels);
    if (f.gauges) f.gauges->Add(labels);
    if (f.histograms) f.histograms->Add(labels, *spec.buckets);
  }
}

const Metrics::Registered& Metrics::family(Id id) const { return families_[std::size_t(id)]; }

prometheus::Family<prometheus::Counter>& Metrics::counters(Id id) const {
  return must(family(id).counters, id, "counters");
}
prometheus::Family<prometheus::Gauge>& Metrics::gauges(Id id) const { return must(family(id).gauges, id, "gauges"); }
prometheus::Counter& Metrics::counter(Id id) const { return must(family(id).counter, id, "unlabeled counter"); }
prometheus::Gauge& Metrics::gauge(Id id) const { return must(family(id).gauge, id, "unlabeled gauge"); }
prometheus::Histogram& Metrics::histogram(Id id) const { return must(family(id).histogram, id, "unlabeled histogram"); }

Metrics::~Metrics() = default;

Status Metrics::serve(const std::string& listen, HttpHandler healthz, MetricsAccess access) {
  listen_ = listen;
  if (!listen_.empty() && listen_[0] == ':') listen_ = "0.0.0.0" + listen_;
  healthz_ = std::move(healthz);
  access_ = std::move(access);
  return start_http(access_);
}

Status Metrics::reserve(MetricsAccess access) {
  http_.reset();  // the port is free again for the new server
  if (auto s = start_http(access); !s) {
    if (auto again = start_http(access_); !again)
      return Error{s.error().message + "; with the previous web config: " + again.error().message};
    return s;
  }
  access_ = std::move(access);
  return {};
}

Status Metrics::start_http(const MetricsAccess& access) {
  // The registry is thread-safe; nothing else of this object is touched off the loop.
  std::map<std::string, HttpHandler> routes{
      {"/metrics", [registry = registry_] {
         return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8",
                             prometheus::TextSerializer().Serialize(registry->Collect())};
       }},
      {"/healthz", healthz_}};
  HttpServerOptions options;
  options.tls = access.tls;
  options.basic_auth = access.basic_auth;
  options.unauthenticated_paths = {"/healthz"};
  auto server = HttpServer::start(listen_, std::move(routes), options);
  if (!server) return Error{"serving metrics: " + server.error().message};
  http_ = std::move(*server);
  return {};
}

std::string Metrics::render() const { return prometheus::TextSerializer().Serialize(registry_->Collect()); }

std::map<std::string, std::string> Metrics::labels_of(const ContainerLabels& c) {
  return {{"namespace", c.pod_namespace}, {"pod", c.pod}, {"container", c.container}};
}

std::size_t Metrics::LabelsHash::operator()(const ContainerLabels& c) const {
  const std::hash<std::string> h;
  return h(c.pod_namespace) ^ (h(c.pod) * 31) ^ (h(c.container) * 131);
}

prometheus::Counter& Metrics::container_counter(prometheus::Family<prometheus::Counter>& family,
                                                const ContainerLabels& c, std::string_view extra_name,
                                                std::string_view extra_value) {
  if (!last_container_ || last_container_->first != c) last_container_ = &*by_container_.try_emplace(c).first;
  auto& series = last_container_->second;
  for (const auto& s : series)
    if (s.family == &family && s.extra_name == extra_name && s.extra_value == extra_value) return *s.counter;
  auto labels = labels_of(c);
  if (!extra_name.empty()) labels.emplace(extra_name, extra_value);
  prometheus::Counter& counter = family.Add(labels);
  series.push_back(Series{&family, &counter, std::string(extra_name), std::string(extra_value)});
  return counter;
}

void Metrics::forget_container(const ContainerLabels& c) {
  auto it = by_container_.find(c);
  if (it == by_container_.end()) return;
  for (const auto& s : it->second) s.family->Remove(s.counter);
  if (&*it == last_container_) last_container_ = nullptr;
  by_container_.erase(it);
}

}  // namespace gdw
