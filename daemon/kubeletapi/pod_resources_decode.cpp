#include "kubeletapi/pod_resources_decode.h"

namespace gdw {

std::vector<PodResourcesContainer> pod_resources_containers(const v1::ListPodResourcesResponse& response) {
  std::vector<PodResourcesContainer> out;
  for (const auto& pod : response.pod_resources()) {
    for (const auto& container : pod.containers()) {
      PodResourcesContainer c;
      c.pod_namespace = pod.namespace_();
      c.pod_name = pod.name();
      c.container_name = container.name();
      for (const auto& devices : container.devices()) {
        auto& ids = c.devices[devices.resource_name()];
        ids.insert(ids.end(), devices.device_ids().begin(), devices.device_ids().end());
      }
      for (const auto& dynamic : container.dynamic_resources()) {
        for (const auto& resource : dynamic.claim_resources()) {
          DraClaimDevice claim{dynamic.claim_namespace(), dynamic.claim_name(), resource.driver_name(),
                               resource.pool_name(), resource.device_name(), {}};
          for (const auto& cdi : resource.cdi_devices()) claim.cdi_devices.push_back(cdi.name());
          c.claims.push_back(std::move(claim));
        }
      }
      out.push_back(std::move(c));
    }
  }
  return out;
}

}  // namespace gdw
