#!/usr/bin/python3
"""A tenant's view of its GPU, for the runtime matrix: a process of the test's that joins a
container's device cgroup (v2: its cgroup2; v1: its devices cgroup) and keeps opening the GPU
nodes the container must have, every ~50 µs, noting each moment the set turns from all allowed
(ENXIO: no driver) to not (EPERM) and back, on time.monotonic(). It is what a CUDA process in
the container would see, without the container's help.

It joins as soon as the container's cgroup exists (StartContainer creates it in `runc create`),
so that a start's denial and its end are seen. It must leave before the container stops: a
runtime removes the cgroup (and a systemd scope kills what is left in it).

Commands on stdin, one a line; answers on stdout, one JSON line each:
  join <cgroup.procs path>   await that file (up to 10 s), then write the watcher's pid into it
  leave                      back to the cgroups it started in; answers
                             {"joined": t|null, "transitions": [[t, 0|1], ...], "polls": n,
                              "error": text|null}
  quit
"""

import ctypes
import errno
import json
import os
import select
import sys
import time

PR_SET_TIMERSLACK = 29
POLL_S = 20e-6  # between rounds of opens: with timer slack 1 ns, a round every ~50 µs here
JOIN_TIMEOUT_S = 10.0


def allowed(path):
    """Whether the device cgroup lets this process open `path` (a node with no driver)."""
    try:
        os.close(os.open(path, os.O_RDWR | os.O_NONBLOCK))
        return True
    except OSError as e:
        return e.errno == errno.ENXIO


def home_cgroups(root="/sys/fs/cgroup"):
    """{hierarchy dir: cgroup.procs of where this process is now} for devices and unified."""
    homes = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controllers == "":
                homes[os.path.join(root, "unified")] = os.path.join(root, "unified") + path + "/cgroup.procs"
            elif "devices" in controllers.split(","):
                homes[os.path.join(root, "devices")] = os.path.join(root, "devices") + path + "/cgroup.procs"
    return homes


def write_pid(procs):
    with open(procs, "w") as f:
        f.write(str(os.getpid()))


class Watcher:
    def __init__(self, nodes):
        self.nodes = nodes
        self.homes = home_cgroups()
        self.reset()

    def reset(self):
        self.pending = None  # (cgroup.procs, deadline)
        self.joined_procs = None
        self.joined_at = None
        self.transitions = []
        self.state = None
        self.polls = 0
        self.error = None

    def try_join(self, now):
        procs, deadline = self.pending
        try:
            write_pid(procs)
        except FileNotFoundError:
            if now > deadline:
                self.error = "%s did not appear within %.0f s" % (procs, JOIN_TIMEOUT_S)
                self.pending = None
            return
        except OSError as e:
            self.error = "joining %s: %s" % (procs, e)
            self.pending = None
            return
        self.pending = None
        self.joined_procs = procs
        self.joined_at = time.monotonic()

    def poll(self):
        whole = all(allowed(n) for n in self.nodes)
        now = time.monotonic()
        self.polls += 1
        if whole != self.state:
            self.state = whole
            self.transitions.append((now, 1 if whole else 0))

    def leave(self):
        if self.joined_procs:
            for hierarchy, home in self.homes.items():
                if self.joined_procs.startswith(hierarchy + "/"):
                    try:
                        write_pid(home)
                    except OSError as e:  # the test's cleanup kills it where it is
                        self.error = "leaving for %s: %s" % (home, e)
        answer = {"joined": self.joined_at, "transitions": self.transitions, "polls": self.polls,
                  "error": self.error}
        self.reset()
        return answer


def main():
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
    watcher = Watcher(sys.argv[1:])
    buf = b""
    while True:
        busy = watcher.pending is not None or watcher.joined_procs is not None
        ready, _, _ = select.select([0], [], [], POLL_S if busy else None)
        if ready:
            chunk = os.read(0, 4096)
            if not chunk:
                return 0
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                cmd, _, arg = line.decode().partition(" ")
                if cmd == "join":
                    watcher.pending = (arg, time.monotonic() + JOIN_TIMEOUT_S)
                elif cmd == "leave":
                    sys.stdout.write(json.dumps(watcher.leave()) + "\n")
                    sys.stdout.flush()
                elif cmd == "quit":
                    return 0
        if watcher.pending is not None:
            watcher.try_join(time.monotonic())
        if watcher.joined_procs is not None:
            watcher.poll()


class WholeWatch:
    """The test's handle on a watcher process (one container at a time)."""

    def __init__(self, nodes):
        import subprocess
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__)] + list(nodes),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.joining = None

    def join(self, procs):
        self.joining = procs
        self.proc.stdin.write("join %s\n" % procs)
        self.proc.stdin.flush()

    def leave(self):
        """{"joined", "transitions", "polls", "error", "procs"} of the container it was in."""
        self.proc.stdin.write("leave\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the whole-watch process died (exit %s)" % self.proc.poll())
        answer = json.loads(line)
        answer["procs"] = self.joining
        self.joining = None
        return answer

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=5)
            except (OSError, ValueError):
                pass
            except Exception:
                self.proc.kill()
                self.proc.wait()


if __name__ == "__main__":
    sys.exit(main())
