#!/usr/bin/env python3
"""Checks deploy/kubernetes/networkpolicy.yaml against deploy/kubernetes/daemonset.yaml.

usage: check_networkpolicy.py SOURCE_DIR [--self-test]

The policy must select the DaemonSet's pods (same namespace, selector matching the pod
template's labels), and admit ingress only from the monitoring namespace and only on the
container's metrics port. The DaemonSet must not use hostNetwork, where policies do not
apply. --self-test also feeds the check broken variants of the policy (each must be
refused), so that a check that accepts anything fails.

Exits 77 (a skip for CTest) when PyYAML is not installed.
"""
import copy
import pathlib
import sys

try:
    import yaml
except ImportError:
    print("PyYAML is not installed (Debian: python3-yaml): skipping", file=sys.stderr)
    sys.exit(77)

SCRAPER_NAMESPACE = "monitoring"


def load(path):
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def only(docs, kind):
    found = [d for d in docs if d.get("kind") == kind]
    return found[0] if len(found) == 1 else None


def selects(selector, labels):
    """A LabelSelector (matchLabels and matchExpressions) against a label set."""
    if not isinstance(selector, dict):
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def only_scraper_namespace(peer):
    """A peer admits exactly the monitoring namespace: a namespaceSelector naming it by
    kubernetes.io/metadata.name, no ipBlock, no bare podSelector (which means this
    namespace)."""
    if set(peer) - {"namespaceSelector", "podSelector"} or "namespaceSelector" not in peer:
        return False
    ns = peer["namespaceSelector"] or {}
    if ns.get("matchExpressions"):
        return False
    return (ns.get("matchLabels") or {}) == {"kubernetes.io/metadata.name": SCRAPER_NAMESPACE}


def check(policy_docs, daemonset_docs):
    errors = []
    daemonset = only(daemonset_docs, "DaemonSet")
    policy = only(policy_docs, "NetworkPolicy")
    if daemonset is None or policy is None:
        return ["expected exactly one DaemonSet and one NetworkPolicy"]
    pod = daemonset["spec"]["template"]
    pod_labels = pod.get("metadata", {}).get("labels", {})
    container = pod["spec"]["containers"][0]
    named_ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
    metrics_port = named_ports.get("metrics")
    if metrics_port is None:
        return ["the DaemonSet's container has no port named metrics"]

    if pod["spec"].get("hostNetwork"):
        errors.append("the DaemonSet uses hostNetwork: NetworkPolicies do not apply to its pods")
    if policy["metadata"].get("namespace") != daemonset["metadata"].get("namespace"):
        errors.append("the policy is not in the DaemonSet's namespace")
    spec = policy.get("spec", {})
    if not selects(spec.get("podSelector"), pod_labels) or not spec.get("podSelector"):
        errors.append("podSelector does not select the DaemonSet's pods")
    if "Ingress" not in spec.get("policyTypes", ["Ingress"]):
        errors.append("policyTypes does not include Ingress")
    rules = spec.get("ingress")
    if not rules:
        errors.append("no ingress rule: the metrics port could not be scraped at all")
    for i, rule in enumerate(rules or []):
        peers = rule.get("from")
        if not peers or not all(only_scraper_namespace(p) for p in peers):
            errors.append(f"ingress[{i}] admits more than the {SCRAPER_NAMESPACE} namespace")
        ports = rule.get("ports")
        if not ports:
            errors.append(f"ingress[{i}] admits every port")
        for p in ports or []:
            number = named_ports.get(p.get("port"), p.get("port"))
            if number != metrics_port or p.get("protocol", "TCP") != "TCP" or "endPort" in p:
                errors.append(f"ingress[{i}] admits port {p.get('port')} ({p.get('protocol', 'TCP')}), "
                              f"not only the metrics port {metrics_port}/TCP")
    return errors


def mutations(policy_docs):
    """Broken variants the check must refuse: (what, docs)."""
    def variant(edit):
        docs = copy.deepcopy(policy_docs)
        edit(only(docs, "NetworkPolicy")["spec"])
        return docs
    ingress = lambda s: s["ingress"][0]
    return [
        ("any namespace", variant(lambda s: ingress(s)["from"][0].update(namespaceSelector={}))),
        ("an ipBlock", variant(lambda s: ingress(s)["from"].append({"ipBlock": {"cidr": "0.0.0.0/0"}}))),
        ("no from", variant(lambda s: ingress(s).pop("from"))),
        ("every port", variant(lambda s: ingress(s).pop("ports"))),
        ("another port", variant(lambda s: ingress(s)["ports"].append({"protocol": "TCP", "port": 22}))),
        ("a port range", variant(lambda s: ingress(s)["ports"][0].update(port=9000, endPort=9999))),
        ("other pods", variant(lambda s: s.update(podSelector={"matchLabels": {"app": "other"}}))),
        ("no rules", variant(lambda s: s.update(ingress=[]))),
    ]


def main():
    args = sys.argv[1:]
    if len(args) not in (1, 2) or (len(args) == 2 and args[1] != "--self-test"):
        raise SystemExit(__doc__)
    root = pathlib.Path(args[0]) / "deploy/kubernetes"
    try:
        daemonset_docs = load(root / "daemonset.yaml")
        policy_docs = load(root / "networkpolicy.yaml")
    except yaml.YAMLError as e:
        print(f"not valid YAML: {e}", file=sys.stderr)
        return 1
    errors = check(policy_docs, daemonset_docs)
    for e in errors:
        print(f"networkpolicy.yaml: {e}", file=sys.stderr)
    if errors:
        return 1
    if len(args) == 2:
        for what, docs in mutations(policy_docs):
            if not check(docs, daemonset_docs):
                print(f"self-test: a policy admitting {what} passed the check", file=sys.stderr)
                errors.append(what)
        if errors:
            return 1
    print(f"only namespace {SCRAPER_NAMESPACE} may reach the DaemonSet's pods, only on the metrics port")
    return 0


if __name__ == "__main__":
    sys.exit(main())
