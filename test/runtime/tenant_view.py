"""A pod loop's tenant view: one whole-watch process (whole_watch.py) that joins each GPU
container as its start creates the cgroup and leaves it before the container stops, the
beginnings of the steps it lived through, and, at each leave, how long each step left the
container without its GPU from the end of the runtime's apply (whole_timing.py, with the
runtime exits the kernel recorded: runtime_exits.py)."""

import time

import whole_timing
from whole_watch import WholeWatch


class TenantView:
    def __init__(self, nodes, exits):
        self.watch = WholeWatch(nodes)
        self.exits = exits  # a started RuntimeExits
        self.seen_exits = []
        self.exit_names = {}
        self.seen_grants = []
        self.steps = []
        self.samples = []  # whole_timing.Sample, every container's
        self.errors = []
        self.polls = 0
        self.joined_seconds = 0.0

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
        grants = []
        for t, comm, pid in self.exits.take(grants):
            self.seen_exits.append(t)
            self.exit_names[t] = "%s:%d" % (comm, pid)
        if answer["error"]:
            self.errors.append(answer["error"])
        joined = answer["joined"]
        if joined is not None:
            self.polls += answer["polls"]
            self.joined_seconds += end - joined
        transitions = [(t, s) for t, s in answer["transitions"]]
        self.seen_grants += grants
        self.samples += whole_timing.analyze(self.steps, end, joined, transitions, self.seen_exits, self.exit_names,
                                             sorted(self.seen_grants))
        self.steps = []
        # Exits older than the next container's steps can no longer count.
        self.seen_exits = []
        self.exit_names = {}
        self.seen_grants = []

    def close(self):
        self.watch.close()

    # --- figures -----------------------------------------------------------------------

    def of(self, kind, what=None):
        return sorted(s.seconds for s in self.samples if s.kind == kind and (what is None or s.what == what))

    def daemon_part(self):
        """v2: the runtime's exit → the daemon's attach, sorted."""
        return sorted(s.daemon for s in self.samples if s.kind == "exit" and s.daemon is not None)

    def count(self, kind):
        return sum(1 for s in self.samples if s.kind == kind)

    def round_us(self):
        """The watcher's mean time between two looks, µs (its resolution)."""
        return 1e6 * self.joined_seconds / self.polls if self.polls else None
