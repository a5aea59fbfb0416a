#!/usr/bin/python3
"""Where a v2 repair's time goes, from the kernel's own scheduler tracepoints.

Runs a bench command (by default v2_reaction with the runtime's process, v2 only) while the
kernel records sched_waking / sched_wakeup / sched_switch / sched_process_exit in a trace
instance of its own (tracefs `instances/`, removed at the end), then follows the daemon's
event-loop thread through each of its wake-ups and prints, per kind of wake-up:

  - runtime exit: from the `runc` process's sched_process_exit (the start of its do_exit)
    to the wake-up its pidfd gives the daemon (the kernel tears the process down first);
  - every kind: from the wake-up to the thread on a CPU, the CPU time of the burst that
    follows until it sleeps again, and within that burst the time spent preempted (R: a
    runnable daemon behind another task) and blocked (D: on a kernel lock, such as the
    cgroup mutex a device program attach holds).

Kinds: `runtime exit` (woken by the exiting runc: its pidfd), `probe record` (woken from
hard-IRQ context by the process that attached: the ring buffer's irq_work), `other`.

  bench/wake_trace.py [--] [bench command ...]     # as root; prints figures, asserts nothing

The figures are this machine's at that moment: compare kinds within one run.
"""

import os
import re
import subprocess
import sys

TRACEFS = "/sys/kernel/tracing"
EVENTS = ("sched/sched_switch", "sched/sched_waking", "sched/sched_wakeup", "sched/sched_process_exit")
DEFAULT_BENCH = ["build/bench/v2_reaction", "--versions", "v2", "--samples", "100", "--rounds", "1",
                 "--load-seconds", "1", "--containers", "100", "--gpu-containers", "32", "--runtime-process", "1"]
# With options/record-tgid: "comm-pid (tgid) [cpu] flags timestamp: event: fields".
LINE = re.compile(r"^\s*(.+?)-(\d+)\s+\(\s*(\d+|-+)\)\s+\[(\d+)\]\s+(\S+)\s+([\d.]+): (\w+): (.*)$")
DAEMON_COMM = "gpu-devwatch"


def field(rest, key):
    m = re.search(r"\b" + key + r"=(\S+)", rest)
    return m.group(1) if m else None


def parse(text):
    """Trace lines → ([(time µs, current comm, flags, event, rest)], the daemons' loop threads)."""
    events, loops = [], set()
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            comm, pid, tgid, _cpu, flags, ts, name, rest = m.groups()
            events.append((float(ts) * 1e6, comm, flags, name, rest))
            # The event loop runs on the daemon's main thread (its pid is the process's).
            if comm == DAEMON_COMM and pid == tgid:
                loops.add(int(pid))
    return events, loops


def wake_kind(comm, flags, exited):
    if comm == "runc" and exited:
        return "runtime exit"
    if "h" in flags:
        return "probe record"
    return "other"


class Burst:
    def __init__(self, t_wake, kind, since_exit):
        self.t_wake, self.kind, self.since_exit = t_wake, kind, since_exit
        self.on_cpu_at = None  # first time on a CPU
        self.cpu = self.preempted = self.blocked = 0.0
        self.ran_from = None
        self.off_since = None
        self.off_state = None
        self.preempted_by = {}  # comm → times it took the CPU from the daemon mid-burst


def follow(events, pids):
    """Each wake-up of a loop thread, followed until the thread sleeps again (state S)."""
    bursts, open_bursts, exits, waking, on_cpu = [], {}, {}, {}, set()
    for t, comm, flags, name, rest in events:
        if name == "sched_process_exit" and field(rest, "comm") == "runc":
            exits[int(field(rest, "pid"))] = t
        elif name == "sched_waking" and int(field(rest, "pid")) in pids:
            waking[int(field(rest, "pid"))] = (t, comm, flags)
        elif name == "sched_wakeup" and int(field(rest, "pid")) in pids:
            pid = int(field(rest, "pid"))
            t_wake, waker, wflags = waking.pop(pid, (t, comm, flags))
            if pid in open_bursts:  # woken from a lock inside a burst: counted there
                continue
            exited = max((e for e in exits.values() if e <= t_wake), default=None) if waker == "runc" else None
            kind = wake_kind(waker, wflags, exited is not None and t_wake - exited < 50000)
            b = open_bursts[pid] = Burst(t_wake, kind, t_wake - exited if kind == "runtime exit" else None)
            if pid in on_cpu:  # woken before it had switched out: it runs on
                b.on_cpu_at = b.ran_from = t_wake
        elif name == "sched_switch":
            nxt, prev = int(field(rest, "next_pid")), int(field(rest, "prev_pid"))
            on_cpu.discard(prev)
            if nxt in pids:
                on_cpu.add(nxt)
            if nxt in open_bursts:
                b = open_bursts[nxt]
                if b.on_cpu_at is None:
                    b.on_cpu_at = t
                elif b.off_since is not None:
                    gap = t - b.off_since
                    if b.off_state.startswith("R"):
                        b.preempted += gap
                    else:
                        b.blocked += gap
                    b.off_since = None
                b.ran_from = t
            if prev in open_bursts and open_bursts[prev].ran_from is not None:
                b = open_bursts[prev]
                b.cpu += t - b.ran_from
                b.ran_from = None
                state = field(rest, "prev_state") or "?"
                if state.startswith("S"):
                    bursts.append(open_bursts.pop(prev))
                else:
                    b.off_since, b.off_state = t, state
                    if state.startswith("R"):  # preempted: by whom
                        who = field(rest, "next_comm")
                        b.preempted_by[who] = b.preempted_by.get(who, 0) + 1
    return bursts


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else float("nan")


def report(bursts):
    print("\nthe daemon's event-loop thread, per wake-up (µs): p50 / p90 / p99 / max")
    rows = [("runtime exit → its pidfd wakes the daemon", "runtime exit", lambda b: b.since_exit)]
    for kind in ("runtime exit", "probe record", "other"):
        rows += [("%s: wake-up → on a CPU" % kind, kind, lambda b: b.on_cpu_at - b.t_wake),
                 ("%s: burst CPU time" % kind, kind, lambda b: b.cpu),
                 ("%s: burst preempted (R)" % kind, kind, lambda b: b.preempted),
                 ("%s: burst blocked (D)" % kind, kind, lambda b: b.blocked)]
    for label, kind, value in rows:
        xs = [value(b) for b in bursts if b.kind == kind and b.on_cpu_at is not None]
        if not xs:
            continue
        print("  %-48s n %4d  %8.1f %8.1f %8.1f %8.1f" % (label, len(xs), pct(xs, .5), pct(xs, .9), pct(xs, .99),
                                                           max(xs)))
    for kind in ("runtime exit", "probe record"):
        bs = [b for b in bursts if b.kind == kind and b.on_cpu_at is not None]
        if bs:
            who = {}
            for b in bs:
                for comm, n in b.preempted_by.items():
                    who[comm] = who.get(comm, 0) + n
            top = ", ".join("%s %d" % kv for kv in sorted(who.items(), key=lambda kv: -kv[1])[:4])
            print("  %s: bursts preempted at least once %d of %d (by: %s), blocked %d of %d" % (
                kind, sum(1 for b in bs if b.preempted), len(bs), top or "-", sum(1 for b in bs if b.blocked),
                len(bs)))


def main(argv):
    if os.geteuid() != 0:
        sys.exit("wake_trace: needs root (tracefs)")
    if not os.path.isdir(os.path.join(TRACEFS, "events")):
        subprocess.run(["mount", "-t", "tracefs", "nodev", TRACEFS], check=False)
    inst = os.path.join(TRACEFS, "instances", "gdw-wake-trace-%d" % os.getpid())
    os.mkdir(inst)
    try:
        with open(os.path.join(inst, "buffer_size_kb"), "w") as f:
            f.write("32768\n")
        with open(os.path.join(inst, "options", "record-tgid"), "w") as f:
            f.write("1\n")
        for ev in EVENTS:
            with open(os.path.join(inst, "events", ev, "enable"), "w") as f:
                f.write("1\n")
        bench = argv if argv else DEFAULT_BENCH
        print("bench: " + " ".join(bench), flush=True)
        r = subprocess.run(bench, stdout=subprocess.PIPE, text=True)
        with open(os.path.join(inst, "tracing_on"), "w") as f:
            f.write("0\n")
        with open(os.path.join(inst, "trace")) as f:
            events, pids = parse(f.read())
        print(r.stdout[-4000:])
        print("trace: %d events, %d daemon loop thread(s)" % (len(events), len(pids)))
        report(follow(events, pids))
        return r.returncode
    finally:
        os.rmdir(inst)


if __name__ == "__main__":
    sys.exit(main([a for a in sys.argv[1:] if a != "--"]))
