#!/usr/bin/env python3
"""Checks deploy/kubernetes/daemonset.yaml against what the daemon needs on a node.

usage: check_daemonset.py SOURCE_DIR [--self-test]

Without a cluster nothing validates the manifests against the API schema; this checks what
a schema would not: that the objects reference each other correctly, that the embedded
configuration only uses keys config/gpu-devwatch.yaml documents, and that every host path
the daemon reads or writes under that configuration is mounted into the container at the
path the configuration names, onto the same host path as on a systemd install, writable
only where the daemon writes, that of kubelet's root only the directories the daemon reads
are mounted (never pods/, every pod's Secret volumes), and that its ServiceAccount is granted exactly what the
features on in that configuration need (--self-test: and that broader grants are caught).

Exits 77 (a skip for CTest) when PyYAML is not installed.
"""
import copy
import json
import pathlib
import re
import posixpath
import sys

try:
    import yaml
except ImportError:
    print("PyYAML is not installed (Debian: python3-yaml): skipping", file=sys.stderr)
    sys.exit(77)

CAPABILITIES = {"SYS_ADMIN", "BPF", "PERFMON", "DAC_READ_SEARCH", "SYS_PTRACE"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
# What each feature asks of the API server, one ClusterRole each, exactly these rules:
# Events (create, and patch a repeat's count), the node conditions (the node read once at
# start, a strategic merge patch of nodes/status), the readiness gate (this node's pods
# listed and watched, their status patched). Nothing broader: no update, no other
# resource, no wildcard.
ROLES = {
    "gpu-devwatch-events": [{"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]}],
    "gpu-devwatch-node-conditions": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
                                     {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}],
    "gpu-devwatch-readiness-gate": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
                                    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]}],
}


def flatten(node, prefix=""):
    """{a: {b: 1}} -> {"a.b": 1}; an empty mapping is a value (devices.mig_map: {})."""
    out = {}
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


def under(path, directory):
    path, directory = posixpath.normpath(path), posixpath.normpath(directory)
    return path == directory or path.startswith(directory.rstrip("/") + "/")


class Checker:
    def __init__(self):
        self.errors = []

    def expect(self, condition, message):
        if not condition:
            self.errors.append(message)
        return condition


def main():
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    root = pathlib.Path(sys.argv[1])
    c = Checker()
    try:
        docs = [d for d in yaml.safe_load_all((root / "deploy/kubernetes/daemonset.yaml").read_text()) if d]
        reference = yaml.safe_load((root / "config/gpu-devwatch.yaml").read_text())
    except yaml.YAMLError as e:
        print(f"not valid YAML: {e}", file=sys.stderr)
        return 1

    by_kind = {}
    for d in docs:
        c.expect(isinstance(d, dict) and "apiVersion" in d and "kind" in d and "name" in d.get("metadata", {}),
                 f"object without apiVersion/kind/metadata.name: {str(d)[:80]}")
        by_kind.setdefault(d.get("kind"), []).append(d)
    for kind in ("Namespace", "ServiceAccount", "ConfigMap", "DaemonSet", "Service"):
        c.expect(len(by_kind.get(kind, [])) == 1, f"expected exactly one {kind}")
    if c.errors:
        return report(c)
    namespace = by_kind["Namespace"][0]["metadata"]["name"]
    for d in docs:
        if d["kind"] not in CLUSTER_SCOPED:
            c.expect(d["metadata"].get("namespace") == namespace,
                     f"{d['kind']} {d['metadata']['name']} is not in namespace {namespace}")

    ds = by_kind["DaemonSet"][0]
    pod = ds["spec"]["template"]["spec"]
    labels = ds["spec"]["template"]["metadata"]["labels"]
    selector = ds["spec"]["selector"]["matchLabels"]
    c.expect(selector.items() <= labels.items(), "DaemonSet selector does not match its pod labels")
    service = by_kind["Service"][0]
    c.expect(service["spec"]["selector"].items() <= labels.items(), "Service selector does not match the pods")
    c.expect(pod.get("serviceAccountName") == by_kind["ServiceAccount"][0]["metadata"]["name"],
             "pod does not use the ServiceAccount")
    c.expect(pod.get("hostPID") is True, "hostPID must be true: the probe reports host PIDs")
    c.expect(pod.get("priorityClassName") == "system-node-critical", "priorityClassName is not system-node-critical")
    c.expect(pod.get("nodeSelector") or pod.get("affinity"), "pod is not restricted to GPU nodes")
    # The image is an index for amd64 and arm64 (scripts/build-image.sh): every GPU node,
    # of either architecture, runs the pod; nothing may pick one.
    c.expect("kubernetes.io/arch" not in json.dumps(pod) and "beta.kubernetes.io/arch" not in json.dumps(pod),
             "the pod picks an architecture (kubernetes.io/arch): the image serves amd64 and arm64")

    containers = pod["containers"]
    c.expect(len(containers) == 1, "expected one container")
    ctr = containers[0]
    # The image is the one scripts/build-image.sh builds: gpu-devwatch:<project version>.
    version = re.search(r"project\(gpu-devwatch VERSION ([0-9.]+)", (root / "CMakeLists.txt").read_text())
    c.expect(version is not None, "CMakeLists.txt has no project(gpu-devwatch VERSION x.y.z)")
    if version:
        image = str(ctr.get("image", ""))
        c.expect(image.rsplit("/", 1)[-1] == f"gpu-devwatch:{version.group(1)}",
                 f"image {image} is not gpu-devwatch:{version.group(1)} (what scripts/build-image.sh builds)")
    command = ctr.get("command", [])
    c.expect(command[:3] == ["/usr/local/bin/gpu-devwatch", "run", "--config"] and len(command) == 4,
             f"container command is not `gpu-devwatch run --config PATH`: {command}")
    config_path = command[3] if len(command) == 4 else ""

    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = ctr.get("volumeMounts", [])
    for m in mounts:
        c.expect(m["name"] in volumes, f"volumeMount {m['name']} has no volume")
    mounted = {m["name"] for m in mounts}
    for name in volumes:
        c.expect(name in mounted, f"volume {name} is never mounted")

    # The configuration file: mounted from the ConfigMap, under a key of it.
    cm = by_kind["ConfigMap"][0]
    config_mount = next((m for m in mounts if under(config_path, m["mountPath"])), None)
    config_text = None
    if c.expect(config_mount is not None, f"--config {config_path} is not under any mount"):
        volume = volumes.get(config_mount["name"], {})
        c.expect(volume.get("configMap", {}).get("name") == cm["metadata"]["name"],
                 f"{config_mount['mountPath']} is not the ConfigMap {cm['metadata']['name']}")
        key = posixpath.relpath(config_path, config_mount["mountPath"])
        config_text = cm.get("data", {}).get(key)
        c.expect(config_text is not None, f"ConfigMap has no key {key} (the file --config names)")
    if config_text is None:
        return report(c)
    try:
        config = yaml.safe_load(config_text) or {}
    except yaml.YAMLError as e:
        c.expect(False, f"ConfigMap's configuration is not valid YAML: {e}")
        return report(c)

    defaults = flatten(reference)
    given = flatten(config)
    for key, value in given.items():
        if c.expect(key in defaults, f"configuration key {key} is not in config/gpu-devwatch.yaml"):
            c.expect(type(value) is type(defaults[key]),
                     f"configuration key {key}: {type(value).__name__}, documented as {type(defaults[key]).__name__}")
    effective = dict(defaults, **given)
    check_rbac(c, by_kind, pod, ctr, namespace, effective)
    if "--self-test" in sys.argv and set(ROLES) <= wanted_roles(effective):
        c.errors += self_test_rbac(by_kind, pod, ctr, namespace, effective)
    # As the daemon does: kubelet paths the file does not name live under kubelet.root_dir.
    for key, under_root in (("kubelet.checkpoint", "device-plugins/kubelet_internal_checkpoint"),
                            ("kubelet.pod_resources_socket", "pod-resources/kubelet.sock"),
                            ("kubelet.device_plugins_dir", "device-plugins")):
        if key not in given:
            effective[key] = posixpath.join(effective["kubelet.root_dir"], under_root)

    def host_path_of(container_path):
        """The host path a container path shows, and the mount it goes through."""
        best = None
        for m in mounts:
            if under(container_path, m["mountPath"]) and (best is None or len(m["mountPath"]) > len(best["mountPath"])):
                best = m
        if best is None:
            return None, None
        host = volumes.get(best["name"], {}).get("hostPath", {}).get("path")
        if host is None:
            return None, best
        rest = posixpath.relpath(container_path, best["mountPath"])
        return posixpath.normpath(posixpath.join(host, rest)), best

    # (configuration key or fixed path, path in the container, host path it must show, written?)
    needs = [("cgroup.root", effective["cgroup.root"], defaults["cgroup.root"], True),
             ("devices.dev_root", effective["devices.dev_root"], "/dev", False),
             ("devices.proc_root", effective["devices.proc_root"], "/proc", False),
             ("kubelet.pod_resources_socket", effective["kubelet.pod_resources_socket"],
              defaults["kubelet.pod_resources_socket"], False),
             ("kubelet.checkpoint", effective["kubelet.checkpoint"], defaults["kubelet.checkpoint"],
              effective["kubelet.remediate_stale_checkpoint"]),
             ("kubelet.device_plugins_dir", effective["kubelet.device_plugins_dir"],
              defaults["kubelet.device_plugins_dir"], effective["kubelet.remediate_stale_checkpoint"])]
    needs += [(f"runtime.state_dirs[{i}]", d, d, False) for i, d in enumerate(effective["runtime.state_dirs"])]
    needs += [(f"cdi.spec_dirs[{i}]", d, d, False) for i, d in enumerate(effective.get("cdi.spec_dirs", []))]
    if effective["probe.enabled"]:
        needs.append(("probe (kernel BTF)", "/sys/kernel/btf/vmlinux", "/sys/kernel/btf/vmlinux", False))
    if effective["systemd.bus_address"] == "":
        needs.append(("systemd (system bus)", "/run/dbus/system_bus_socket", "/run/dbus/system_bus_socket", False))
    for what, container_path, host_path, written in needs:
        shown, mount = host_path_of(container_path)
        if not c.expect(shown is not None, f"{what}: {container_path} is not on a hostPath mount"):
            continue
        c.expect(shown == host_path, f"{what}: {container_path} shows host {shown}, not {host_path}")
        read_only = bool(mount.get("readOnly"))
        c.expect(read_only != written,
                 f"{what}: mount {mount['mountPath']} is {'read-only' if read_only else 'writable'}"
                 f" but the daemon {'writes' if written else 'only reads'} there")
    check_kubelet_mounts(c, volumes, effective)
    if "--self-test" in sys.argv:
        c.errors += self_test_kubelet_mounts(volumes, effective)
    for m in mounts:
        if "hostPath" in volumes.get(m["name"], {}) and m["mountPath"] != effective["cgroup.root"]:
            c.expect(m.get("readOnly") or effective["kubelet.remediate_stale_checkpoint"],
                     f"host mount {m['mountPath']} is writable; only the cgroup tree is written")

    # Metrics: the port the daemon listens on is the one exposed, probed and scraped.
    port = int(str(effective["metrics.listen"]).rsplit(":", 1)[1])
    ports = {p.get("name"): p["containerPort"] for p in ctr.get("ports", [])}
    c.expect(port in ports.values(), f"metrics.listen port {port} is not a containerPort")
    # Liveness (and readiness, if any) ask /healthz: it turns 503 when the event loop is stuck,
    # which /metrics (served by other threads) never shows.
    c.expect("livenessProbe" in ctr, "no liveness probe")
    for kind in ("livenessProbe", "readinessProbe"):
        if kind not in ctr:
            continue
        probe = ctr[kind].get("httpGet", {})
        c.expect(probe.get("path") == "/healthz", f"{kind} does not GET /healthz")
        c.expect(ports.get(probe.get("port"), probe.get("port")) == port, f"{kind} is not on the metrics port")
    service_ports = service["spec"].get("ports", [])
    c.expect(any(ports.get(p.get("targetPort"), p.get("targetPort")) == port for p in service_ports),
             "Service does not target the metrics port")
    c.expect(service["spec"].get("clusterIP") == "None", "Service is not headless")

    security = ctr.get("securityContext", {})
    added = set(security.get("capabilities", {}).get("add", []))
    c.expect(security.get("privileged") is True or CAPABILITIES <= added,
             f"container is neither privileged nor granted {sorted(CAPABILITIES)}")
    resources = ctr.get("resources", {})
    for kind in ("requests", "limits"):
        for resource in ("cpu", "memory"):
            c.expect(resource in resources.get(kind, {}), f"no {resource} {kind[:-1]}")
    check_readiness_rule(c, root, pod)
    return report(c, f"{len(docs)} objects; {len(needs)} host paths mounted as the configuration needs")


def check_readiness_rule(c, root, pod):
    """deploy/consumers/node-readiness-rule.yaml: it selects the DaemonSet's nodes, names the
    daemon's own condition types, and the DaemonSet tolerates its taint (else the daemon
    could never run on a node the rule keeps tainted until the daemon has checked it)."""
    path = root / "deploy/consumers/node-readiness-rule.yaml"
    if not path.exists():
        return
    types = set(re.findall(r'case NodeConditionType::\w+: return "(\w+)";',
                           (root / "daemon/kube/conditions.cpp").read_text()))
    for rule in (d for d in yaml.safe_load_all(path.read_text()) if d):
        spec = rule["spec"]
        c.expect(spec["nodeSelector"].get("matchLabels") == pod.get("nodeSelector"),
                 "node-readiness-rule.yaml selects other nodes than the DaemonSet's nodeSelector")
        c.expect({x["type"] for x in spec["conditions"]} == types and
                 all(x["requiredStatus"] == "False" for x in spec["conditions"]),
                 f"node-readiness-rule.yaml must require each of {sorted(types)} to be \"False\"")
        taint = spec["taint"]
        c.expect(any(t.get("key") == taint["key"] and t.get("operator") == "Exists" and
                     t.get("effect") in (None, taint["effect"]) for t in pod.get("tolerations", [])),
                 f"the DaemonSet does not tolerate the readiness rule's taint {taint['key']}")


def kubelet_dirs(effective):
    """The directories of kubelet's root the daemon reads: the checkpoint's, the PodResources
    socket's and the device plugins' (the checkpoint is replaced by rename, the socket
    re-created: a directory is mounted, never the file)."""
    return {posixpath.normpath(posixpath.dirname(effective["kubelet.checkpoint"])),
            posixpath.normpath(posixpath.dirname(effective["kubelet.pod_resources_socket"])),
            posixpath.normpath(effective["kubelet.device_plugins_dir"])}


def check_kubelet_mounts(c, volumes, effective):
    """Of kubelet's root only the directories the daemon reads are mounted: a mount of the
    root itself (or of /var/lib, /) would show pods/, every pod's Secret and token volumes."""
    root = posixpath.normpath(effective["kubelet.root_dir"])
    wanted = kubelet_dirs(effective)
    for name, volume in sorted(volumes.items()):
        host = volume.get("hostPath", {}).get("path")
        if host is None:
            continue
        host = posixpath.normpath(host)
        c.expect(not under(posixpath.join(root, "pods"), host),
                 f"volume {name}: hostPath {host} shows {root}/pods (every pod's Secret volumes);"
                 f" mount only {sorted(wanted)}")
        if under(host, root):
            c.expect(host in wanted, f"volume {name}: hostPath {host} is under kubelet's root but not a"
                     f" directory the daemon reads ({sorted(wanted)})")


def self_test_kubelet_mounts(volumes, effective):
    """check_kubelet_mounts must catch kubelet's whole root, /var/lib, and its pods/ directory."""
    failures = []
    for path in (effective["kubelet.root_dir"], posixpath.dirname(effective["kubelet.root_dir"]),
                 posixpath.join(effective["kubelet.root_dir"], "pods")):
        vs = copy.deepcopy(volumes)
        vs["kubelet-device-plugins"] = {"name": "kubelet-device-plugins", "hostPath": {"path": path}}
        c = Checker()
        check_kubelet_mounts(c, vs, effective)
        if not c.errors:
            failures.append(f"self-test: check_kubelet_mounts did not catch a hostPath of {path}")
    return failures


def wanted_roles(effective):
    """The ClusterRoles the configuration needs (conditions and events: auto counts as on)."""
    events = str(effective.get("events.enabled", "auto")) != "false"
    conditions = str(effective.get("conditions.enabled", "auto")) != "false"
    gate = conditions and effective.get("conditions.readiness_gate", True) is not False
    return {name for name, on in (("gpu-devwatch-events", events), ("gpu-devwatch-node-conditions", conditions),
                                  ("gpu-devwatch-readiness-gate", gate)) if on}


def check_rbac(c, by_kind, pod, ctr, namespace, effective):
    """The ServiceAccount is granted exactly what the features on in the configuration need,
    one ClusterRole each; its token is mounted only when one is on."""
    sa = by_kind["ServiceAccount"][0]["metadata"]["name"]
    wanted = wanted_roles(effective)
    c.expect(not by_kind.get("Role") and not by_kind.get("RoleBinding"), "no namespaced Role/RoleBinding expected")
    roles = {r["metadata"]["name"]: r for r in by_kind.get("ClusterRole", [])}
    bindings = by_kind.get("ClusterRoleBinding", [])
    c.expect(pod.get("automountServiceAccountToken") is bool(wanted),
             "the pod must mount its ServiceAccount token exactly when events or conditions are on"
             f" (automountServiceAccountToken: {'true' if wanted else 'false'})")
    c.expect(set(roles) == wanted, f"ClusterRoles {sorted(roles)}, expected exactly {sorted(wanted)} for the"
             " features on in the ConfigMap (events.enabled, conditions.enabled, conditions.readiness_gate)")
    for name, role in roles.items():
        rules = [{k: sorted(v) for k, v in rule.items()} for rule in role.get("rules", [])]
        c.expect(rules == ROLES.get(name), f"ClusterRole {name} grants {rules}, not exactly {ROLES.get(name)}")
        c.expect(not role.get("aggregationRule"), f"ClusterRole {name} must not aggregate other roles")
    bound = set()
    for binding in bindings:
        ref = binding.get("roleRef", {})
        c.expect(ref.get("apiGroup") == "rbac.authorization.k8s.io" and ref.get("kind") == "ClusterRole" and
                 ref.get("name") in roles, f"ClusterRoleBinding {binding['metadata']['name']} binds no role of ours")
        c.expect(binding.get("subjects") == [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}],
                 f"ClusterRoleBinding {binding['metadata']['name']} must bind only ServiceAccount {namespace}/{sa}")
        bound.add(ref.get("name"))
    c.expect(bound == set(roles) and len(bindings) == len(roles), "each ClusterRole needs exactly one binding")
    if wanted:
        env = {e.get("name"): e for e in ctr.get("env", [])}
        node = env.get("NODE_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        c.expect(node == "spec.nodeName", "NODE_NAME (the events' source, the node whose conditions are written,"
                 " whose pods are watched) is not spec.nodeName")


def self_test_rbac(by_kind, pod, ctr, namespace, effective):
    """check_rbac must catch a grant broader than needed, a missing role and a stray one."""
    def role(bk, name):
        return next(r for r in bk["ClusterRole"] if r["metadata"]["name"] == name)

    def drop(bk, name):
        bk["ClusterRole"] = [r for r in bk["ClusterRole"] if r["metadata"]["name"] != name]
        bk["ClusterRoleBinding"] = [b for b in bk["ClusterRoleBinding"] if b["roleRef"]["name"] != name]

    cases = {
        "list on nodes": lambda bk: role(bk, "gpu-devwatch-node-conditions")["rules"][0]["verbs"].append("list"),
        "nodes, not nodes/status": lambda bk: role(bk, "gpu-devwatch-node-conditions")["rules"][1].update(
            resources=["nodes"]),
        "patch on pods": lambda bk: role(bk, "gpu-devwatch-readiness-gate")["rules"][0]["verbs"].append("patch"),
        "a wildcard": lambda bk: role(bk, "gpu-devwatch-events")["rules"].append(
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}),
        "the gate's role missing": lambda bk: drop(bk, "gpu-devwatch-readiness-gate"),
        "another subject": lambda bk: bk["ClusterRoleBinding"][0]["subjects"].append(
            {"kind": "Group", "name": "system:authenticated"}),
    }
    failures = []
    for what, mutate in cases.items():
        bk = copy.deepcopy(by_kind)
        mutate(bk)
        c = Checker()
        check_rbac(c, bk, pod, ctr, namespace, effective)
        if not c.errors:
            failures.append(f"self-test: check_rbac did not catch: {what}")
    return failures


def report(c, ok_message=""):
    for e in c.errors:
        print(f"daemonset.yaml: {e}", file=sys.stderr)
    if c.errors:
        return 1
    print(ok_message)
    return 0


if __name__ == "__main__":
    sys.exit(main())
