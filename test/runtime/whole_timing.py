#!/usr/bin/python3
"""How long a GPU container went without its GPU after each step of the runtime matrix, counted
from the end of the runtime's apply: pure, from what the whole-watch process saw (when the
container's set of GPU nodes turned denied and allowed again, whole_watch.py) and when the
runtime processes ended (the kernel's sched_process_exit, runtime_exits.py).

Per step (a window from its CRI call, or systemctl call, to the next step):
  - the last denial the watcher saw begins at r (the watcher's join counts, when it found the
    nodes denied) and ends at w, when every node opened again;
  - steps the runtime applies (start, restart, update): from the runtime's exit, t_e, the first
    runtime process that ended in [r, w] (the one that revoked: a grant may come only after
    it), else the last in [step begin, r) (it ended before the watcher saw the denial); the
    figure is w - t_e. None at all: the GPU came back before any runtime process of the step
    ended ("before exit"), i.e. inside the apply. A second figure counts from that
    invocation's end (its parent told, after the kernel tore it down): w minus it, 0 when
    the GPU was back before;
  - systemd's re-applies (set-property, reload): systemd never exits; from the denial, w - r;
  - no denial in the window: "undenied"; still denied at its end: "not whole"; the watcher
    not in the cgroup: "unmeasured".

  whole_timing.py --self-test      checks the rules above on made-up timelines
"""

import sys

RUNTIME_STEPS = ("start", "restart", "update")
SYSTEMD_STEPS = ("set-property", "reload")


class Sample:
    def __init__(self, what, kind, seconds=None, timeline=None, daemon=None, after_end=None):
        self.what, self.kind, self.seconds = what, kind, seconds
        self.daemon = daemon  # the runtime's exit → the daemon's last grant before the GPU was back
        self.after_end = after_end  # the invocation's end (parent told) → whole, 0 if before
        # For a slow one: [(label, t)] from the step's begin (the denial, the exits, the GPU back).
        self.timeline = timeline or []

    def describe(self):
        t0 = self.timeline[0][1] if self.timeline else 0
        return "%s %.2f ms: %s" % (self.what, 1e3 * (self.seconds or 0), ", ".join(
            "%s %+.2f" % (label, 1e3 * (t - t0)) for label, t in self.timeline))

    def __repr__(self):
        return "Sample(%s, %s, %s)" % (self.what, self.kind, self.seconds)


def last_denial(transitions, begin, end):
    """(r, w) of the last denial seen in [begin, end): w None while still denied at `end`;
    None when the window saw none. `transitions`: [(t, 0|1)] in time order."""
    before = [s for t, s in transitions if t < begin]
    inside = [(t, s) for t, s in transitions if begin <= t < end]
    starts = [i for i, (_, s) in enumerate(inside) if s == 0]
    if starts:
        i = starts[-1]
        r = inside[i][0]
        w = next((t for t, s in inside[i + 1:] if s == 1), None)
        return r, w
    if before and before[-1] == 0:  # denied since an earlier window
        w = next((t for t, s in inside if s == 1), None)
        return begin, w
    return None


def runtime_exit(exits, begin, r, w):
    """The end of the apply that revoked (see the module's text), or None."""
    after = [t for t in exits if r <= t <= w]
    if after:
        return after[0]
    before = [t for t in exits if begin <= t < r]
    return before[-1] if before else None


def analyze(steps, end, joined, transitions, exits, names=None, grants=(), ends=None):
    """steps: [(what, begin)] of one container, in order; end: when the watcher left it;
    joined: when it joined (None: never); transitions: [(t, 0|1)]; exits: runtime exits, sorted
    (all of the cell's); names: {exit time: "runc 1234"} for the timelines; grants: the
    daemon's grants (v2: attaches; v1: rule writes), sorted; ends: {exit time: the invocation's end}. → [Sample], one
    per step."""
    names, ends = names or {}, ends or {}
    out = []
    for i, (what, begin) in enumerate(steps):
        stop = steps[i + 1][1] if i + 1 < len(steps) else end
        if joined is None or joined >= stop:
            out.append(Sample(what, "unmeasured"))
            continue
        denial = last_denial(transitions, begin, stop)
        if denial is None:
            out.append(Sample(what, "undenied"))
            continue
        r, w = denial
        if w is None:
            out.append(Sample(what, "not whole"))
        elif what in SYSTEMD_STEPS:
            out.append(Sample(what, "denial", w - r))
        else:
            t_e = runtime_exit(exits, begin, r, w)
            # The grant that made it whole: the daemon's last between the exit and the look
            # (v1 writes a line per device; v2 may swap a scope's program and a sub-cgroup's).
            grant = next((g for g in reversed(grants) if t_e is not None and t_e <= g <= w), None)
            if t_e is None:
                # Back before any exit: the step's exits and the daemon's grants up to the next
                # step tell an early grant (a grant, then the exit) from a lost trace record.
                timeline = sorted([("step", begin), ("denied", r), ("back", w)] +
                                  [("grant", g) for g in grants if begin <= g < stop] +
                                  [("exit " + names.get(t, ""), t) for t in exits if begin <= t < stop],
                                  key=lambda lt: lt[1])
                out.append(Sample(what, "before exit", w - r, timeline))
                continue
            t_end = ends.get(t_e)
            timeline = sorted([("step", begin), ("denied", r), ("back", w)] + ([("grant", grant)] if grant else []) +
                              ([("ended", t_end)] if t_end is not None else []) +
                              [("exit " + names.get(t, ""), t) for t in exits if begin <= t <= w], key=lambda lt: lt[1])
            out.append(Sample(what, "exit", w - t_e, timeline, None if grant is None else grant - t_e,
                              None if t_end is None else max(0.0, w - t_end)))
    return out


def self_test():
    failures = []

    def expect(name, got, want):
        got = [(s.what, s.kind, None if s.seconds is None else round(s.seconds, 6)) for s in got]
        if got != want:
            failures.append("%s: got %s, want %s" % (name, got, want))

    # A start: joined while allowed (v2: no program yet), runc's program denies at 1.010, runc
    # create exits at 1.020 (runc start at 1.030), whole at 1.0203.
    expect("start, joined early",
           analyze([("start", 1.0)], 2.0, 1.001, [(1.001, 1), (1.010, 0), (1.0203, 1)], [1.020, 1.030]),
           [("start", "exit", 0.0003)])
    # Joined after runc create ended and before the grant: the denial is seen from the join.
    expect("start, joined late",
           analyze([("start", 1.0)], 2.0, 1.021, [(1.021, 0), (1.0215, 1)], [1.020, 1.030]),
           [("start", "exit", 0.0015)])
    # Joined after the grant: nothing denied was seen.
    expect("start, joined after the grant",
           analyze([("start", 1.0)], 2.0, 1.025, [(1.025, 1)], [1.020]), [("start", "undenied", None)])
    # A grant inside the apply: whole again before any runtime process of the step ended.
    expect("start, granted inside the apply",
           analyze([("start", 1.0)], 2.0, 1.001, [(1.001, 1), (1.010, 0), (1.012, 1)], [1.020]),
           [("start", "before exit", 0.002)])
    # Its timeline shows the grant, and the exit after the return, up to the next step.
    got = analyze([("start", 1.0), ("update", 2.0)], 3.0, 1.001, [(1.001, 1), (1.010, 0), (1.012, 1)], [1.020, 2.5],
                  {1.020: "crun:7"}, grants=[1.011, 2.6])
    if [lt[0] for lt in got[0].timeline] != ["step", "denied", "grant", "back", "exit crun:7"]:
        failures.append("an early grant's timeline: got %s" % got[0].timeline)
    # An update that does not touch devices, then one that does (crun re-attaches), then a
    # restart's window that ends still denied.
    expect("updates",
           analyze([("start", 1.0), ("update", 2.0), ("update", 3.0)], 4.0, 1.001,
                   [(1.001, 1), (3.005, 0), (3.0091, 1)], [2.010, 3.009]),
           [("start", "undenied", None), ("update", "undenied", None), ("update", "exit", 0.0001)])
    expect("still denied", analyze([("update", 1.0)], 2.0, 0.5, [(0.5, 1), (1.5, 0)], [1.4]),
           [("update", "not whole", None)])
    # systemd's re-apply: from the denial seen; a denial carried over from the step before.
    expect("systemd",
           analyze([("set-property", 1.0), ("reload", 2.0)], 3.0, 0.5, [(0.5, 1), (1.9, 0), (2.0004, 1)], []),
           [("set-property", "not whole", None), ("reload", "denial", 0.0004)])
    # The exit that counts is the first after the denial, not a later one.
    expect("first exit after the denial",
           analyze([("update", 1.0)], 2.0, 0.5, [(0.5, 1), (1.1, 0), (1.3, 1)], [1.05, 1.2, 1.25]),
           [("update", "exit", 0.1)])
    # The daemon's last grant between the exit and the tenant's look splits the time (v1: a
    # write per device); one before the exit, or after the look, is not it.
    got = analyze([("update", 1.0)], 2.0, 0.5, [(0.5, 1), (1.1, 0), (1.3, 1)], [1.2], grants=[1.15, 1.24, 1.25, 1.4])
    if [round(s.daemon, 6) for s in got] != [0.05]:
        failures.append("daemon's part: got %s" % [s.daemon for s in got])
    # From the invocation's end: the teardown after do_exit began is the runtime's; a GPU back
    # before the end counts 0; an end not seen gives none.
    got = analyze([("update", 1.0), ("update", 2.0), ("update", 3.0)], 4.0, 0.5,
                  [(0.5, 1), (1.1, 0), (1.3, 1), (2.1, 0), (2.3, 1), (3.1, 0), (3.3, 1)], [1.2, 2.2, 3.2],
                  ends={1.2: 1.28, 2.2: 2.35})
    if [None if s.after_end is None else round(s.after_end, 6) for s in got] != [0.02, 0.0, None]:
        failures.append("from the end: got %s" % [s.after_end for s in got])
    if ("ended", 1.28) not in got[0].timeline:
        failures.append("the end in the timeline: got %s" % got[0].timeline)
    expect("never joined", analyze([("start", 1.0)], 2.0, None, [], [1.2]), [("start", "unmeasured", None)])
    # The exits that count: invocations that exec'd the runtime, by thread group; not crun's
    # forked helpers (its name, no exec), nor a thread's exit before its group's.
    # Their ends: the SIGCHLD the exited thread group generates; not one from another group,
    # nor another signal, nor one before the exit.
    from runtime_exits import TraceState, parse
    trace = "\n".join([
        "  crun-900 (  900) [001] ..... 10.000100: sched_process_exec: filename=/usr/bin/crun pid=900 old_pid=900",
        "  crun-902 (  902) [001] ..... 10.000200: sched_process_exit: comm=crun pid=902 prio=120 group_dead=true",
        "  crun-902 (  902) [001] d..2. 10.000210: signal_generate: sig=17 errno=0 code=1 comm=crun pid=900 grp=1 res=0",
        "  runc-910 (  910) [000] ..... 10.000300: sched_process_exec: filename=/usr/sbin/runc pid=910 old_pid=910",
        "  runc-911 (  910) [000] d..2. 10.000350: signal_generate: sig=17 errno=0 code=1 comm=shim pid=5 grp=1 res=0",
        "  runc-913 (  910) [000] ..... 10.000400: sched_process_exit: comm=runc pid=913 prio=120 group_dead=false",
        "  runc-914 (  910) [000] ..... 10.000500: sched_process_exit: comm=runc pid=914 prio=120 group_dead=true",
        "  runc-914 (  910) [000] d..2. 10.000550: signal_generate: sig=15 errno=0 code=0 comm=shim pid=5 grp=1 res=0",
        "  crun-900 (  900) [001] ..... 10.000600: sched_process_exit: comm=crun pid=900 prio=120 group_dead=true",
        "  runc-914 (  910) [000] d..2. 10.000900: signal_generate: sig=17 errno=0 code=1 comm=shim pid=5 grp=1 res=0",
        "  gpu-devwatch-50 (   50) [001] ..... 10.001000: sys_bpf(cmd: 8, uattr: 0x7ffd77ef22c0, size: 0x100)",
        "  gpu-devwatch-50 (   50) [001] ..... 10.001100: sys_write(fd: 1e, buf: 7ffce7cc9430, count: a)",
    ])
    state = TraceState()
    grants = []
    got, ends = parse(trace, state, grants)
    if grants != [10.001, 10.0011]:
        failures.append("the daemon's grants (an attach, a rule write): got %s" % grants)
    if got != [(10.0005, "runc", 910), (10.0006, "crun", 900)] or state.execed:
        failures.append("runtime exits: got %s, left %s" % (got, state.execed))
    if ends != {10.0005: 10.0009} or state.awaiting != {900: 10.0006}:
        failures.append("runtime ends: got %s, awaiting %s" % (ends, state.awaiting))
    # The daemon's D-Bus messages (its main thread's sendmsg) and the runtimes' applies of
    # device programs (an invocation that made a bpf() call, from its exec to its exit; a
    # `runc start` makes none): a message inside one is named, one before or after is not.
    from runtime_exits import Calls
    trace = "\n".join([
        "  gpu-devwatch-50 (   50) [001] ..... 20.000050: sys_sendmsg(fd: 7, msg: 7ffd77ef2000, flags: 4040)",
        "  runc-920 (  920) [000] ..... 20.000100: sched_process_exec: filename=/usr/sbin/runc pid=920 old_pid=920",
        "  runc-922 (  920) [000] ..... 20.000200: sys_bpf(cmd: 16, uattr: 0x7ffd77ef22c0, size: 0x40)",
        "  gpu-devwatch-50 (   50) [001] ..... 20.000250: sys_sendmsg(fd: 7, msg: 7ffd77ef2000, flags: 4040)",
        "  gpu-devwatch-51 (   50) [001] ..... 20.000260: sys_sendmsg(fd: 9, msg: 7ffd77ef2000, flags: 4040)",
        "  runc-920 (  920) [000] ..... 20.000300: sched_process_exit: comm=runc pid=920 prio=120 group_dead=true",
        "  runc-930 (  930) [000] ..... 20.000400: sched_process_exec: filename=/usr/sbin/runc pid=930 old_pid=930",
        "  gpu-devwatch-50 (   50) [001] ..... 20.000450: sys_sendmsg(fd: 7, msg: 7ffd77ef2000, flags: 4040)",
        "  runc-930 (  930) [000] ..... 20.000500: sched_process_exit: comm=runc pid=930 prio=120 group_dead=true",
        "  gpu-devwatch-50 (   50) [001] ..... 20.000600: sys_sendmsg(fd: 7, msg: 7ffd77ef2000, flags: 4040)",
    ])
    state, grants, calls = TraceState(), [], Calls()
    got, _ = parse(trace, state, grants, calls)
    if calls.sends != [20.00005, 20.00025, 20.00045, 20.0006] or grants:
        failures.append("the daemon's D-Bus messages: got %s (grants %s)" % (calls.sends, grants))
    if calls.applies != [(20.0001, 20.0003, "runc:920")] or state.appliers:
        failures.append("the runtimes' applies: got %s, left %s" % (calls.applies, state.appliers))
    if calls.sends_inside_applies() != [(20.00025, "runc:920")]:
        failures.append("messages inside an apply: got %s" % calls.sends_inside_applies())
    for f in failures:
        print("FAIL: " + f)
    print("whole_timing self-test: %d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    print(__doc__)
    sys.exit(2)
