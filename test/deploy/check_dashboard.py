#!/usr/bin/env python3
"""Checks deploy/grafana/gpu-devwatch-dashboard.json the way Grafana and Prometheus would.

usage: check_dashboard.py SOURCE_DIR PROMTOOL

- valid JSON with a uid, a schemaVersion and the datasource, node and instance variables;
- panel ids unique; panels inside the 24-column grid and not overlapping;
- every query targets the ${datasource} variable and filters every gpu_devwatch selector
  by the node and instance variables;
- every query is valid PromQL: they are handed to `promtool check rules` as recording
  rules, with Grafana's variables replaced by what Grafana would send.
"""
import json
import pathlib
import re
import subprocess
import sys
import tempfile

SELECTOR = re.compile(r"\b(gpu_devwatch_[a-z0-9_]*[a-z0-9])(\{[^}]*\})?")
GRAFANA_VARIABLES = {"$__rate_interval": "5m", '"$node"': '".*"', '"$instance"': '".*"'}


def check(doc):
    errors = []
    for key in ("uid", "title", "schemaVersion", "panels", "templating"):
        if key not in doc:
            errors.append(f"dashboard has no '{key}'")
    variables = {v.get("name"): v for v in doc.get("templating", {}).get("list", [])}
    ds = variables.get("datasource", {})
    if ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        errors.append("variable 'datasource' must be a Prometheus datasource variable")
    for name in ("node", "instance"):
        if variables.get(name, {}).get("type") != "query":
            errors.append(f"variable '{name}' missing or not a query variable")

    ids, boxes, queries = set(), [], []
    for panel in doc.get("panels", []):
        title = panel.get("title", "?")
        pid = panel.get("id")
        if pid in ids:
            errors.append(f"panel '{title}': id {pid} used twice")
        ids.add(pid)
        g = panel.get("gridPos", {})
        if not all(isinstance(g.get(k), int) for k in "hwxy"):
            errors.append(f"panel '{title}': gridPos needs integer h, w, x, y")
            continue
        if g["x"] < 0 or g["w"] < 1 or g["x"] + g["w"] > 24:
            errors.append(f"panel '{title}': outside the 24-column grid")
        for other_title, o in boxes:
            if (g["x"] < o["x"] + o["w"] and o["x"] < g["x"] + g["w"]
                    and g["y"] < o["y"] + o["h"] and o["y"] < g["y"] + g["h"]):
                errors.append(f"panel '{title}' overlaps '{other_title}'")
        boxes.append((title, g))
        if panel.get("type") == "row":
            continue
        if panel.get("datasource", {}).get("uid") != "${datasource}":
            errors.append(f"panel '{title}': datasource is not ${{datasource}}")
        targets = panel.get("targets") or []
        if not targets:
            errors.append(f"panel '{title}': no queries")
        for t in targets:
            expr = t.get("expr", "")
            if t.get("datasource", {}).get("uid") != "${datasource}":
                errors.append(f"panel '{title}' query {t.get('refId')}: datasource is not ${{datasource}}")
            selectors = SELECTOR.findall(expr)
            if not selectors:
                errors.append(f"panel '{title}' query {t.get('refId')}: names no gpu_devwatch metric")
            for name, matchers in selectors:
                if 'node=~"$node"' not in matchers or 'instance=~"$instance"' not in matchers:
                    errors.append(f"panel '{title}': {name} is not filtered by $node and $instance")
            queries.append((title, t.get("refId"), expr))
    return errors, queries


def promql_errors(queries, promtool):
    rules = []
    for title, ref, expr in queries:
        for variable, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        if "$" in expr:
            return [f"panel '{title}' query {ref}: unknown variable in {expr}"]
        # The record name carries the panel, so that promtool's message points at it.
        slug = re.sub(r"[^a-z0-9]+", "_", title.lower()).strip("_")
        rules.append({"record": f"dashboard:{slug}:{ref}", "expr": expr})
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        # JSON is YAML: no YAML library needed.
        json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
        f.flush()
        result = subprocess.run([promtool, "check", "rules", f.name], capture_output=True, text=True)
    if result.returncode != 0:
        return ["promtool rejects a dashboard query:\n" + result.stdout + result.stderr]
    return []


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    path = pathlib.Path(sys.argv[1]) / "deploy/grafana/gpu-devwatch-dashboard.json"
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        print(f"{path}: not valid JSON: {e}", file=sys.stderr)
        return 1
    errors, queries = check(doc)
    if not errors:
        errors = promql_errors(queries, sys.argv[2])
    for e in errors:
        print(f"{path.name}: {e}", file=sys.stderr)
    if errors:
        return 1
    print(f"{len(queries)} queries in {len(doc['panels'])} panels: valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
