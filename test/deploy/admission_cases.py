"""The admission requests check_admission_cel.py runs the policies on, as data: a Node and a
Pod as kubelet and the scheduler leave them, the daemon's own status writes, and what a
stolen or misused gpu-devwatch token could try instead, each with the words of the denial
the policy must give (None: admitted). BREAKAGES: broken copies of the policies that some
case must catch."""
import copy

import admission

OWN_NODE = "gpu-node-1"
OTHER_NODE = "gpu-node-2"
CLAIM = "authentication.kubernetes.io/node-name"
GATE = "gpu-devwatch.io/devices-ready"
T0, T1 = "2026-11-29T10:00:00Z", "2026-11-29T10:05:00Z"


def SA(*nodes):
    """The DaemonSet's token, bound to a pod on `nodes` (default: its own node; none: no claim)."""
    claim = {CLAIM: list(nodes or (OWN_NODE,))} if nodes != ("",) else None
    return admission.user_info("system:serviceaccount:gpu-devwatch:gpu-devwatch", claim,
                               ["system:serviceaccounts", "system:authenticated"])


KUBELET = admission.user_info(f"system:node:{OWN_NODE}", None, ["system:nodes", "system:authenticated"])


def condition(type_, status, reason, heartbeat=None):
    c = {"type": type_, "status": status, "reason": reason, "message": reason, "lastTransitionTime": T0}
    if heartbeat:
        c["lastHeartbeatTime"] = heartbeat
    return c


def node(name=OWN_NODE):
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": "5d1f0c3e", "resourceVersion": "1001",
                     "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true"},
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
                     "managedFields": [{"manager": "kubelet", "operation": "Update", "time": T0}]},
        "spec": {"podCIDR": "10.244.1.0/24", "providerID": "kind://gpu-node"},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "192.0.2.10"}, {"type": "Hostname", "address": name}],
            "capacity": {"cpu": "64", "memory": "528Gi", "nvidia.com/gpu": "8", "pods": "110"},
            "allocatable": {"cpu": "63", "memory": "520Gi", "nvidia.com/gpu": "8", "pods": "110"},
            "conditions": [condition("MemoryPressure", "False", "KubeletHasSufficientMemory", T0),
                           condition("Ready", "True", "KubeletReady", T0)],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"kubeletVersion": "v1.35.0", "containerRuntimeVersion": "containerd://2.1.0"},
            "images": [{"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 320368}]}}


def with_own_conditions(n, degraded="False"):
    n = copy.deepcopy(n)
    n["status"]["conditions"] += [condition("GPUDeviceAccessDegraded", degraded, "AllDevicesAccessible", T1),
                                  condition("GPUAllocationRecordStale", "False", "CheckpointCurrent", T1),
                                  condition("GPUDevicePluginUnresponsive", "False", "DevicePluginAnswers", T1)]
    return n


def churn(obj):
    """What the API server itself changes on every write: resourceVersion, managedFields."""
    obj = copy.deepcopy(obj)
    obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
    obj["metadata"]["managedFields"].append({"manager": "gpu-devwatch", "operation": "Update",
                                             "subresource": "status", "time": T1})
    return obj


def edited(make, edit):
    def build():
        obj = make()
        edit(obj)
        return obj
    return build


def pod(node_name=OWN_NODE, gate=True):
    p = {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "train-0", "namespace": "team-a", "uid": "8e9b", "resourceVersion": "2001",
                      "labels": {"app": "train"}, "ownerReferences": [{"kind": "Job", "name": "train", "uid": "11"}],
                      "managedFields": [{"manager": "kubelet", "operation": "Update", "time": T0}]},
         "spec": {"nodeName": node_name, "containers": [{"name": "cuda", "image": "cuda:12"}]},
         "status": {"phase": "Running", "hostIP": "192.0.2.10", "podIP": "10.244.1.7", "qosClass": "Guaranteed",
                    "startTime": T0, "conditions": [condition("Ready", "False", "ReadinessGatesNotReady")],
                    "containerStatuses": [{"name": "cuda", "ready": True, "restartCount": 0, "image": "cuda:12",
                                           "imageID": "sha256:1", "state": {"running": {"startedAt": T0}}}]}}
    if gate:
        p["spec"]["readinessGates"] = [{"conditionType": GATE}]
    if node_name is None:
        del p["spec"]["nodeName"]
    return p


def other_gate(p):
    p["spec"]["readinessGates"] = [{"conditionType": "example.com/warmed-up"}]


def gated(p, status="True"):
    p = churn(p)
    p["status"]["conditions"].append(condition(GATE, status, "DevicesAccessible"))
    return p


NODE_BEFORE = lambda: node()  # noqa: E731
NODE_OWN = lambda: with_own_conditions(node())  # noqa: E731
NODE_CASES = [
    {"what": "the daemon's first write: its three conditions", "old": NODE_BEFORE, "new": lambda: churn(NODE_OWN())},
    {"what": "a later write: its condition turned True", "old": NODE_OWN,
     "new": lambda: with_own_conditions(churn(node()), "True")},
    {"what": "kubelet's own write of Ready", "user": KUBELET, "old": NODE_OWN,
     "new": edited(NODE_OWN, lambda n: n["status"]["conditions"][1].update(status="False"))},
    {"what": "another node's status", "user": SA(OTHER_NODE), "old": NODE_BEFORE, "new": NODE_OWN,
     "denied": f"gpu-devwatch on node {OTHER_NODE} may patch only its own node, not {OWN_NODE}"},
    {"what": "a token without the node claim", "user": SA(""), "old": NODE_BEFORE, "new": NODE_OWN,
     "denied": "token names no node"},
    {"what": "a claim naming two nodes", "user": SA(OWN_NODE, OTHER_NODE), "old": NODE_BEFORE, "new": NODE_OWN,
     "denied": "token names no node"},
    {"what": "Ready set False", "old": NODE_OWN,
     "new": edited(NODE_OWN, lambda n: n["status"]["conditions"][1].update(status="False")),
     "denied": "may write only its own node conditions"},
    {"what": "Ready removed", "old": NODE_OWN, "new": edited(NODE_OWN, lambda n: n["status"]["conditions"].pop(1)),
     "denied": "may write only its own node conditions"},
    {"what": "a foreign condition type added", "old": NODE_OWN,
     "new": edited(NODE_OWN, lambda n: n["status"]["conditions"].append(condition("NetworkUnavailable", "True", "X"))),
     "denied": "may write only its own node conditions"},
    {"what": "a label changed", "old": NODE_OWN,
     "new": edited(NODE_OWN, lambda n: n["metadata"]["labels"].update({"nvidia.com/gpu.present": "false"})),
     "denied": "may not change a node's labels"},
    {"what": "an annotation added", "old": NODE_OWN,
     "new": edited(NODE_OWN, lambda n: n["metadata"]["annotations"].update({"x": "y"})),
     "denied": "may not change a node's labels"},
    {"what": "GPU capacity raised", "old": NODE_OWN,
     "new": edited(NODE_OWN, lambda n: n["status"]["capacity"].update({"nvidia.com/gpu": "16"})),
     "denied": "may change only status.conditions of its node"},
    {"what": "allocatable dropped", "old": NODE_OWN, "new": edited(NODE_OWN, lambda n: n["status"].pop("allocatable")),
     "denied": "may change only status.conditions of its node"},
    {"what": "an address rewritten", "old": NODE_OWN,
     "new": edited(NODE_OWN, lambda n: n["status"]["addresses"][0].update(address="198.51.100.1")),
     "denied": "may change only status.conditions of its node"},
]

POD_CASES = [
    {"what": "the gate written True on a pod of its node", "old": pod, "new": lambda: gated(pod())},
    {"what": "the gate turned False", "old": lambda: gated(pod()), "new": lambda: gated(pod(), "False")},
    {"what": "kubelet's write of the pod's phase", "user": KUBELET, "old": pod,
     "new": edited(pod, lambda p: p["status"].update(phase="Failed"))},
    {"what": "a pod on another node", "old": lambda: pod(OTHER_NODE), "new": lambda: gated(pod(OTHER_NODE)),
     "denied": f"gpu-devwatch on node {OWN_NODE} may patch only pods on its own node"},
    {"what": "a pod not yet scheduled", "old": lambda: pod(None), "new": lambda: gated(pod(None)),
     "denied": "may patch only pods on its own node"},
    {"what": "a pod without the readiness gate", "old": lambda: pod(gate=False),
     "new": lambda: gated(pod(gate=False)), "denied": "may patch only pods that declare the readiness gate"},
    {"what": "a pod with another readiness gate only", "old": edited(lambda: pod(gate=False), other_gate),
     "new": edited(lambda: gated(pod(gate=False)), other_gate), "denied": "may patch only pods that declare the"},
    {"what": "a token without the node claim", "user": SA(""), "old": pod, "new": lambda: gated(pod()),
     "denied": "token names no node"},
    {"what": "Ready forced True", "old": pod,
     "new": edited(lambda: gated(pod()), lambda p: p["status"]["conditions"][0].update(status="True")),
     "denied": "may write only the readiness gate's condition"},
    {"what": "a container's status rewritten", "old": pod,
     "new": edited(lambda: gated(pod()), lambda p: p["status"]["containerStatuses"][0].update(ready=False)),
     "denied": "may change only status.conditions of a pod"},
    {"what": "the phase changed", "old": pod, "new": edited(lambda: gated(pod()), lambda p: p["status"].update(
        phase="Succeeded")), "denied": "may change only status.conditions of a pod"},
    {"what": "an owner reference dropped", "old": pod,
     "new": edited(lambda: gated(pod()), lambda p: p["metadata"].pop("ownerReferences")),
     "denied": "may not change a pod's labels"},
]


def _policy(docs, resource):
    return next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"
                and resource in d["spec"]["matchConstraints"]["resourceRules"][0]["resources"])


def _replace(resource, old, new):
    def edit(docs):
        spec = _policy(docs, resource)["spec"]
        hits = 0
        for item in spec.get("validations", []) + spec.get("variables", []) + spec.get("matchConditions", []):
            if old in item["expression"]:
                item["expression"] = item["expression"].replace(old, new)
                hits += 1
        assert hits, f"self-test: {old!r} is not in the {resource} policy any more"
    return edit


BREAKAGES = {
    "the node name not compared": _replace("nodes/status", "object.metadata.name == variables.nodeName", "true"),
    "any claim's first node taken": _replace("nodes/status", "]) == 1", "]) >= 1"),
    "Ready among the own types": _replace("nodes/status", "'GPUDevicePluginUnresponsive'",
                                          "'GPUDevicePluginUnresponsive', 'Ready'"),
    "other conditions left free": _replace("nodes/status",
                                           "variables.otherConditions == variables.oldOtherConditions", "true"),
    "capacity left free": _replace("nodes/status", "object.status.capacity == oldObject.status.capacity", "true"),
    "annotations left free": _replace("nodes/status",
                                      "(has(object.metadata.annotations) ? object.metadata.annotations : {})",
                                      "(has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {})"),
    "the pod's node not compared": _replace("pods/status", "oldObject.spec.nodeName == variables.nodeName", "true"),
    "the gate's declaration not required": _replace("pods/status", "g.conditionType == variables.gate", "true"),
    "a pod's phase left free": _replace("pods/status", "object.status.phase == oldObject.status.phase", "true"),
    "another ServiceAccount matched": _replace("pods/status", "gpu-devwatch:gpu-devwatch", "default:default"),
    "the binding only warns": lambda docs: [b["spec"].update(validationActions=["Warn"]) for b in docs
                                            if b["kind"] == "ValidatingAdmissionPolicyBinding"],
}
