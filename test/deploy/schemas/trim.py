#!/usr/bin/env python3
"""Writes the trimmed schema copies kept in this directory (see README.md).

usage:
  trim.py k8s OUT.json SOURCE_NOTE SPEC.json...   Kubernetes OpenAPI v3 documents
                                                  (api/openapi-spec/v3/*_openapi.json)
  trim.py crd OUT.yaml SOURCE_NOTE CRD.yaml       a CustomResourceDefinition

k8s: keeps, of components.schemas, the schemas of the kinds in KINDS and every schema they
reference, without descriptions. crd: keeps group, names and each served version's
openAPIV3Schema, without descriptions. SOURCE_NOTE (where it came from: repository, path,
commit or tag, date) goes into the file. Only stdlib and PyYAML.
"""
import json
import sys

import yaml

# The kinds deploy/ uses (group, version, kind).
KINDS = {("", "v1", k) for k in ("Namespace", "ResourceQuota", "ServiceAccount", "ConfigMap", "Service", "Secret")}
# Node and Pod: the status fields the admission policy holds unchanged (check_admission_policy.py).
KINDS |= {("", "v1", "Node"), ("", "v1", "Pod")}
KINDS |= {("apps", "v1", "DaemonSet"),
          ("rbac.authorization.k8s.io", "v1", "ClusterRole"), ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
          ("networking.k8s.io", "v1", "NetworkPolicy"),
          ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy"),
          ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding")}
DROP = {"description"}


def strip(node):
    if isinstance(node, dict):
        return {k: (strip(v) if k != "properties" else {p: strip(s) for p, s in v.items()})
                for k, v in node.items() if k not in DROP}
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def refs(node, out):
    if isinstance(node, dict):
        if "$ref" in node:
            out.add(node["$ref"].rsplit("/", 1)[-1])
        for v in node.values():
            refs(v, out)
    elif isinstance(node, list):
        for v in node:
            refs(v, out)


def k8s(out, note, specs):
    schemas = {}
    for path in specs:
        with open(path) as f:
            schemas.update(json.load(f)["components"]["schemas"])
    want = [n for n, s in schemas.items()
            if any((g["group"], g["version"], g["kind"]) in KINDS for g in s.get("x-kubernetes-group-version-kind", []))]
    missing = KINDS - {(g["group"], g["version"], g["kind"]) for n in want
                       for g in schemas[n]["x-kubernetes-group-version-kind"]}
    if missing:
        raise SystemExit(f"not in the given documents: {sorted(missing)}")
    kept, todo = {}, list(want)
    while todo:
        name = todo.pop()
        if name in kept:
            continue
        kept[name] = strip(schemas[name])
        found = set()
        refs(kept[name], found)
        todo += sorted(found - kept.keys())
    with open(out, "w") as f:
        json.dump({"x-source": note, "components": {"schemas": dict(sorted(kept.items()))}}, f, indent=1, sort_keys=True)
        f.write("\n")


def crd(out, note, path):
    with open(path) as f:
        doc = next(d for d in yaml.safe_load_all(f) if d)
    spec = doc["spec"]
    kept = {"group": spec["group"], "names": {"kind": spec["names"]["kind"]}, "scope": spec["scope"],
            "versions": [{"name": v["name"], "openAPIV3Schema": strip(v["schema"]["openAPIV3Schema"])}
                         for v in spec["versions"] if v.get("served", True)]}
    with open(out, "w") as f:
        f.write("".join(f"# {line}\n" for line in note.splitlines()))
        f.write("# Trimmed by trim.py: the CRD's group, kind, scope and each served version's schema, no descriptions.\n")
        yaml.safe_dump(kept, f, sort_keys=True, width=120)


def main():
    if len(sys.argv) < 5 or sys.argv[1] not in ("k8s", "crd"):
        raise SystemExit(__doc__)
    if sys.argv[1] == "k8s":
        k8s(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        crd(sys.argv[2], sys.argv[3], sys.argv[4])


if __name__ == "__main__":
    main()
