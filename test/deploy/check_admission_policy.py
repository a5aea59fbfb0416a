#!/usr/bin/env python3
"""deploy/kubernetes/admission-policy.yaml against the daemon, the DaemonSet and the schema.

usage: check_admission_policy.py SOURCE_DIR [--self-test]

The ValidatingAdmissionPolicies that narrow what RBAC cannot: two policies (node status,
pod gate), each failing closed, matching UPDATE of exactly its status subresource, for
exactly the DaemonSet's ServiceAccount, keyed on the authentication.kubernetes.io/node-name
claim and comparing it with the node's name (node) or the pod's spec.nodeName (pod); the
node policy's own condition types are exactly those daemon/kube/conditions.cpp writes and
the pod policy's the gate of daemon/kube/pod_gates.h; every status field of the oldest kept
Kubernetes schema (test/deploy/schemas/kubernetes-1.30.json) but conditions is held
unchanged, and no field that schema lacks is named (a 1.30 API server could not compile
it); each policy has one binding that denies. The CEL is run by check_admission_cel.py.
--self-test also feeds it broken copies.

Exits 77 (a skip for CTest) when PyYAML is not installed.
"""
import copy
import json
import pathlib
import re
import sys

try:
    import yaml
except ImportError:
    print("PyYAML is not installed (Debian: python3-yaml): skipping", file=sys.stderr)
    sys.exit(77)

CLAIM = "authentication.kubernetes.io/node-name"
SCHEMA = "test/deploy/schemas/kubernetes-1.30.json"
POLICIES = {"nodes/status": "io.k8s.api.core.v1.NodeStatus", "pods/status": "io.k8s.api.core.v1.PodStatus"}


def text_of(policy):
    """Every CEL expression and message of a policy, as one text."""
    spec = policy["spec"]
    parts = [m["expression"] for m in spec.get("matchConditions", [])]
    parts += [v["expression"] for v in spec.get("variables", [])]
    parts += [v["expression"] for v in spec.get("validations", [])]
    return "\n".join(parts)


def check(docs, sa_user, own_types, gate, status_fields):
    errors = []
    policies = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    bindings = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    seen = set()
    for p in policies:
        name, spec = p["metadata"]["name"], p["spec"]
        rules = spec.get("matchConstraints", {}).get("resourceRules", [])
        resources = sorted({r for rule in rules for r in rule.get("resources", [])})
        if len(resources) != 1 or resources[0] not in POLICIES:
            errors.append(f"{name}: must match exactly one of {sorted(POLICIES)}, matches {resources}")
            continue
        resource = resources[0]
        seen.add(resource)
        if any(rule.get("operations") != ["UPDATE"] or rule.get("apiGroups") != [""] for rule in rules):
            errors.append(f"{name}: must match UPDATE (a PATCH is one) of the core group only")
        if spec.get("failurePolicy") != "Fail":
            errors.append(f"{name}: failurePolicy must be Fail (an expression that errs denies)")
        conditions = [m["expression"] for m in spec.get("matchConditions", [])]
        if conditions != [f"request.userInfo.username == '{sa_user}'"]:
            errors.append(f"{name}: must match only {sa_user}, matches {conditions}")
        text = text_of(p)
        if f"request.userInfo.extra['{CLAIM}']" not in text:
            errors.append(f"{name}: does not read the {CLAIM} claim")
        validations = [v["expression"] for v in spec.get("validations", [])]
        subject = "object.metadata.name" if resource == "nodes/status" else "oldObject.spec.nodeName"
        if not any(f"{subject} == variables.nodeName" in v for v in validations):
            errors.append(f"{name}: no validation compares {subject} with the claim")
        if "variables.nodeName != ''" not in validations:
            errors.append(f"{name}: a request without the claim must be refused (variables.nodeName != '')")
        named = set(re.findall(r"(?<![A-Za-z])object\.status\.(\w+)", text))
        want = status_fields[resource] - {"conditions"}
        if want - named:
            errors.append(f"{name}: status fields not held unchanged: {sorted(want - named)}")
        if named - status_fields[resource]:
            errors.append(f"{name}: names status fields Kubernetes 1.30 lacks: {sorted(named - status_fields[resource])}")
        for field in ("labels", "annotations", "ownerReferences", "finalizers"):
            if f"object.metadata.{field} ==" not in " ".join(validations).replace("\n", " ") and \
                    f"object.metadata.{field} : " not in text:
                errors.append(f"{name}: metadata.{field} not held unchanged")
        listed = set(re.findall(r"'([A-Za-z./-]+)'", " ".join(v["expression"] for v in spec.get("variables", [])
                                                            if v["name"] in ("ownTypes", "gate"))))
        expected = own_types if resource == "nodes/status" else {gate}
        if listed != expected:
            errors.append(f"{name}: own condition types {sorted(listed)}, the daemon writes {sorted(expected)}")
        mine = [b for b in bindings if b["spec"].get("policyName") == name]
        if len(mine) != 1 or mine[0]["spec"].get("validationActions") != ["Deny"]:
            errors.append(f"{name}: needs exactly one binding with validationActions [Deny]")
    if seen != set(POLICIES):
        errors.append(f"policies for {sorted(seen)}, expected one each for {sorted(POLICIES)}")
    for b in bindings:
        if b["spec"].get("policyName") not in {p["metadata"]["name"] for p in policies}:
            errors.append(f"binding {b['metadata']['name']} names no policy of this file")
    return errors


def self_test(docs, *args):
    def node_policy(ds):
        return next(d for d in ds if d["kind"] == "ValidatingAdmissionPolicy"
                    and "nodes/status" in d["spec"]["matchConstraints"]["resourceRules"][0]["resources"])

    def drop_validation(ds, needle):
        p = node_policy(ds)
        p["spec"]["validations"] = [v for v in p["spec"]["validations"] if needle not in v["expression"]]

    def edit_validations(ds, old, new):
        for v in node_policy(ds)["spec"]["validations"]:
            v["expression"] = v["expression"].replace(old, new)

    cases = {
        "the node-name comparison dropped": lambda ds: drop_validation(ds, "object.metadata.name =="),
        "a status field left free": lambda ds: edit_validations(ds, "object.status.capacity", "object.status.phase"),
        "a 1.31 field named": lambda ds: edit_validations(ds, "object.status.volumesInUse ==", "object.status.features =="),
        "another ServiceAccount": lambda ds: node_policy(ds)["spec"]["matchConditions"][0].update(
            expression="request.userInfo.username == 'system:serviceaccount:default:default'"),
        "an own type missing": lambda ds: node_policy(ds)["spec"]["variables"][1].update(
            expression="['GPUDeviceAccessDegraded', 'GPUAllocationRecordStale']"),
        "a binding that only warns": lambda ds: next(d for d in ds if d["kind"] == "ValidatingAdmissionPolicyBinding")[
            "spec"].update(validationActions=["Warn"]),
        "failurePolicy Ignore": lambda ds: node_policy(ds)["spec"].update(failurePolicy="Ignore"),
    }
    failures = []
    for what, mutate in cases.items():
        ds = copy.deepcopy(docs)
        mutate(ds)
        if not check(ds, *args):
            failures.append(f"self-test: not caught: {what}")
    return failures


def main():
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    root = pathlib.Path(sys.argv[1])
    docs = [d for d in yaml.safe_load_all((root / "deploy/kubernetes/admission-policy.yaml").read_text()) if d]
    ds = [d for d in yaml.safe_load_all((root / "deploy/kubernetes/daemonset.yaml").read_text()) if d]
    sa = next(d for d in ds if d["kind"] == "ServiceAccount")["metadata"]
    sa_user = f"system:serviceaccount:{sa['namespace']}:{sa['name']}"
    conditions = (root / "daemon/kube/conditions.cpp").read_text()
    own_types = set(re.findall(r'case NodeConditionType::\w+: return "(\w+)";', conditions))
    gate = re.search(r'kReadinessGate = "([^"]+)"', (root / "daemon/kube/pod_gates.h").read_text()).group(1)
    schemas = json.loads((root / SCHEMA).read_text())["components"]["schemas"]
    status_fields = {r: set(schemas[s]["properties"]) for r, s in POLICIES.items()}
    args = (sa_user, own_types, gate, status_fields)
    errors = [] if len(own_types) == 3 else [f"daemon/kube/conditions.cpp: expected 3 condition types, found {own_types}"]
    errors += check(docs, *args)
    if "--self-test" in sys.argv[2:]:
        errors += self_test(docs, *args)
    for e in errors:
        print(f"admission-policy.yaml: {e}", file=sys.stderr)
    if errors:
        return 1
    print(f"{len(docs)} objects: {sa_user} may patch only its own node's {sorted(own_types)} and its own"
          f" node's pods' {gate}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
