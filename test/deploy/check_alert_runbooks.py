#!/usr/bin/env python3
"""Every alert links to its runbook: a `runbook_url` into docs/alerts.md.

usage: check_alert_runbooks.py SOURCE_DIR [--self-test]

In deploy/prometheus/gpu-devwatch-rules.yaml every alerting rule has a `runbook_url`
annotation (and no `runbook` text: that lives in docs/alerts.md), all of them share one
base (what precedes '#', changed with scripts/set-runbook-base.py), and each URL's anchor is
the anchor GitHub gives that alert's own heading in docs/alerts.md. docs/alerts.md has a
section for each alert and none for an alert that does not exist. --self-test also feeds
it broken rules and checks each is caught.

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

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "docs"))
from check_links import github_slug  # noqa: E402  (the anchors unit.docs_links resolves)

RULES = "deploy/prometheus/gpu-devwatch-rules.yaml"
DOC = "docs/alerts.md"


def alert_headings(doc_text):
    """The `## ` headings of docs/alerts.md outside code blocks."""
    headings, fenced = [], False
    for line in doc_text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("## "):
            headings.append(line[3:].strip())
    return headings


def check(rules, doc_text):
    errors = []
    headings = alert_headings(doc_text)
    anchors = {github_slug(h) for h in headings}
    alerts = [r for g in rules.get("groups", []) for r in g.get("rules", []) if "alert" in r]
    if not alerts:
        errors.append(f"{RULES}: no alerting rules")
    bases = set()
    for rule in alerts:
        name, annotations = rule["alert"], rule.get("annotations") or {}
        if "runbook" in annotations:
            errors.append(f"{name}: a `runbook` annotation; its text belongs in {DOC}, the rule links to it")
        url = annotations.get("runbook_url")
        if not url:
            errors.append(f"{name}: no runbook_url annotation")
            continue
        base, sep, anchor = str(url).partition("#")
        bases.add(base)
        if not sep or not base.startswith(("https://", "http://")):
            errors.append(f"{name}: runbook_url {url} is not http(s)://BASE#ANCHOR")
        elif anchor != github_slug(name):
            errors.append(f"{name}: runbook_url's anchor #{anchor} is not its own heading's #{github_slug(name)}")
        elif anchor not in anchors:
            errors.append(f"{name}: runbook_url's anchor #{anchor} is not a heading of {DOC}")
    if len(bases) > 1:
        errors.append(f"runbook_url bases differ (scripts/set-runbook-base.py sets one): {sorted(bases)}")
    names = {r["alert"] for r in alerts}
    for h in headings:
        if h.startswith("GpuDevwatch") and h not in names:
            errors.append(f"{DOC}: section {h} names no alert of {RULES}")
    return errors


def self_test(rules, doc_text):
    """Each broken copy must be caught."""
    def first(rs):
        return next(r for g in rs["groups"] for r in g["rules"] if "alert" in r)

    def set_url(rs, url):
        first(rs)["annotations"]["runbook_url"] = url

    cases = {
        "a missing runbook_url": lambda rs, d: (first(rs)["annotations"].pop("runbook_url"), d)[1],
        "runbook text left in the rule": lambda rs, d: (first(rs)["annotations"].update(runbook="do this"), d)[1],
        "an anchor with no heading": lambda rs, d: (set_url(rs, "https://x.example/alerts.md#gpudevwatchnosuch"), d)[1],
        "another alert's anchor": lambda rs, d: (set_url(rs, first(rs)["annotations"]["runbook_url"].split("#")[0]
                                                         + "#gpudevwatchabsent"), d)[1],
        "two bases": lambda rs, d: (set_url(rs, "https://other.example/alerts.md#" + github_slug(first(rs)["alert"])), d)[1],
        "the section removed": lambda rs, d: d.replace(f"## {first(rs)['alert']}\n", "## Removed\n"),
        "a section for no alert": lambda rs, d: d + "\n## GpuDevwatchGone\n",
    }
    failures = []
    for what, mutate in cases.items():
        rs = copy.deepcopy(rules)
        d = mutate(rs, doc_text)
        if not check(rs, d):
            failures.append(f"self-test: not caught: {what}")
    return failures


def main():
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    root = pathlib.Path(sys.argv[1])
    rules = yaml.safe_load((root / RULES).read_text())
    doc_text = (root / DOC).read_text()
    errors = check(rules, doc_text)
    if "--self-test" in sys.argv[2:]:
        errors += self_test(rules, doc_text)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        return 1
    n = sum(1 for g in rules["groups"] for r in g["rules"] if "alert" in r)
    print(f"{n} alerts, each with a runbook_url into its own section of {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
