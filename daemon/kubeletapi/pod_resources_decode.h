// kubelet's PodResources List answer (the generated v1 message) as the containers the
// allocation merge takes. Separate from the client so the fuzz build, which has the
// messages but no gRPC, runs the same conversion.
#pragma once

#include <vector>

#include "core/allocation_merge.h"
#include "podresources_v1.pb.h"

namespace gdw {

// Every container of every pod, with its device IDs gathered per resource name (kubelet
// sends one ContainerDevices per device) and its DRA claims' devices (one DraClaimDevice
// per ClaimResource). Names and IDs are taken as sent; the merge decides what they may be
// used for.
std::vector<PodResourcesContainer> pod_resources_containers(const v1::ListPodResourcesResponse& response);

}  // namespace gdw
