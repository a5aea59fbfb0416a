"""When each runtime invocation ended, from the kernel: a tracefs instance of the test's own
(`instances/gdw-cri-exits-<pid>`, removed at the end) records every exec of a runc or crun
binary (`sched/sched_process_exec`) and the exit of the last thread of every process named
runc or crun (`sched/sched_process_exit`, `group_dead`), on the CLOCK_MONOTONIC clock
(`trace_clock` mono), which is Python's time.monotonic(). A runtime invocation's exit is the
end of its apply: the daemon may grant only after it.

Only processes that exec'd the binary count (the exit's thread group, `record-tgid`): crun
forks helpers that keep its name and exit while the invocation goes on, and `runc init`
renames itself (runc:[2:INIT]) before it execs the container's command.

On cgroup v2 the same instance records the daemon's `BPF_PROG_ATTACH` calls (comm
gpu-devwatch): a grant's moment as the kernel saw it, to tell the daemon's part of a step's
time from the tenant's own wait for a CPU.
"""

import os
import re

TRACEFS = "/sys/kernel/tracing"
EXIT_EVENT = "sched/sched_process_exit"
EXEC_EVENT = "sched/sched_process_exec"
ATTACH_EVENT = "syscalls/sys_enter_bpf"
BPF_PROG_ATTACH = 8
DAEMON_COMM = "gpu-devwatch"
RUNTIME_COMMS = ("runc", "crun")
# "comm-pid (tgid) [cpu] flags timestamp: event: fields"
LINE = re.compile(r"^\s*.+?-\d+\s+\(\s*(\d+)\)\s+\[\d+\]\s+\S+\s+([\d.]+): (sched_process_\w+: |sys_bpf\()(.*)$")


def parse(text, execed, attaches=None):
    """Trace text → [(monotonic seconds, comm, tgid)] of the runtime invocations that ended, in
    order. `execed`: the tgids that exec'd a runtime and have not ended, kept across calls;
    `attaches`: a list that gets the daemon's BPF_PROG_ATTACH times."""
    out = []
    for line in text.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        tgid, t, event, fields = int(m.group(1)), float(m.group(2)), m.group(3).rstrip(": "), m.group(4)
        if event == "sys_bpf(":
            if attaches is not None:
                attaches.append(t)
            continue
        if event == "sched_process_exec":
            execed.add(tgid)
            continue
        comm = re.search(r"comm=(\S+)", fields)
        if event == "sched_process_exit" and "group_dead=true" in fields and comm and tgid in execed:
            execed.discard(tgid)
            out.append((t, comm.group(1), tgid))
    out.sort()
    return out


class RuntimeExits:
    """start() → (True, "") or (False, why not); take() → the exits since the last take()."""

    def __init__(self):
        self.inst = os.path.join(TRACEFS, "instances", "gdw-cri-exits-%d" % os.getpid())
        self.active = False
        self.execed = set()

    def _write(self, rel, text):
        with open(os.path.join(self.inst, rel), "w") as f:
            f.write(text)

    def start(self):
        fmt = os.path.join(TRACEFS, "events", EXIT_EVENT, "format")
        if not os.path.exists(fmt):
            return False, "no tracefs with %s at %s" % (EXIT_EVENT, TRACEFS)
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
            self._write("options/record-tgid", "1")
            comms = " || ".join('comm == "%s"' % c for c in RUNTIME_COMMS)
            self._write("events/%s/filter" % EXIT_EVENT, "group_dead == 1 && (%s)" % comms)
            self._write("events/%s/filter" % EXEC_EVENT, " || ".join('filename ~ "*/%s"' % c for c in RUNTIME_COMMS))
            self._write("events/%s/filter" % ATTACH_EVENT, 'cmd == %d && comm == "%s"' % (BPF_PROG_ATTACH, DAEMON_COMM))
            for event in (EXEC_EVENT, EXIT_EVENT, ATTACH_EVENT):
                self._write("events/%s/enable" % event, "1")
        except OSError as e:
            self.stop()
            return False, "cannot set up the tracefs instance: %s" % e
        return True, ""

    def take(self, attaches=None):
        """The runtime exits since the last take; the daemon's attaches go to `attaches`."""
        if not self.active:
            return []
        with open(os.path.join(self.inst, "trace")) as f:
            text = f.read()
        with open(os.path.join(self.inst, "trace"), "w"):
            pass  # opened for writing with O_TRUNC: the buffer is cleared
        return parse(text, self.execed, attaches)

    def stop(self):
        if not self.active:
            return
        for event in (EXIT_EVENT, EXEC_EVENT, ATTACH_EVENT):
            try:
                self._write("events/%s/enable" % event, "0")
            except OSError:
                pass
        try:
            os.rmdir(self.inst)
        except OSError:
            pass
        self.active = False
