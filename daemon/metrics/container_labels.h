// Who a per-container series is about: the pod's namespace and name and the container's
// name, as the runtime set them (bounded: a node runs at most a few hundred pods).
#pragma once

#include <string>

namespace gdw {

struct ContainerLabels {
  std::string pod_namespace;
  std::string pod;
  std::string container;
  auto operator<=>(const ContainerLabels&) const = default;
};

}  // namespace gdw
