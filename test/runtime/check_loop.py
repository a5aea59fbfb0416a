"""`gpu-devwatch check --repair` run again and again beside the pod loop: the matrix's `check`
mode. The daemon only observes then (it writes nothing), so every grant is check's. check has
no probe: it must find a runtime's create or update itself and wait for its end
(app/runtime_apply_wait.h); a grant inside one fails the runtime (runc's "doesn't precisely
match target" on v1, ENOENT on v2's replace) or shows in the tenant's view as the GPU back
before the runtime exited.
"""

import re
import subprocess
import threading

# What check says when a wait for a runtime's apply reached repair.apply_wait_limit.
AT_LIMIT = re.compile(r"^(.*?): (?:repaired though )?(its runtime.*?) after repair\.apply_wait_limit", re.M)


class CheckLoop:
    def __init__(self, binary, config):
        self.binary = binary
        self.config = config
        self.runs = 0
        self.granting_runs = 0  # runs that granted something
        self.failed = {}  # "exit N: first stderr line" -> count (exit 2: check could not run)
        self.at_limit = []  # what still went on when a wait reached the limit
        self._stop = threading.Event()
        self._thread = None

    def start(self):
        self._thread = threading.Thread(target=self._loop, name="check-loop", daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=30)

    def _loop(self):
        while not self._stop.is_set():
            try:
                r = subprocess.run([self.binary, "check", "--repair", "--config", self.config], capture_output=True,
                                   text=True, timeout=60)
            except subprocess.TimeoutExpired:
                self.failed["did not end within 60 s"] = self.failed.get("did not end within 60 s", 0) + 1
                continue
            self.runs += 1
            if "granted " in r.stdout:
                self.granting_runs += 1
            self.at_limit += ["%s: %s" % m for m in AT_LIMIT.findall(r.stdout)]
            if r.returncode not in (0, 1):  # 1: a container needs attention (missing devices, an unknown one)
                key = "exit %d: %s" % (r.returncode, (r.stderr.strip().splitlines() or [""])[0][:160])
                self.failed[key] = self.failed.get(key, 0) + 1

    def report(self):
        return "check --repair runs: %d, of which granted: %d, waits that reached the limit: %d%s%s" % (
            self.runs, self.granting_runs, len(self.at_limit),
            " (%s)" % self.at_limit[0] if self.at_limit else "",
            "".join("; %d x %s" % (n, k) for k, n in sorted(self.failed.items())))
