#!/usr/bin/env python3
"""Writes deploy/kubernetes/prometheusrule.yaml from deploy/prometheus/gpu-devwatch-rules.yaml.

usage: scripts/gen-prometheusrule.py [SOURCE_DIR]   (default: the checkout this script is in)

The PrometheusRule's spec is the rules file itself (its `groups:` on, comments kept),
indented under `spec:`, so the two cannot drift: edit the rules file, run this, commit
both. test/deploy/check_prometheus_operator.py fails when the committed file is not what
this writes. Needs nothing beyond Python 3.
"""
import pathlib
import sys

RULES = "deploy/prometheus/gpu-devwatch-rules.yaml"
OUTPUT = "deploy/kubernetes/prometheusrule.yaml"

HEADER = f"""\
# GENERATED from {RULES} by scripts/gen-prometheusrule.py: do not edit.
# Edit the rules file (and its promtool tests), run the script, commit both.
#
# The alert rules for the Prometheus operator. After daemonset.yaml and servicemonitor.yaml:
#   kubectl apply -f prometheusrule.yaml
# Prometheus picks PrometheusRules by label (spec.ruleSelector; kube-prometheus-stack's
# default wants `release: <its release name>`): add that label below if yours asks for one.
---
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: gpu-devwatch
  namespace: gpu-devwatch
  labels:
    app.kubernetes.io/name: gpu-devwatch
spec:
"""


def render(rules_text):
    """The PrometheusRule for the rules file's text."""
    lines = rules_text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("groups:")), None)
    if start is None:
        raise SystemExit(f"{RULES}: no top-level `groups:` line")
    body = "".join(("  " + line if line.strip() else "") + "\n" for line in lines[start:])
    return HEADER + body


def main():
    root = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent
    text = render((root / RULES).read_text())
    (root / OUTPUT).write_text(text)
    print(f"wrote {OUTPUT} from {RULES}")


if __name__ == "__main__":
    main()
