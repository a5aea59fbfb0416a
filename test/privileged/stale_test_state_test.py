#!/usr/bin/env python3
"""privileged.stale_test_state: what a killed test run leaves is removed, and nothing else.

Plays a run that was SIGKILLed: cgroups named for a pid that is gone (v2, v1 devices, and a
frozen v1 freezer cgroup) with live processes of this test still inside, a tracefs instance
still tracing (found with no tracefs mounted where the node has none), runc's state of a
container in the dead run's tree, a tracefs mount, a matrix temp dir with a tmpfs and a bind
mount of a directory outside it, a containerd shim of that run's containerd and the daemon
it ran from that dir. Beside them, the same kinds of state of a run that is alive (this
process), and a cgroup whose name only looks like a test's. Then runs
test/support/stale_test_state.py as scripts/test.sh does and checks what a user would: the dead
run's state gone and its processes killed; the live run's state, its process and the files
behind the bind mount untouched. Exits 77 (skipped) without root or without cgroup2."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SWEEPER = os.path.join(HERE, "..", "support", "stale_test_state.py")
CG = "/sys/fs/cgroup"
failures = []


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def v2_root():
    return CG if os.path.exists(os.path.join(CG, "cgroup.procs")) else os.path.join(CG, "unified")


def sleeper_in(*cgroup_dirs):
    """A process of this test's, moved into each cgroup dir (one per hierarchy)."""
    p = subprocess.Popen(["sleep", "600"])
    for d in cgroup_dirs:
        write(os.path.join(d, "cgroup.procs"), str(p.pid))
    return p


def dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def sweep(runc_root, *extra):
    r = subprocess.run([sys.executable, SWEEPER, "--runc-root", runc_root] + list(extra),
                       capture_output=True, text=True, timeout=60)
    print(r.stdout + r.stderr, end="")
    return r


def node_tracefs():
    for root in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
        if os.path.isdir(os.path.join(root, "instances")):
            return root
    return None


def tracefs_view(made):
    """The node's tracefs, or a mount of this test's own where the node has none."""
    root = node_tracefs()
    if root:
        return root
    where = tempfile.mkdtemp(prefix="gdw-tracefs-%d-" % os.getpid())
    subprocess.run(["mount", "-t", "tracefs", "tracefs", where], check=True)
    made.append(("umount", where))
    return where


def mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


class Scene:
    """What the test made, to check and to undo whatever the sweeper did."""

    def __init__(self):
        self.dead, self.me = dead_pid(), os.getpid()
        self.v2 = v2_root()
        hybrid = self.v2 != CG
        self.devices = os.path.join(CG, "devices") if hybrid and os.path.isdir(os.path.join(CG, "devices")) else None
        self.freezer = os.path.join(CG, "freezer") if hybrid and os.path.isdir(os.path.join(CG, "freezer")) else None
        self.procs = {}  # name → a sleeper of this test's
        # ("cg", tree), ("umount", mount point), ("instances", names), ("tree", a temp dir)
        self.made = []
        self.dead_cgroups = {}  # what → the dead run's cgroup
        self.instances = ("gdw-cri-exits-%d" % self.dead, "gdw-wake-trace-%d" % self.me)
        self.runc_root = tempfile.mkdtemp(prefix="gdw-stale-runc-%d-" % self.me)
        self.made.append(("tree", self.runc_root))

    def cgroup(self, root, name, sub=""):
        top = os.path.join(root, name)
        os.makedirs(os.path.join(top, sub) if sub else top)
        self.made.append(("cg", top))
        return top

    def make_cgroups(self):
        """The dead run's cgroups, each with a live process of this test's inside (a frozen
        one in v1's freezer); this run's own; a name that only looks like a test's."""
        d = self.dead
        self.dead_cgroups["cgroup2"] = self.cgroup(self.v2, "gdw-test-%d-0" % d, "a/b")
        dirs = [os.path.join(self.dead_cgroups["cgroup2"], "a", "b")]
        if self.devices:
            self.dead_cgroups["v1 devices"] = self.cgroup(self.devices, "gdw-test-cri-%d" % d, "kubepods")
            dirs.append(os.path.join(self.dead_cgroups["v1 devices"], "kubepods"))
        self.procs["dead"] = sleeper_in(*dirs)
        if self.freezer:
            frozen = self.dead_cgroups["v1 freezer, frozen"] = self.cgroup(self.freezer, "gdw-test-%d-1" % d)
            self.procs["frozen"] = sleeper_in(frozen)
            write(os.path.join(frozen, "freezer.state"), "FROZEN")
        self.dead_cgroups["cgroup2, the matrix's"] = self.cgroup(self.v2, "gdw-test-cri-%d" % d)
        # runc's state of a container that was in the dead matrix run's tree, and of one that
        # was not (a tree whose name only starts like it).
        self.dead_state = runc_state(self.runc_root, "dead", "%s/gdw-test-cri-%d/kubepods/p/c" % (self.v2, d))
        self.other_state = runc_state(self.runc_root, "other", "%s/gdw-test-cri-%d0/kubepods/p/c" % (self.v2, d))
        self.live = self.cgroup(self.v2, "gdw-test-%d-stale-live" % self.me)
        self.lookalike = self.cgroup(self.v2, "gdw-test-%dx" % d)
        self.procs["live"] = sleeper_in(self.live)

    def make_instances(self):
        """The dead run's tracefs instance and this run's, both tracing."""
        view = tracefs_view(self.made)
        for name in self.instances:
            inst = os.path.join(view, "instances", name)
            os.mkdir(inst)
            write(os.path.join(inst, "set_event"), "sched:sched_process_exit")
            write(os.path.join(inst, "tracing_on"), "1")
        self.made.append(("instances", self.instances))
        if view != node_tracefs():
            # Nothing on the node shows the instances now, as after a run killed once it had
            # unmounted its view: the sweeper has to look through one of its own.
            subprocess.run(["umount", view], check=True)
            os.rmdir(view)

    def make_tmp_state(self):
        """The dead run's tracefs mount, and its matrix dir with a tmpfs in it and a directory
        from outside bound into it."""
        self.dead_mount = tempfile.mkdtemp(prefix="gdw-tracefs-%d-" % self.dead)
        subprocess.run(["mount", "-t", "tracefs", "tracefs", self.dead_mount], check=True)
        self.made.append(("umount", self.dead_mount))
        self.matrix = m = tempfile.mkdtemp(prefix="gdw-cri-matrix-%d-" % self.dead)
        self.outside = tempfile.mkdtemp(prefix="gdw-stale-outside-%d-" % self.me)
        self.made += [("tree", self.outside), ("tree", m), ("umount", m + "/bind"), ("umount", m + "/shm")]
        write(os.path.join(self.outside, "keep"), "not the test's to remove\n")
        os.makedirs(os.path.join(m, "bind"))
        os.makedirs(os.path.join(m, "shm"))
        write(os.path.join(m, "image.tar"), "x")
        subprocess.run(["mount", "--bind", self.outside, os.path.join(m, "bind")], check=True)
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", os.path.join(m, "shm")], check=True)
        # Shims of the dead run's containerd (its socket below the matrix dir) and of another.
        shim = os.path.join(self.outside, "containerd-shim-runc-v2")
        shutil.copy("/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable, shim)
        for name, sock in (("dead shim", m + "/containerd-v2/containerd.sock"),
                           ("other shim", self.outside + "/containerd.sock")):
            self.procs[name] = subprocess.Popen([shim, "-c", "import time; time.sleep(600)", "-namespace",
                                                 "k8s.io", "-id", "c", "-address", sock])
        # The daemon the dead run ran: the matrix runs a copy from its dir.
        daemon = os.path.join(m, "gpu-devwatch")
        shutil.copy(shim, daemon)
        self.procs["dead daemon"] = subprocess.Popen([daemon, "-c", "import time; time.sleep(600)"])

    def undo(self):
        frozen = self.dead_cgroups.get("v1 freezer, frozen")
        if frozen and os.path.isdir(frozen):
            write(os.path.join(frozen, "freezer.state"), "THAWED")
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
            p.wait()
        for kind, what in reversed(self.made):
            if kind == "umount" and mounted(what):
                subprocess.run(["umount", "-l", what])
            if kind in ("umount", "tree") and os.path.isdir(what):
                subprocess.run(["rm", "-rf", "--one-file-system", what])
            if kind == "instances":
                remove_instances(what)
            if kind == "cg" and os.path.isdir(what):
                for d, _, _ in sorted(os.walk(what), key=lambda w: len(w[0]), reverse=True):
                    os.rmdir(d)


def runc_state(root, cid, cgroup_path):
    state = os.path.join(root, "k8s.io", cid)
    os.makedirs(state)
    write(os.path.join(state, "state.json"), json.dumps({"id": cid, "cgroup_paths": {"": cgroup_path}}))
    return state


def remove_instances(names):
    made = []
    view = tracefs_view(made)
    for name in names:
        inst = os.path.join(view, "instances", name)
        if os.path.isdir(inst):
            write(os.path.join(inst, "tracing_on"), "0")
            os.rmdir(inst)
    if made:
        subprocess.run(["umount", view])
        os.rmdir(view)


def instance_tracing(name):
    """'1' or '0' while the instance exists, None once it is gone."""
    made = []
    view = tracefs_view(made)
    try:
        with open(os.path.join(view, "instances", name, "tracing_on")) as f:
            return f.read().strip()
    except OSError:
        return None
    finally:
        if made:
            subprocess.run(["umount", view])
            os.rmdir(view)


def check_cgroups_and_instances(sc):
    """A dry run that names the dead run's state and changes nothing, then the sweep."""
    r = sweep(sc.runc_root, "--dry-run")
    check(r.returncode == 1, "--dry-run exits 1 when it finds anything")
    for what, path in sc.dead_cgroups.items():
        check(path in r.stdout, "--dry-run names the dead run's %s cgroup" % what)
    check("instances/" + sc.instances[0] in r.stdout, "--dry-run names the dead run's tracefs instance")
    for path in (sc.live, sc.lookalike, "instances/" + sc.instances[1]):
        check(path not in r.stdout, "--dry-run leaves out " + path)
    check(sc.procs["dead"].poll() is None and all(map(os.path.isdir, sc.dead_cgroups.values())),
          "--dry-run killed and removed nothing")

    check(sweep(sc.runc_root).returncode == 0, "the sweep removed everything it found (exit 0)")
    for what, path in sc.dead_cgroups.items():
        check(not os.path.exists(path), "the dead run's %s cgroup is gone" % what)
    for name, p in sc.procs.items():
        if name in ("dead", "frozen"):
            try:
                code = p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
            check(code == -9, "the process in the dead run's %s cgroup was killed (SIGKILL): %s" % (name, code))
    check(instance_tracing(sc.instances[0]) is None, "the dead run's tracefs instance is gone")
    check(instance_tracing(sc.instances[1]) == "1", "the live run's tracefs instance is kept, still tracing")
    check(sc.procs["live"].poll() is None and os.path.isdir(sc.live), "the live run's cgroup and process are kept")
    check(os.path.isdir(sc.lookalike), "a cgroup that only looks like a test's is kept")
    check(not os.path.exists(sc.dead_state), "runc's state of a container in the dead run's tree is gone")
    check(os.path.isdir(sc.other_state), "runc's state of a container elsewhere is kept")


def check_tmp_state(sc):
    r = sweep(sc.runc_root)
    check(r.returncode == 0 and sc.dead_mount in r.stdout and sc.matrix in r.stdout,
          "the sweep names and removes the dead run's tracefs mount and matrix dir")
    check(not mounted(sc.dead_mount) and not os.path.exists(sc.dead_mount), "the dead run's tracefs mount is gone")
    check(not os.path.exists(sc.matrix), "the dead run's matrix dir is gone")
    check(os.path.exists(os.path.join(sc.outside, "keep")), "the files bound into it from outside are kept")
    for name in ("dead shim", "dead daemon"):
        try:
            code = sc.procs[name].wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        check(code == -9, "the dead run's %s was killed (SIGKILL): %s" % (name[5:], code))
    check(sc.procs["other shim"].poll() is None, "a shim of another containerd is kept")


def main():
    if os.geteuid() != 0 or not os.path.isdir(v2_root()):
        print("[  SKIPPED ] needs root and cgroup2")
        return 77
    sc = Scene()
    try:
        sc.make_cgroups()
        sc.make_instances()
        check_cgroups_and_instances(sc)
        sc.make_tmp_state()
        check_tmp_state(sc)
        check(sweep(sc.runc_root, "--fail-if-found").returncode == 0, "a last sweep finds nothing")
    finally:
        sc.undo()
    print("FAIL" if failures else "PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
