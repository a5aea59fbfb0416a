#!/usr/bin/env python3
"""Points every alert's runbook_url at another copy of docs/alerts.md.

usage: scripts/set-runbook-base.py BASE_URL [SOURCE_DIR]

Each rule's `runbook_url` is BASE_URL#<anchor of the alert's heading in docs/alerts.md>.
This rewrites the base (whatever precedes the '#') in deploy/prometheus/gpu-devwatch-rules.yaml
and in its promtool tests, then regenerates deploy/kubernetes/prometheusrule.yaml
(scripts/gen-prometheusrule.py). The shipped base is a placeholder,
https://github.com/your-org/gpu-devwatch/blob/main/docs/alerts.md. Needs nothing beyond Python 3.
"""
import pathlib
import re
import subprocess
import sys

FILES = ("deploy/prometheus/gpu-devwatch-rules.yaml", "deploy/prometheus/gpu-devwatch-rules.test.yaml")
URL = re.compile(r"^(\s*runbook_url: )(\S+)#([A-Za-z0-9_-]+)$", re.M)


def main():
    if len(sys.argv) not in (2, 3) or not re.match(r"^https?://\S+$", sys.argv[1]) or "#" in sys.argv[1]:
        raise SystemExit(__doc__)
    base = sys.argv[1]
    root = pathlib.Path(sys.argv[2]) if len(sys.argv) == 3 else pathlib.Path(__file__).resolve().parent.parent
    for name in FILES:
        path = root / name
        text, count = URL.subn(lambda m: f"{m.group(1)}{base}#{m.group(3)}", path.read_text())
        if count == 0:
            raise SystemExit(f"{name}: no runbook_url found")
        path.write_text(text)
        print(f"{name}: {count} runbook_url(s) now start with {base}")
    subprocess.run([sys.executable, str(root / "scripts/gen-prometheusrule.py"), str(root)], check=True)


if __name__ == "__main__":
    main()
