"""A pod loop's tenant view: one whole-watch process (whole_watch.py) that joins each GPU
container as its start creates the cgroup and leaves it before the container stops, the
beginnings of the steps it lived through, and, at each leave, how long each step left the
container without its GPU from the end of the runtime's apply (whole_timing.py, with the
runtime exits the kernel recorded: runtime_exits.py)."""

import time

import whole_timing
from pod_loop import percentile
from runtime_exits import Calls
from whole_watch import WholeWatch


def ms(x):
    return "-" if x is None else "%.1f" % (x * 1000)


def p50_p99(xs):
    """'p50/p99' in ms of sorted `xs`."""
    return "%s/%s" % (ms(percentile(xs, 50)), ms(percentile(xs, 99)))


class TenantView:
    def __init__(self, nodes, exits):
        self.watch = WholeWatch(nodes)
        self.exits = exits  # a started RuntimeExits
        self.steps = []
        self.samples = []  # whole_timing.Sample, every container's
        self.errors = []
        self.polls = 0
        self.joined_seconds = 0.0
        self.calls = Calls()  # the daemon's D-Bus messages and the runtimes' applies, all steps'

    def step(self, what):
        """A step begins now (call it before the CRI or systemctl call)."""
        self.steps.append((what, time.monotonic()))

    def join(self, procs):
        self.watch.join(procs)

    def leave(self):
        """Before the container stops: the watcher leaves, and its steps are judged."""
        if not self.steps:
            return
        answer = self.watch.leave()
        end = time.monotonic()
        # Everything since the last leave: older exits and grants cannot fall in these steps.
        grants = []
        exits, ends = self.exits.take(grants, self.calls)
        if answer["error"]:
            self.errors.append(answer["error"])
        joined = answer["joined"]
        if joined is not None:
            self.polls += answer["polls"]
            self.joined_seconds += end - joined
        self.samples += whole_timing.analyze(self.steps, end, joined, answer["transitions"], [t for t, _, _ in exits],
                                             {t: "%s:%d" % (comm, pid) for t, comm, pid in exits}, sorted(grants),
                                             ends)
        self.steps = []

    def close(self):
        self.watch.close()

    # --- figures -----------------------------------------------------------------------

    def of(self, kind, what=None):
        return sorted(s.seconds for s in self.samples if s.kind == kind and (what is None or s.what == what))

    def daemon_part(self):
        """The runtime's exit → the daemon's grant (v2: its attach; v1: its last rule write), sorted."""
        return sorted(s.daemon for s in self.samples if s.kind == "exit" and s.daemon is not None)

    def after_end(self):
        """The invocation's end (its parent told) → whole, sorted."""
        return sorted(s.after_end for s in self.samples if s.kind == "exit" and s.after_end is not None)

    def count(self, kind):
        return sum(1 for s in self.samples if s.kind == kind)

    def round_us(self):
        """The watcher's mean time between two looks, µs (its resolution)."""
        return 1e6 * self.joined_seconds / self.polls if self.polls else None

    def report(self):
        """The cell's lines about the tenant's view."""
        exits = self.of("exit")
        by_step = ", ".join("%s %s (%d)" % (what, p50_p99(self.of("exit", what)), len(self.of("exit", what)))
                            for what in ("start", "update", "restart") if self.of("exit", what))
        lines = ["tenant's view, GPU back after the runtime's exit (p50/p99/max ms, n): %s/%s (%d)%s; never denied %d; "
                 "back before the runtime's exit %d; still denied %d; not watched %d; a look every %s µs" % (
                     p50_p99(exits), ms(exits[-1] if exits else None), len(exits),
                     " [" + by_step + "]" if by_step else "", self.count("undenied"), self.count("before exit"),
                     self.count("not whole"), self.count("unmeasured"),
                     "-" if self.round_us() is None else "%.0f" % self.round_us())]
        after_end = self.after_end()
        if after_end:
            lines.append("from the runtime's end instead (the kernel has torn it down and tells its parent: the "
                         "invocation returns; p50/p99/max ms, n): %s/%s (%d)" % (
                             p50_p99(after_end), ms(after_end[-1]), len(after_end)))
        daemon = self.daemon_part()
        if daemon:
            lines.append("of which the daemon's part (the runtime's exit → its grant as the kernel saw it: v2 its "
                         "BPF_PROG_ATTACH, v1 its last rule write; p50/p99/max ms, n): %s/%s (%d); the rest is the tenant's wait for a CPU (among others, behind "
                         "the exiting runtime's teardown)" % (
                             p50_p99(daemon), ms(daemon[-1]), len(daemon)))
        inside = self.calls.sends_inside_applies()
        if self.calls.sends:  # (a message inside an apply is one of them)
            # By comm: in check mode also those of `check --repair` (the daemon observes).
            lines.append("gpu-devwatch's D-Bus messages to systemd: %d; inside a runtime's apply of device programs "
                         "(its exec to its exit, %d applies): %d%s" % (
                             len(self.calls.sends), len(self.calls.applies), len(inside),
                             " (" + ", ".join(who for _, who in inside[:3]) + ")" if inside else ""))
        denials = self.of("denial")
        if denials or any(s.what in whole_timing.SYSTEMD_STEPS for s in self.samples):
            lines.append("systemd's re-applies (set-property, daemon-reload): denied %d times, back after "
                         "(p50/p99 ms) %s" % (len(denials), p50_p99(denials)))
        slow = sorted((s for s in self.samples if s.kind == "exit" and s.seconds > 1e-3), key=lambda s: -s.seconds)
        lines += ["over 1 ms (ms from the step's call): " + s.describe() for s in slow[:3]]
        lines += ["back before the runtime's exit (ms from the step's call): " + s.describe()
                  for s in self.samples if s.kind == "before exit"][:3]
        lines += ["watcher: " + e for e in sorted(set(self.errors))[:3]]
        return lines
