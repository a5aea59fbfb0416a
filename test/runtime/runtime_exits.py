"""When each runtime process ended, from the kernel: a tracefs instance of the test's own
(`instances/gdw-cri-exits-<pid>`, removed at the end) records `sched/sched_process_exit` of the
last thread of every process named runc or crun (`group_dead`), on the CLOCK_MONOTONIC clock
(`trace_clock` mono), which is Python's time.monotonic(). That is the end of a runtime's apply:
the daemon may grant only after it.

The runtimes' processes: runc and crun themselves (an old runc from the test's cache is
/usr/sbin/runc there, the wrappers exec them); `runc init` renames itself (runc:[2:INIT]) and
then execs the container's command, so it is never taken for a runtime.
"""

import os
import re

TRACEFS = "/sys/kernel/tracing"
EVENT = "sched/sched_process_exit"
RUNTIME_COMMS = ("runc", "crun")
# "comm-pid [cpu] flags timestamp: sched_process_exit: comm=runc pid=N prio=P group_dead=true"
LINE = re.compile(r"^\s*.+?-\d+\s+(?:\(\s*[\d-]+\)\s+)?\[\d+\]\s+\S+\s+([\d.]+): sched_process_exit: "
                  r"comm=(\S+) pid=(\d+) .*group_dead=(\w+)")


def parse(text):
    """Trace text → [(monotonic seconds, comm, pid)] of the runtime processes that ended, in order."""
    out = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m and m.group(2) in RUNTIME_COMMS and m.group(4) in ("true", "1"):
            out.append((float(m.group(1)), m.group(2), int(m.group(3))))
    out.sort()
    return out


class RuntimeExits:
    """start() → (True, "") or (False, why not); take() → the exits since the last take()."""

    def __init__(self):
        self.inst = os.path.join(TRACEFS, "instances", "gdw-cri-exits-%d" % os.getpid())
        self.active = False

    def _write(self, rel, text):
        with open(os.path.join(self.inst, rel), "w") as f:
            f.write(text)

    def start(self):
        fmt = os.path.join(TRACEFS, "events", EVENT, "format")
        if not os.path.exists(fmt):
            return False, "no tracefs with %s at %s" % (EVENT, TRACEFS)
        with open(fmt) as f:
            if "group_dead" not in f.read():
                return False, "this kernel's sched_process_exit has no group_dead field (Linux 6.13+)"
        try:
            os.mkdir(self.inst)
        except OSError as e:
            return False, "cannot make a tracefs instance: %s" % e
        self.active = True
        try:
            self._write("buffer_size_kb", "1024")
            self._write("trace_clock", "mono")
            comms = " || ".join('comm == "%s"' % c for c in RUNTIME_COMMS)
            self._write("events/%s/filter" % EVENT, "group_dead == 1 && (%s)" % comms)
            self._write("events/%s/enable" % EVENT, "1")
        except OSError as e:
            self.stop()
            return False, "cannot set up the tracefs instance: %s" % e
        return True, ""

    def take(self):
        if not self.active:
            return []
        with open(os.path.join(self.inst, "trace")) as f:
            text = f.read()
        with open(os.path.join(self.inst, "trace"), "w"):
            pass  # opened for writing with O_TRUNC: the buffer is cleared
        return parse(text)

    def stop(self):
        if not self.active:
            return
        try:
            self._write("events/%s/enable" % EVENT, "0")
        except OSError:
            pass
        try:
            os.rmdir(self.inst)
        except OSError:
            pass
        self.active = False
