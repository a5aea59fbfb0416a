#!/usr/bin/env python3
"""Finds, and removes, the state a killed test run left on the node.

Every privileged test cleans up after itself, on failure and on SIGTERM too. A SIGKILL (ctest's
timeout, a CI job or a session torn down) leaves no chance to: its cgroups stay, and a tracefs
instance of the runtime matrix keeps tracing every write on the node, which skews every figure
measured after it. So scripts/test.sh runs this before ctest (what earlier killed runs left) and
after it (what this run left: a test that broke the cleanup rule).

Only what carries the pid of a process that is gone is touched, named as the tests name it:
  - cgroups gdw-test-<pid>-… and gdw-test-cri-<pid>… directly below a hierarchy's root;
    a process still inside is killed by PID (pidfd, after checking it is still in there: only
    test runs put processes in these cgroups), then the tree is removed deepest first, with
    runc's state of the containers that were in it (/run/containerd/runc/<namespace>/<id>,
    which `runc list` would still show);
  - tracefs instances gdw-cri-exits-<pid> and gdw-wake-trace-<pid>: tracing off, removed;
  - tracefs mounts /tmp/gdw-tracefs-<pid>-… (the matrix's own, where none was mounted):
    unmounted and removed;
  - the matrix's temp dirs /tmp/gdw-cri-matrix-<pid>-…: the processes it started that outlive
    it in the root cgroup (its containerd, the shims, the daemon: a runtime executable whose
    command line names a path below that dir, or an executable below it) killed by PID, what
    is mounted below the dir unmounted, then the dir removed without crossing into another
    file system.
A pid that is alive (the run is still going, or the number was reused) keeps its state.

  stale_test_state.py [--dry-run] [--fail-if-found] [--cgroup-root DIR] [--tmp DIR]
                      [--runc-root DIR] [--tracefs DIR ...]
  stale_test_state.py --self-test          the name rules, in memory

Exit status: 0 when nothing was found or all of it was removed; 1 when something could not be
removed, or was found at all with --fail-if-found (or --dry-run)."""

import argparse
import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# What the tests name each kind of thing, the pid of the run that made it in group 1.
OWNER_PATTERNS = {
    "cgroup": re.compile(r"^gdw-test-(?:cri-)?(\d+)(?:-.*)?$"),
    "instance": re.compile(r"^gdw-(?:cri-exits|wake-trace)-(\d+)$"),
    "tracefs mount": re.compile(r"^gdw-tracefs-(\d+)-.+$"),
    "matrix dir": re.compile(r"^gdw-cri-matrix-(\d+)-.+$"),
}
TRACEFS_DEFAULTS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
KILL_WAIT_S = 5.0


def owner_pid(kind, name):
    """The pid in `name` when it is a `kind` a test run makes, else None (pure)."""
    m = OWNER_PATTERNS[kind].match(name)
    return int(m.group(1)) if m else None


def mount_points(mountinfo_text):
    """Mount points in /proc/self/mountinfo's text, octal escapes undone (pure)."""
    points = []
    for line in mountinfo_text.splitlines():
        fields = line.split()
        if len(fields) > 4:
            points.append(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
    return points


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def write(path, text):
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError:
        pass


def hierarchy_roots(cgroup_root):
    """Each mounted hierarchy's root: cgroup_root itself on a pure v2 host, else its
    subdirectories that are cgroups (co-mount links followed once)."""
    if os.path.exists(os.path.join(cgroup_root, "cgroup.procs")):
        return [cgroup_root]
    roots, seen = [], set()
    for entry in sorted(os.listdir(cgroup_root)) if os.path.isdir(cgroup_root) else []:
        path = os.path.join(cgroup_root, entry)
        real = os.path.realpath(path)
        if real not in seen and os.path.exists(os.path.join(path, "cgroup.procs")):
            seen.add(real)
            roots.append(path)
    return roots


def in_cgroup(pid, cgroup_dir, hierarchy_root):
    """Whether /proc/<pid>/cgroup puts pid in cgroup_dir (any hierarchy line will do: the
    path below the root is what has to match)."""
    rel = "/" + os.path.relpath(cgroup_dir, hierarchy_root)
    return any(line.split(":", 2)[-1] == rel for line in read("/proc/%d/cgroup" % pid).splitlines())


def kill_members(cgroup_dir, hierarchy_root):
    """SIGKILL to every process in cgroup_dir, each through a pidfd and only when, with the
    pidfd holding it, it is still in there. Returns the pids signalled."""
    write(os.path.join(cgroup_dir, "cgroup.freeze"), "0")
    write(os.path.join(cgroup_dir, "freezer.state"), "THAWED")
    pids = [int(t) for t in read(os.path.join(cgroup_dir, "cgroup.procs")).split()]
    return [pid for pid in pids if kill_if(pid, lambda: in_cgroup(pid, cgroup_dir, hierarchy_root))]


def kill_if(pid, still_ours):
    """SIGKILL to pid through a pidfd, when still_ours() holds once the pidfd pins the process
    (a pid that ended and was reused in between is left alone). True when signalled."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        if still_ours():
            signal.pidfd_send_signal(fd, signal.SIGKILL)
            return True
    except OSError:
        pass
    finally:
        os.close(fd)
    return False


def remove_cgroup_tree(top, hierarchy_root):
    """Kills what is left, then rmdirs deepest first; returns (killed pids, dirs left)."""
    dirs = [d for d, _, _ in os.walk(top)]
    killed = []
    for d in dirs:
        killed += kill_members(d, hierarchy_root)
    deadline = time.monotonic() + KILL_WAIT_S
    for d in sorted(dirs, key=len, reverse=True):
        while True:
            try:
                os.rmdir(d)
                break
            except FileNotFoundError:
                break
            except OSError as e:
                if e.errno != errno.EBUSY or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
    return killed, [d for d in dirs if os.path.isdir(d)]


def runc_states_in(run_root, cgroup_name):
    """runc's state dirs (<run_root>/<namespace>/<id>) of containers whose cgroup was in the
    tree cgroup_name: what `runc list` would still show of a killed run's containers."""
    states = []
    for ns in sorted(os.listdir(run_root)) if os.path.isdir(run_root) else []:
        ns_dir = os.path.join(run_root, ns)
        for cid in sorted(os.listdir(ns_dir)) if os.path.isdir(ns_dir) else []:
            if state_in_tree(read(os.path.join(ns_dir, cid, "state.json")), cgroup_name):
                states.append(os.path.join(ns_dir, cid))
    return states


def state_in_tree(state_text, cgroup_name):
    """Whether a runc state.json's cgroup paths lie in the tree /cgroup_name (pure)."""
    try:
        state = json.loads(state_text)
    except ValueError:
        return False
    paths = list((state.get("cgroup_paths") or {}).values())
    paths.append(((state.get("config") or {}).get("cgroups") or {}).get("path") or "")
    return any(isinstance(p, str) and "/%s/" % cgroup_name in p + "/" for p in paths)


def stale_cgroups(cgroup_root):
    for root in hierarchy_roots(cgroup_root):
        for entry in sorted(os.listdir(root)):
            pid = owner_pid("cgroup", entry)
            path = os.path.join(root, entry)
            if pid is not None and os.path.isdir(path) and not alive(pid):
                yield root, path, pid


def stale_instances(tracefs_roots):
    for root in tracefs_roots:
        inst_dir = os.path.join(root, "instances")
        for entry in sorted(os.listdir(inst_dir)) if os.path.isdir(inst_dir) else []:
            pid = owner_pid("instance", entry)
            if pid is not None and not alive(pid):
                yield os.path.join(inst_dir, entry), pid


def stale_tmp(tmp, kind):
    for entry in sorted(os.listdir(tmp)) if os.path.isdir(tmp) else []:
        pid = owner_pid(kind, entry)
        if pid is not None and not alive(pid):
            yield os.path.join(tmp, entry), pid


# The matrix's own processes, by executable: its containerd, that containerd's shims, the
# daemon it runs (a copy in the dir) and the runtimes.
RUN_EXECUTABLES = ("containerd", "containerd-shim", "gpu-devwatch", "runc", "crun")


def processes_of(top):
    """Pids of the processes a matrix run in top started and that outlive it: a runtime
    binary whose command line names a path below top (containerd's --config, a shim's
    -address, the daemon's --config), or any executable below top. Killed with the run,
    they stay, in the node's root cgroup."""
    return [int(e) for e in os.listdir("/proc") if e.isdigit() and is_process_of(int(e), top)]


def is_process_of(pid, top):
    try:
        exe = os.readlink("/proc/%d/exe" % pid)
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            args = f.read().decode(errors="replace").split("\0")
    except OSError:
        return False
    if exe.startswith(top + "/"):
        return True
    name = os.path.basename(exe)
    return any(name.startswith(n) for n in RUN_EXECUTABLES) and any(a.startswith(top + "/") for a in args)


def kill_processes_of(top):
    """SIGKILL to each process of top's run; returns the pids signalled."""
    return [pid for pid in processes_of(top) if kill_if(pid, lambda: is_process_of(pid, top))]


def unmount_below(top):
    """Unmounts every mount at or below top, deepest first; returns those still mounted."""
    def below():
        return [p for p in mount_points(read("/proc/self/mountinfo")) if p == top or p.startswith(top + "/")]
    for point in sorted(below(), key=len, reverse=True):
        if subprocess.run(["umount", point], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", point], capture_output=True)
    return below()


def sweep(args, tracefs_roots):
    """Finds (and unless dry_run removes) what dead runs left; returns [(line, removed)]."""
    found = []
    # The run's own processes first, so that no containerd or daemon of it acts on what follows.
    killed_by_dir = {} if args.dry_run else {
        path: kill_processes_of(path) for path, _ in stale_tmp(args.tmp, "matrix dir")}
    # Then tracing: an instance left on costs the node on every traced call until it goes.
    for path, pid in stale_instances(tracefs_roots):
        if not args.dry_run:
            write(os.path.join(path, "tracing_on"), "0")
            try:
                os.rmdir(path)
            except OSError:
                pass
        found.append(("tracefs instance %s (run %d)" % (path, pid), not os.path.isdir(path)))
    states_looked_for = set()  # one tree has a directory in every hierarchy: look once
    for root, path, pid in stale_cgroups(args.cgroup_root):
        if args.dry_run:
            found.append(("cgroup %s (run %d)" % (path, pid), False))
            continue
        killed, left = remove_cgroup_tree(path, root)
        note = ", killed pids %s" % " ".join(map(str, killed)) if killed else ""
        name = os.path.basename(path)
        for state in [] if name in states_looked_for else runc_states_in(args.runc_root, name):
            shutil.rmtree(state, ignore_errors=True)
            note += ", removed runc state %s" % state
        states_looked_for.add(name)
        note += ", could not remove %s" % " ".join(left) if left else ""
        found.append(("cgroup %s (run %d)%s" % (path, pid, note), not left))
    for kind in ("tracefs mount", "matrix dir"):
        for path, pid in stale_tmp(args.tmp, kind):
            killed = killed_by_dir.get(path)
            note = ", killed its processes %s" % " ".join(map(str, killed)) if killed else ""
            # Removed only once nothing is mounted below it: rm cannot reach another file system.
            removed = not args.dry_run and not unmount_below(path) and subprocess.run(
                ["rm", "-rf", "--one-file-system", "--", path]).returncode == 0
            found.append(("%s %s (run %d)%s" % (kind, path, pid, note), removed))
    return found


def self_test():
    cases = (
        ("cgroup", "gdw-test-123-0", 123), ("cgroup", "gdw-test-cri-77", 77),
        ("cgroup", "gdw-test-cri-77-v2", 77), ("cgroup", "gdw-test-9-nspawn-1", 9),
        ("cgroup", "gdw-test", None), ("cgroup", "gdw-test-x-1", None), ("cgroup", "kubepods", None),
        ("cgroup", "gdw-test-12a", None),
        ("instance", "gdw-cri-exits-5", 5), ("instance", "gdw-wake-trace-6", 6),
        ("instance", "gdw-cri-exits-5-x", None), ("instance", "other-5", None),
        ("tracefs mount", "gdw-tracefs-42-ab_c", 42), ("tracefs mount", "gdw-tracefs-ab_c", None),
        ("matrix dir", "gdw-cri-matrix-8-xyz", 8), ("matrix dir", "gdw-cri-matrix-xyz", None),
    )
    bad = [(k, n, want, owner_pid(k, n)) for k, n, want in cases if owner_pid(k, n) != want]
    text = "1 2 0:1 / /tmp/a\\040b rw - tmpfs x rw\n3 1 0:2 / /sys/fs/cgroup rw - tmpfs y rw\n"
    if mount_points(text) != ["/tmp/a b", "/sys/fs/cgroup"]:
        bad.append(("mountinfo", mount_points(text)))
    state = '{"id": "c", "cgroup_paths": {"devices": "/sys/fs/cgroup/devices/gdw-test-cri-7/kubepods/p/c"}}'
    if not state_in_tree(state, "gdw-test-cri-7") or state_in_tree(state, "gdw-test-cri-70") \
            or state_in_tree('{"config": {"cgroups": {"path": "/gdw-test-cri-7"}}}', "gdw-test-cri-7") is False \
            or state_in_tree("not json", "gdw-test-cri-7"):
        bad.append(("state.json", state))
    for b in bad:
        print("FAIL: %r" % (b,))
    print("FAIL" if bad else "PASS")
    return 1 if bad else 0


def mount_tracefs_view(tmp):
    """A tracefs mount of this run's own, named as the tests name theirs: (path, "") or
    (None, why)."""
    where = tempfile.mkdtemp(prefix="gdw-tracefs-%d-" % os.getpid(), dir=tmp)
    done = subprocess.run(["mount", "-t", "tracefs", "tracefs", where], capture_output=True, text=True)
    if done.returncode != 0:
        os.rmdir(where)
        return None, done.stderr.strip() or "mount -t tracefs failed"
    return where, ""


def is_own_tracefs_mount(path):
    """A tracefs the tests mounted themselves (where the node had none mounted)."""
    return os.path.basename(path).startswith("gdw-tracefs-") and os.path.isdir(os.path.join(path, "instances"))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true", help="report only (exit 1 when anything is found)")
    p.add_argument("--fail-if-found", action="store_true", help="exit 1 when anything was found, even if removed")
    p.add_argument("--cgroup-root", default="/sys/fs/cgroup")
    p.add_argument("--tmp", default=tempfile.gettempdir(), help="where the runs made their temp dirs ($TMPDIR, /tmp)")
    p.add_argument("--runc-root", default="/run/containerd/runc", help="containerd's runc state, by namespace")
    p.add_argument("--tracefs", action="append", help="a tracefs root (default: the node's, and the tests' own mounts)")
    p.add_argument("--self-test", action="store_true")
    args = p.parse_args()
    if args.self_test:
        return self_test()
    if os.geteuid() != 0:
        print("stale_test_state: not root, nothing looked at")
        return 0
    roots = args.tracefs or [r for r in TRACEFS_DEFAULTS if os.path.isdir(os.path.join(r, "instances"))] + [
        path for path in (os.path.join(args.tmp, e) for e in sorted(os.listdir(args.tmp)))
        if is_own_tracefs_mount(path)]
    view = None
    if not roots:
        # Instances belong to the kernel, not to a mount: a run killed after unmounting its
        # own view (or one that used a view since removed) still left them tracing.
        view, why = mount_tracefs_view(args.tmp)
        roots = [view] if view else []
        if why:
            print("stale_test_state: tracefs instances not looked at: " + why)
    try:
        found = sweep(args, roots)
    finally:
        if view:
            unmount_below(view)
            os.rmdir(view)
    verb = "found" if args.dry_run else "removed"
    for line, removed in found:
        print("stale_test_state: %s %s" % (verb if removed or args.dry_run else "COULD NOT REMOVE", line))
    if any(not removed for _, removed in found) and not args.dry_run:
        return 1
    return 1 if found and (args.fail_if_found or args.dry_run) else 0


if __name__ == "__main__":
    sys.exit(main())
