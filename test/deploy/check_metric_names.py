#!/usr/bin/env python3
"""Fails when deploy/ names a gpu-devwatch metric that the daemon does not export.

usage: check_metric_names.py SOURCE_DIR

The exported names are those of the rows of the family table in
daemon/metrics/metric_catalogue.cpp ({Id::k..., Type::kCounter, "name", ...}); a histogram exports NAME_bucket, NAME_sum and NAME_count, never
NAME itself. Every gpu_devwatch_* token in the alert rules, their tests and the Grafana
dashboard's queries must be one of those, or be listed in test/deploy/pending-metrics.txt
(metrics being added elsewhere). A pending name that metric_catalogue.cpp now exports is reported
too, so the list shrinks as they land.
"""
import json
import pathlib
import re
import sys

METRIC = re.compile(r"\bgpu_devwatch_[a-z0-9_]*[a-z0-9]")
FAMILY = re.compile(r"Type::k(Counter|Gauge|Histogram),\s*\"([^\"]+)\"")


def exported_names(metrics_cpp):
    text = metrics_cpp.read_text()
    names = set()
    for kind, name in FAMILY.findall(text):
        if kind == "Histogram":
            names.update(name + suffix for suffix in ("_bucket", "_sum", "_count"))
        else:
            names.add(name)
    if not names:
        raise SystemExit(f"{metrics_cpp}: no metric families found (has the table's row style changed?)")
    return names


def pending_names(path):
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(line)
    return names


def dashboard_queries(path):
    """Every PromQL string of the dashboard: panel targets and templating queries."""
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise SystemExit(f"{path}: not valid JSON: {e}")
    found = []

    def walk(node, where):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("expr", "definition") and isinstance(value, str):
                    found.append((where, value))
                elif key == "query" and isinstance(value, str):
                    found.append((where, value))
                else:
                    walk(value, f"{where}.{key}")
        elif isinstance(node, list):
            for i, item in enumerate(node):
                title = item.get("title") or item.get("name") if isinstance(item, dict) else None
                walk(item, f"{where}[{title or i}]")

    walk(doc, "$")
    return found


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    root = pathlib.Path(sys.argv[1])
    exported = exported_names(root / "daemon/metrics/metric_catalogue.cpp")
    pending = pending_names(root / "test/deploy/pending-metrics.txt")

    uses = []  # (file:line or JSON path, name)
    for rel in ("deploy/prometheus/gpu-devwatch-rules.yaml", "deploy/prometheus/gpu-devwatch-rules.test.yaml"):
        for number, line in enumerate((root / rel).read_text().splitlines(), 1):
            uses += [(f"{rel}:{number}", name) for name in METRIC.findall(line)]
    dashboard = "deploy/grafana/gpu-devwatch-dashboard.json"
    queries = dashboard_queries(root / dashboard)
    if not any(METRIC.search(q) for _, q in queries):
        raise SystemExit(f"{dashboard}: no query names a gpu_devwatch metric")
    for where, query in queries:
        uses += [(f"{dashboard} {where}", name) for name in METRIC.findall(query)]

    errors = []
    for where, name in uses:
        if name in exported or name in pending:
            continue
        hint = ""
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        if base + "_bucket" in exported and name == base:
            hint = " (a histogram: use _bucket, _sum or _count)"
        errors.append(f"{where}: {name} is not exported by daemon/metrics/metric_catalogue.cpp{hint}")
    for name in sorted(pending & exported):
        errors.append(f"test/deploy/pending-metrics.txt: {name} is exported now: delete it from the list")
    used = {name for _, name in uses}
    for name in sorted(pending - used):
        errors.append(f"test/deploy/pending-metrics.txt: {name} is used nowhere in deploy/: delete it")

    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        return 1
    print(f"{len(used)} metric names used in deploy/, all exported"
          + (f" or pending ({', '.join(sorted(pending))})" if pending else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
