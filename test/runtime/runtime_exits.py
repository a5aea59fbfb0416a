"""When each runtime invocation ended, from the kernel: a tracefs instance of the test's own
(`instances/gdw-cri-exits-<pid>`, removed at the end; in a tracefs mount of its own where
none is mounted at /sys/kernel/tracing) records every exec of a runc or crun
binary (`sched/sched_process_exec`) and the exit of the last thread of every process named
runc or crun (`sched/sched_process_exit`, `group_dead`), on the CLOCK_MONOTONIC clock
(`trace_clock` mono), which is Python's time.monotonic(). A runtime invocation's exit is the
end of its apply: the daemon may grant only after it.

Only processes that exec'd the binary count (the exit's thread group, `record-tgid`): crun
forks helpers that keep its name and exit while the invocation goes on, and `runc init`
renames itself (runc:[2:INIT]) before it execs the container's command.

The same instance records the daemon's grants as the kernel saw them (its main thread, comm
gpu-devwatch), to tell the daemon's part of a step's time from the tenant's own wait for a
CPU: on v2 its `BPF_PROG_ATTACH` calls, on v1 its writes of a rule line (a `write` of 9 to
63 bytes, not to stdout or stderr: "c 195:0 rw" to devices.allow; its eventfd writes are 8
bytes, and it writes nothing else of that size while a container starts).

It also records what would show the daemon acting through systemd inside a runtime's apply,
which no grant of its own shows: every `sendmsg` of the daemon's main thread (its D-Bus
messages to systemd: in the matrix only `SetUnitProperties` once it runs, and its `Hello` and
`AddMatch` at its start; asked, systemd attaches a new device program to the scope, which
breaks a runc that is between its look at the scope's programs and its own attach), and
every `bpf()` call of a runtime invocation: one that made any is an apply of device programs,
from its exec to its exit (`Calls.applies`).

An exit has two moments. `sched_process_exit` fires as the last thread enters do_exit: the
apply is over (the daemon's probe acts on it too), but the kernel then still tears the process
down (a Go runtime's address space: up to ~1 ms on a 2-vCPU VM) on that CPU, where a tenant
woken meanwhile may wait. Its end is when the kernel tells its parent (the SIGCHLD it
generates, `signal/signal_generate` sig 17 from that thread group): the invocation has
returned, as containerd and kubelet see it. Both are kept.

The instance is read through its `trace_pipe`, which consumes what it returns: an event
recorded while a take() reads is in the next take(), never lost between a read and a clear.
"""

import os
import re
import subprocess
import tempfile

TRACEFS = "/sys/kernel/tracing"
EXIT_EVENT = "sched/sched_process_exit"
EXEC_EVENT = "sched/sched_process_exec"
ATTACH_EVENT = "syscalls/sys_enter_bpf"
RULE_WRITE_EVENT = "syscalls/sys_enter_write"
SIGNAL_EVENT = "signal/signal_generate"
SENDMSG_EVENT = "syscalls/sys_enter_sendmsg"
SIGCHLD = 17
EVENTS = (EXEC_EVENT, EXIT_EVENT, ATTACH_EVENT, RULE_WRITE_EVENT, SIGNAL_EVENT, SENDMSG_EVENT)
BPF_PROG_ATTACH = 8
DAEMON_COMM = "gpu-devwatch"
RUNTIME_COMMS = ("runc", "crun")
# "comm-pid (tgid) [cpu] flags timestamp: event: fields"
LINE = re.compile(r"^\s*(.+?)-(\d+)\s+\(\s*(\d+)\)\s+\[\d+\]\s+\S+\s+([\d.]+): "
                  r"(sched_process_\w+: |sys_bpf\(|sys_write\(|sys_sendmsg\(|signal_generate: )(.*)$")


class TraceState:
    """What parse() keeps across calls: the tgids that exec'd a runtime and have not exited
    (`execed`: tgid → the exec's time), those of them that made a bpf() call (`appliers`),
    and those that exited and whose end has not been seen (`awaiting`: tgid → the exit's
    time)."""

    def __init__(self):
        self.execed = {}
        self.appliers = set()
        self.awaiting = {}


class Calls:
    """What parse() found besides the exits: the daemon's D-Bus messages (`sends`: the times
    of its main thread's sendmsg calls) and the runtimes' applies of device programs
    (`applies`: (exec's time, exit's time, "comm:tgid") of each invocation that made a bpf()
    call)."""

    def __init__(self):
        self.sends = []
        self.applies = []

    def sends_inside_applies(self):
        """[(send's time, the apply's "comm:tgid")] of the sends made while an apply ran."""
        return [(t, who) for t in self.sends for began, ended, who in self.applies if began <= t <= ended]


def parse(text, state, attaches=None, calls=None):
    """Trace text → ([(monotonic seconds, comm, tgid)] of the runtime invocations that exited,
    in order; {exit's time: its end's time} of those whose end was seen). `state`: a
    TraceState; `attaches`: a list that gets the times of the daemon's grants (v2: its
    BPF_PROG_ATTACH calls; v1: its rule writes); `calls`: a Calls that gets the rest."""
    out, ends = [], {}
    for line in text.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        thread_comm, pid, tgid = m.group(1), int(m.group(2)), int(m.group(3))
        t, event, fields = float(m.group(4)), m.group(5).rstrip(": "), m.group(6)
        if event == "sys_bpf(" and thread_comm in RUNTIME_COMMS:
            if tgid in state.execed:
                state.appliers.add(tgid)  # its device programs: an apply
            continue
        if event in ("sys_bpf(", "sys_write("):
            if attaches is not None:
                attaches.append(t)
            continue
        if event == "sys_sendmsg(":
            if calls is not None and pid == tgid:  # the event loop's (sd-bus runs there)
                calls.sends.append(t)
            continue
        if event == "sched_process_exec":
            state.execed[tgid] = t
            continue
        if event == "signal_generate":
            # From an exited invocation's thread group: the parent is told, the exit is done.
            if tgid in state.awaiting and re.search(r"\bsig=%d\b" % SIGCHLD, fields):
                ends[state.awaiting.pop(tgid)] = t
            continue
        comm = re.search(r"comm=(\S+)", fields)
        if event == "sched_process_exit" and "group_dead=true" in fields and comm and tgid in state.execed:
            began = state.execed.pop(tgid)
            state.awaiting[tgid] = t
            out.append((t, comm.group(1), tgid))
            if tgid in state.appliers:
                state.appliers.discard(tgid)
                if calls is not None:
                    calls.applies.append((began, t, "%s:%d" % (comm.group(1), tgid)))
    out.sort()
    return out, ends


class RuntimeExits:
    """start() → (True, "") or (False, why not); take() → the exits since the last take()."""

    def __init__(self):
        self.root = TRACEFS
        self.private_mount = None  # a tracefs mount of the test's own, when none was there
        self.inst = None
        self.active = False
        self.state = TraceState()
        self.pipe = -1  # the instance's trace_pipe, read without blocking
        self.partial = b""  # a line the last read cut short

    def _mount_tracefs(self):
        """The node's tracefs at TRACEFS, or, where nothing mounted it there (systemd mounts it
        at boot; a bare VM's init may not), a mount of the test's own in a temporary directory,
        removed by stop(): the same tracefs, and nothing left behind on the node."""
        if os.path.exists(os.path.join(TRACEFS, "events")):
            return ""
        where = tempfile.mkdtemp(prefix="gdw-tracefs-%d-" % os.getpid())
        done = subprocess.run(["mount", "-t", "tracefs", "tracefs", where], capture_output=True, text=True)
        if done.returncode != 0:
            os.rmdir(where)
            return "no tracefs at %s, and mounting one failed: %s" % (TRACEFS, done.stderr.strip())
        self.private_mount = self.root = where
        return ""

    def _unmount_tracefs(self):
        if self.private_mount is None:
            return
        # Lazily where something still holds it: detached now, gone once let go.
        if any(subprocess.run(cmd + [self.private_mount], capture_output=True).returncode == 0
               for cmd in (["umount"], ["umount", "-l"])):
            os.rmdir(self.private_mount)
        self.private_mount = None

    def _write(self, rel, text):
        with open(os.path.join(self.inst, rel), "w") as f:
            f.write(text)

    def start(self):
        why = self._mount_tracefs()
        if why:
            return False, why
        fmt = os.path.join(self.root, "events", EXIT_EVENT, "format")
        if not os.path.exists(fmt):
            self._unmount_tracefs()
            return False, "no tracefs with %s at %s" % (EXIT_EVENT, self.root)
        with open(fmt) as f:
            if "group_dead" not in f.read():
                self._unmount_tracefs()
                return False, "this kernel's sched_process_exit has no group_dead field (Linux 6.13+)"
        self.inst = os.path.join(self.root, "instances", "gdw-cri-exits-%d" % os.getpid())
        try:
            os.mkdir(self.inst)
        except OSError as e:
            self._unmount_tracefs()
            return False, "cannot make a tracefs instance: %s" % e
        self.active = True
        try:
            self._write("buffer_size_kb", "1024")
            self._write("trace_clock", "mono")
            self._write("options/record-tgid", "1")
            comms = " || ".join('comm == "%s"' % c for c in RUNTIME_COMMS)
            self._write("events/%s/filter" % EXIT_EVENT, "group_dead == 1 && (%s)" % comms)
            self._write("events/%s/filter" % EXEC_EVENT, " || ".join('filename ~ "*/%s"' % c for c in RUNTIME_COMMS))
            self._write("events/%s/filter" % ATTACH_EVENT, '(cmd == %d && comm == "%s") || %s' % (
                BPF_PROG_ATTACH, DAEMON_COMM, comms))
            self._write("events/%s/filter" % SENDMSG_EVENT, 'comm == "%s"' % DAEMON_COMM)
            self._write("events/%s/filter" % RULE_WRITE_EVENT, 'comm == "%s" && fd > 2 && count > 8 && count < 64' % DAEMON_COMM)
            self._write("events/%s/filter" % SIGNAL_EVENT, "sig == %d" % SIGCHLD)
            self.pipe = os.open(os.path.join(self.inst, "trace_pipe"), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            for event in EVENTS:
                self._write("events/%s/enable" % event, "1")
        except OSError as e:
            self.stop()
            return False, "cannot set up the tracefs instance: %s" % e
        return True, ""

    def take(self, attaches=None, calls=None):
        """(The runtime exits since the last take, {exit's time: its end}); the daemon's
        grants go to `attaches`, its D-Bus messages and the runtimes' applies to `calls` (a
        Calls). An end that comes after the take is not counted."""
        if not self.active:
            return [], {}
        exits, ends = parse(self._drain(), self.state, attaches, calls)
        self.state.awaiting.clear()  # its samples are judged now
        return exits, ends

    def _drain(self):
        """The whole lines recorded since the last drain (a cut one waits for its end)."""
        chunks = [self.partial]
        while True:
            try:
                chunk = os.read(self.pipe, 1 << 16)
            except BlockingIOError:
                break  # nothing more recorded now
            if not chunk:
                break
            chunks.append(chunk)
        data = b"".join(chunks)
        cut = data.rfind(b"\n") + 1
        self.partial = data[cut:]
        return data[:cut].decode(errors="replace")

    def stop(self):
        if self.pipe >= 0:
            os.close(self.pipe)  # before the instance's removal, which an open file refuses
            self.pipe = -1
        if not self.active:
            self._unmount_tracefs()
            return
        for event in EVENTS:
            try:
                self._write("events/%s/enable" % event, "0")
            except OSError:
                pass
        try:
            os.rmdir(self.inst)
        except OSError:
            pass
        self.active = False
        self._unmount_tracefs()
