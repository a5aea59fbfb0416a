#!/usr/bin/env python3
"""Checks the Prometheus operator objects in deploy/kubernetes/ against their sources.

usage: check_prometheus_operator.py SOURCE_DIR [--self-test]

- prometheusrule.yaml must be exactly what scripts/gen-prometheusrule.py writes from
  deploy/prometheus/gpu-devwatch-rules.yaml, and its spec must equal that file's content
  once parsed: the two cannot drift.
- servicemonitor.yaml must select daemonset.yaml's headless Service (labels, namespace,
  port name), name the job "gpu-devwatch" (what the rules expect), keep the metrics' own
  labels (honorLabels) and add `node`.
--self-test also feeds it a rules file changed without regenerating, and a hand-edited
PrometheusRule, and fails unless both are caught.

Exits 77 (a skip for CTest) when PyYAML is not installed.
"""
import importlib.util
import pathlib
import shutil
import sys
import tempfile

try:
    import yaml
except ImportError:
    print("PyYAML is not installed (Debian: python3-yaml): skipping", file=sys.stderr)
    sys.exit(77)

RULES = "deploy/prometheus/gpu-devwatch-rules.yaml"
RULE_OBJECT = "deploy/kubernetes/prometheusrule.yaml"
MONITOR = "deploy/kubernetes/servicemonitor.yaml"
DAEMONSET = "deploy/kubernetes/daemonset.yaml"


def generator(root):
    spec = importlib.util.spec_from_file_location("gen_prometheusrule", root / "scripts/gen-prometheusrule.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def documents(path):
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def check_rule(root, render, errors):
    rules_text = (root / RULES).read_text()
    committed = (root / RULE_OBJECT).read_text()
    if render(rules_text) != committed:
        want = render(rules_text).splitlines()
        have = committed.splitlines()
        line = next((i for i, (a, b) in enumerate(zip(want, have)) if a != b), min(len(want), len(have)))
        errors.append(f"{RULE_OBJECT} is not generated from {RULES} (first difference at line {line + 1}): "
                      f"run scripts/gen-prometheusrule.py")
    docs = documents(root / RULE_OBJECT)
    if len(docs) != 1 or docs[0].get("kind") != "PrometheusRule":
        errors.append(f"{RULE_OBJECT}: expected one PrometheusRule")
        return
    if docs[0].get("spec") != yaml.safe_load(rules_text):
        errors.append(f"{RULE_OBJECT}: spec differs from {RULES} once parsed")


def check_monitor(root, errors):
    by_kind = {}
    for d in documents(root / DAEMONSET):
        by_kind.setdefault(d["kind"], []).append(d)
    service, namespace = by_kind["Service"][0], by_kind["Namespace"][0]["metadata"]["name"]
    monitors = documents(root / MONITOR)
    if len(monitors) != 1 or monitors[0].get("kind") != "ServiceMonitor":
        errors.append(f"{MONITOR}: expected one ServiceMonitor")
        return
    m = monitors[0]
    spec = m.get("spec", {})
    labels = service["metadata"].get("labels", {})
    expect = errors.append
    if m["metadata"].get("namespace") != namespace:
        expect(f"{MONITOR}: not in namespace {namespace}")
    if not spec.get("selector", {}).get("matchLabels", {}).items() <= labels.items():
        expect(f"{MONITOR}: selector does not match Service {service['metadata']['name']}'s labels {labels}")
    if namespace not in spec.get("namespaceSelector", {}).get("matchNames", [namespace]):
        expect(f"{MONITOR}: namespaceSelector does not include {namespace}")
    if labels.get(spec.get("jobLabel")) != "gpu-devwatch":
        expect(f"{MONITOR}: jobLabel {spec.get('jobLabel')} does not name the job gpu-devwatch (the rules' job)")
    ports = {p.get("name") for p in service["spec"].get("ports", [])}
    endpoints = spec.get("endpoints", [])
    if not endpoints:
        expect(f"{MONITOR}: no endpoints")
    for e in endpoints:
        if e.get("port") not in ports:
            expect(f"{MONITOR}: endpoint port {e.get('port')} is not a port of the Service ({sorted(ports)})")
        if e.get("honorLabels") is not True:
            expect(f"{MONITOR}: honorLabels must be true (the metrics' namespace/pod/container labels)")
        if not any(r.get("targetLabel") == "node" and r.get("sourceLabels") == ["__meta_kubernetes_pod_node_name"]
                   for r in e.get("relabelings", [])):
            expect(f"{MONITOR}: no relabelling to `node` (the dashboard's node variable)")


def check(root):
    errors = []
    check_rule(root, generator(root).render, errors)
    check_monitor(root, errors)
    return errors


def self_test(root):
    """A drift in either direction must be caught."""
    failures = []
    for what, path, edit in (("rules changed, not regenerated", RULES, lambda t: t.replace("for: 5m", "for: 6m", 1)),
                             ("PrometheusRule edited by hand", RULE_OBJECT,
                              lambda t: t.replace("severity: critical", "severity: warning", 1))):
        with tempfile.TemporaryDirectory() as tmp:
            copy = pathlib.Path(tmp)
            for rel in (RULES, RULE_OBJECT, MONITOR, DAEMONSET, "scripts/gen-prometheusrule.py"):
                (copy / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(root / rel, copy / rel)
            target = copy / path
            changed = edit(target.read_text())
            assert changed != target.read_text(), what
            target.write_text(changed)
            if not check(copy):
                failures.append(f"self-test: not caught: {what}")
    return failures


def main():
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] != "--self-test"):
        raise SystemExit(__doc__)
    root = pathlib.Path(sys.argv[1])
    errors = check(root)
    if len(sys.argv) == 3:
        errors += self_test(root)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        return 1
    print("prometheusrule.yaml matches the rules file; servicemonitor.yaml selects the headless Service")
    return 0


if __name__ == "__main__":
    sys.exit(main())
