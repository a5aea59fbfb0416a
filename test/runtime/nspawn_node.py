"""A real systemd 252 for the matrix's v2/systemd cell: Debian bookworm booted with systemd-nspawn on
the unified hierarchy, with containerd (SystemdCgroup = true), its shim and runc running inside,
so that they talk to that systemd over D-Bus as on a node with kubelet's systemd cgroup driver.

- The rootfs: the minbase bookworm tree the C++ tests cache (test/support/nspawn_systemd.cpp
  `ensure_bookworm_rootfs`: <cache>/bookworm-rootfs, <cache> = $GDW_TEST_ROOTFS_CACHE or
  /var/cache/gdw-test, built once with debootstrap under the same flock and completion marker),
  never booted itself: two nspawn machines cannot share one rootfs directory at once. The
  machine gets a copy of its own in the run's temp dir: an overlayfs mount with the cache as
  its read-only lower layer and its writes in the temp dir (instant to make and to remove;
  `rm -rf` of a 240 MB `cp -a` copy took 15 s on this VM under the other builds' I/O), or,
  where that mount fails, a `cp -a` copy.
- Boot: `SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1 SYSTEMD_SECCOMP=0 systemd-nspawn --boot
  --capability=CAP_BPF,CAP_PERFMON --register=no --keep-unit --private-network`, launched from a
  process that first moves itself into this run's own parent cgroup in every hierarchy (below
  this process's own cgroup there, as the C++ support does: limits set on us still apply);
  nspawn makes the launcher's cgroup the container's root, and systemd's tree lies on the host
  at <that cgroup2 dir>/payload.
- The host's containerd, shim and runc are bind-mounted read-only into it at their own paths,
  and the test's containerd and node directories read-write at theirs, so that the bundles, the
  pid files, the gRPC socket and the GPU nodes have the same path on both sides. containerd runs
  in a scope of that systemd (`systemd-run --scope -p Delegate=yes`, entered with
  `nsenter -a`), the way a node runs it in containerd.service.
- Cleanup: containerd by its PID, the shims it started by theirs, what is left in the pods'
  slices by PID, nspawn by its PID (SIGTERM: the container powers off), the container's PID 1
  by its PID (verified by start time) if it outlived nspawn, then every cgroup of the parent,
  deepest first, in every hierarchy; nspawn's entries under /run/systemd/nspawn, as the C++
  support removes them; the rootfs copy (the overlay unmounted first).
"""

import fcntl
import os
import shutil
import signal
import subprocess
import time

import containerd_stack as cs
from proc_util import file_tail, kill_quietly

NSPAWN_RUN_DIR = "/run/systemd/nspawn"
ROOTFS_NAME = "bookworm-rootfs"
ROOTFS_INCLUDE = "systemd,dbus,systemd-sysv"
MARKER = ".gdw-rootfs-complete"
CGROUP2 = "/sys/fs/cgroup/unified"


def _on_path(tool):
    return shutil.which(tool) is not None


def unavailable_reason():
    """Why the v2/systemd cell cannot run here ("" when it can)."""
    if os.geteuid() != 0:
        return "needs root (cgroups, systemd-nspawn)"
    for tool in ("systemd-nspawn", "nsenter"):
        if not _on_path(tool):
            return "%s is not installed (scripts/install-deps.sh installs it)" % tool
    if not os.path.exists(os.path.join(CGROUP2, "cgroup.procs")):
        return "no cgroup2 hierarchy at %s" % CGROUP2
    return ""


def _cache_dir():
    return os.environ.get("GDW_TEST_ROOTFS_CACHE") or "/var/cache/gdw-test"


def _remove_build_tree(path):
    """Unmounts what debootstrap left mounted below `path`, then removes it on its file system."""
    points = []
    with open("/proc/self/mounts") as f:
        for line in f:
            p = line.split()[1]
            if p.startswith(path + "/"):
                points.append(p)
    for p in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", p], capture_output=True)
    if os.path.exists(path):
        subprocess.run(["rm", "-rf", "--one-file-system", path], capture_output=True, timeout=120)


def ensure_rootfs():
    """(path of the cached bookworm rootfs, "") or (None, why not). Builds it once, as
    ensure_bookworm_rootfs() does (same directory, lock and marker), when it is not there."""
    cache = _cache_dir()
    final = os.path.join(cache, ROOTFS_NAME)
    if os.path.exists(os.path.join(final, MARKER)):
        return final, ""
    if not _on_path("debootstrap"):
        return None, ("no cached rootfs at %s and debootstrap is not installed (scripts/install-deps.sh "
                      "installs it)" % final)
    os.makedirs(cache, exist_ok=True)
    with open(os.path.join(cache, ROOTFS_NAME + ".lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder per machine (the C++ tests take the same lock)
        if os.path.exists(os.path.join(final, MARKER)):
            return final, ""
        partial = os.path.join(cache, ROOTFS_NAME + ".partial")
        _remove_build_tree(final)
        _remove_build_tree(partial)
        try:
            r = subprocess.run(["debootstrap", "--variant=minbase", "--include=" + ROOTFS_INCLUDE, "bookworm",
                                partial], capture_output=True, text=True, timeout=240)
        except subprocess.TimeoutExpired:
            _remove_build_tree(partial)
            return None, "debootstrap bookworm took longer than 240 s"
        if r.returncode != 0:
            _remove_build_tree(partial)
            return None, "debootstrap bookworm failed (exit %d): %s" % (r.returncode, (r.stdout + r.stderr)[-1500:])
        with open(os.path.join(partial, MARKER), "w") as f:
            f.write("debootstrap --variant=minbase --include=%s bookworm\n" % ROOTFS_INCLUDE)
        os.rename(partial, final)
        return final, ""


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _hierarchies_of_self():
    """[(controllers, mount point, own path)] of every cgroup hierarchy this process is in."""
    mounts = []
    for line in _read("/proc/self/mounts").splitlines():
        f = line.split()
        if len(f) >= 4 and f[2] in ("cgroup", "cgroup2"):
            mounts.append((f[1], f[2], f[3].split(",")))
    out = []
    for line in _read("/proc/self/cgroup").splitlines():
        _, controllers, path = line.split(":", 2)
        for point, fstype, options in mounts:
            if (not controllers and fstype == "cgroup2") or (
                    controllers and fstype == "cgroup" and all(c in options for c in controllers.split(","))):
                out.append((controllers, point, path))
                break
    return out


def _start_time(pid):
    """Field 22 of /proc/<pid>/stat: tells a process from a later one that reused its PID."""
    stat = _read("/proc/%d/stat" % pid)
    close = stat.rfind(")")
    if close < 0:
        return ""
    fields = stat[close + 2:].split()
    return fields[19] if len(fields) > 19 else ""


def _children(pid):
    return [int(x) for x in _read("/proc/%d/task/%d/children" % (pid, pid)).split()]


def _is_pid_ns_init(pid):
    for line in _read("/proc/%d/status" % pid).splitlines():
        if line.startswith("NSpid:"):
            ids = line.split()[1:]
            return len(ids) >= 2 and ids[-1] == "1"
    return False


def _kill_cgroup_tree(top):
    """SIGKILL to every process in the cgroup tree (only this run's processes live there)."""
    for d, _, _ in os.walk(top):
        for pid in _read(os.path.join(d, "cgroup.procs")).split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass


def _tree_empty(top):
    for d, _, _ in os.walk(top):
        if _read(os.path.join(d, "cgroup.procs")).strip():
            return False
    return True


def _remove_cgroup_tree(top):
    """rmdir deepest first; returns what is left."""
    if not os.path.isdir(top):
        return []
    left = []
    for d in sorted((d for d, _, _ in os.walk(top)), key=len, reverse=True):
        for _ in range(200):
            try:
                os.rmdir(d)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.005)
        else:
            left.append(d)
    return left


def expand_slice(name):
    """systemd's cgroup path of a slice: kubepods-burstable-pod<uid_>.slice →
    kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice."""
    if name in ("", "-.slice"):
        return ""
    stem = name[:-len(".slice")]
    parts = stem.split("-")
    return "/".join("-".join(parts[:i + 1]) + ".slice" for i in range(len(parts)))


class NspawnSystemd:
    def __init__(self, base, name, binds_rw=(), binds_ro=()):
        self.base = base
        self.machine = name
        self.rootfs = os.path.join(base, "rootfs")
        self.overlay_dirs = [os.path.join(base, "rootfs-upper"), os.path.join(base, "rootfs-work")]
        self.overlay = False  # self.rootfs is an overlayfs mount of ours
        self.console_path = os.path.join(base, "console.log")
        self.binds_rw = list(binds_rw)
        self.binds_ro = list(binds_ro)
        self.parents = []  # the parent cgroup in every hierarchy, made here
        self.launcher = None
        self.console = None
        self.leader = 0
        self.leader_start = ""
        self.payload = ""  # the container's cgroup2 root, host path
        self.boot_seconds = 0.0
        self.stop_seconds = 0.0  # how long the container took to end
        self.created_run_dir = False

    # --- boot -----------------------------------------------------------------------------

    def boot(self, source_rootfs, timeout=60):
        began = time.monotonic()
        os.makedirs(self.base, exist_ok=True)
        for d in [self.rootfs] + self.overlay_dirs:
            os.makedirs(d)
        upper, work = self.overlay_dirs
        r = subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                            "lowerdir=%s,upperdir=%s,workdir=%s" % (source_rootfs, upper, work), self.rootfs],
                           capture_output=True, text=True)
        self.overlay = r.returncode == 0
        if not self.overlay:
            os.rmdir(self.rootfs)
            r = subprocess.run(["cp", "-a", "--reflink=auto", source_rootfs, self.rootfs], capture_output=True,
                               text=True)
            if r.returncode != 0:
                raise RuntimeError("copying the rootfs %s: %s" % (source_rootfs, r.stderr.strip()))
        # containerd copies the node's /etc/hosts into a host-network sandbox; minbase has none.
        with open(os.path.join(self.rootfs, "etc/hosts"), "w") as f:
            f.write("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
        self.created_run_dir = not os.path.exists(NSPAWN_RUN_DIR)
        procs = []
        for controllers, point, own in _hierarchies_of_self():
            parent = point + (own.rstrip("/") if own != "/" else "")
            d = os.path.join(parent, self.machine)
            os.mkdir(d)
            self.parents.append(d)
            if "cpuset" in controllers.split(","):
                for f in ("cpuset.cpus", "cpuset.mems"):  # a new cpuset has none: nothing could join
                    with open(os.path.join(d, f), "w") as out:
                        out.write(_read(os.path.join(parent, f)).strip() or "\n")
            procs.append(os.path.join(d, "cgroup.procs"))
        argv = ["/bin/sh", "-c", 'for f in $GDW_CGROUP_PROCS; do echo $$ > "$f" || exit 125; done; exec "$@"',
                "gdw-nspawn-launcher", "systemd-nspawn", "--directory=" + self.rootfs, "--machine=" + self.machine,
                "--register=no", "--keep-unit", "--private-network"]
        argv += ["--bind=" + b for b in self.binds_rw] + ["--bind-ro=" + b for b in self.binds_ro]
        argv += ["--capability=CAP_BPF,CAP_PERFMON", "--boot"]
        env = dict(os.environ, GDW_CGROUP_PROCS=" ".join(procs), SYSTEMD_NSPAWN_UNIFIED_HIERARCHY="1",
                   SYSTEMD_SECCOMP="0")
        self.console = open(self.console_path, "ab")
        self.launcher = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=self.console,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not self.leader:
            if self.launcher.poll() is not None:
                raise RuntimeError("systemd-nspawn exited (%s) before the container started:\n%s" % (
                    self.launcher.returncode, self.console_tail()))
            if time.monotonic() > deadline:
                raise RuntimeError("no container PID 1 within %d s:\n%s" % (timeout, self.console_tail()))
            for kid in _children(self.launcher.pid):
                if _is_pid_ns_init(kid):
                    self.leader = kid
            if not self.leader:
                time.sleep(0.01)
        self.leader_start = _start_time(self.leader)
        while not os.path.exists(self.root_path("/run/dbus/system_bus_socket")):
            if self.launcher.poll() is not None:
                raise RuntimeError("systemd-nspawn exited during boot:\n" + self.console_tail())
            if time.monotonic() > deadline:
                raise RuntimeError("no system bus socket in the container within %d s:\n%s" % (
                    timeout, self.console_tail()))
            time.sleep(0.01)
        state = self.run_inside(["systemctl", "is-system-running", "--wait"],
                                timeout=max(1, deadline - time.monotonic()))
        if state.stdout.strip() not in ("running", "degraded"):
            raise RuntimeError("systemd did not finish starting (is-system-running: %r, %s):\n%s" % (
                state.stdout.strip(), state.stderr.strip(), self.console_tail()))
        for line in _read("/proc/%d/cgroup" % self.leader).splitlines():
            if line.startswith("0::"):
                path = line[3:]
                self.payload = CGROUP2 + (path[:-len("/init.scope")] if path.endswith("/init.scope") else path)
        if not self.payload or not os.path.isdir(self.payload):
            raise RuntimeError("the container's cgroup2 root not found (%s)" % _read("/proc/%d/cgroup" % self.leader))
        self.boot_seconds = time.monotonic() - began

    def console_tail(self, lines=30):
        return file_tail(self.console_path, lines)

    # --- inside ---------------------------------------------------------------------------

    def root_path(self, inside):
        return "/proc/%d/root%s" % (self.leader, inside)

    @property
    def bus_address(self):
        return "unix:path=" + self.root_path("/run/dbus/system_bus_socket")

    @property
    def unit_dirs(self):
        return [self.root_path("/run/systemd/system.control"), self.root_path("/run/systemd/transient")]

    @property
    def payload_rel(self):
        """The container's cgroup2 root relative to the host's cgroup2 mount."""
        return os.path.relpath(self.payload, CGROUP2)

    def run_inside(self, argv, timeout=30):
        return subprocess.run(["nsenter", "-t", str(self.leader), "-a"] + list(argv), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def systemctl(self, *args, timeout=30):
        return self.run_inside(["systemctl"] + list(args), timeout=timeout)

    def start_slice(self, name, parent=None):
        """A transient slice over D-Bus, as kubelet's systemd driver (runc's libcontainer) makes
        kubepods.slice, the QoS slices and each pod's slice."""
        props = ["Description", "s", "libcontainer container " + name, "DefaultDependencies", "b", "false"]
        if parent:
            props += ["Wants", "as", "1", parent]
        r = self.run_inside(["busctl", "call", "--quiet", "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                             "org.freedesktop.systemd1.Manager", "StartTransientUnit", "ssa(sv)a(sa(sv))", name,
                             "replace", "3" if parent else "2"] + props + ["0"])
        if r.returncode != 0:
            raise RuntimeError("StartTransientUnit %s: %s" % (name, (r.stderr or r.stdout).strip()))
        path = os.path.join(self.payload, expand_slice(name))
        deadline = time.monotonic() + 10
        while not os.path.isdir(path):
            if time.monotonic() > deadline:
                raise RuntimeError("slice %s started but %s did not appear" % (name, path))
            time.sleep(0.01)
        return path

    def stop_unit(self, name):
        return self.systemctl("stop", name)

    # --- the end --------------------------------------------------------------------------

    def stop(self):
        """Ends the container: what is left in the pods' slices (this run's containers) by PID,
        nspawn by its PID, then the container's PID 1 by its PID if still there."""
        began = time.monotonic()
        if self.payload:
            _kill_cgroup_tree(os.path.join(self.payload, "kubepods.slice"))
        if self.launcher is not None and self.launcher.poll() is None:
            self.launcher.send_signal(signal.SIGTERM)  # nspawn asks the container's systemd to power off
            try:
                self.launcher.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.launcher.kill()
                self.launcher.wait(timeout=10)
        # Killing nspawn does not end the container: its PID 1 (ours, checked by start time)
        # takes the whole PID namespace with it.
        if self.leader and self.leader_start and _start_time(self.leader) == self.leader_start:
            try:
                os.kill(self.leader, signal.SIGKILL)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + 5
            while _start_time(self.leader) == self.leader_start and time.monotonic() < deadline:
                time.sleep(0.02)
        if self.console is not None:
            self.console.close()
            self.console = None
        self.stop_seconds = time.monotonic() - began

    def cleanup(self):
        """stop(), then the cgroups (deepest first, every hierarchy), nspawn's runtime entries
        and the rootfs copy. Returns what could not be removed."""
        self.stop()
        left = []
        for d in self.parents:
            deadline = time.monotonic() + 10
            while not _tree_empty(d) and time.monotonic() < deadline:
                _kill_cgroup_tree(d)
                time.sleep(0.05)
            left += _remove_cgroup_tree(d)
        self.parents = []
        for sub in ("propagate", "unix-export"):
            path = os.path.join(NSPAWN_RUN_DIR, sub, self.machine)
            if os.path.lexists(path):
                shutil.rmtree(path, ignore_errors=True)
        if self.created_run_dir:
            for sub in ("locks", "propagate", "unix-export", ""):
                try:
                    os.rmdir(os.path.join(NSPAWN_RUN_DIR, sub) if sub else NSPAWN_RUN_DIR)
                except OSError:
                    pass
        if self.overlay:
            for _ in range(50):
                if subprocess.run(["umount", self.rootfs], capture_output=True).returncode == 0:
                    self.overlay = False
                    break
                time.sleep(0.1)
            else:
                subprocess.run(["umount", "-l", self.rootfs], capture_output=True)
                self.overlay = False
        for d in [self.rootfs] + self.overlay_dirs:
            if os.path.isdir(d):
                _remove_build_tree(d)
                if os.path.exists(d):
                    left.append(d)
        return left


class ContainerdInside(cs.Containerd):
    """containerd with SystemdCgroup = true, run inside the nspawn container in a scope of its
    systemd. Its directories are bind-mounted at the same path on both sides."""

    def __init__(self, base, handlers, systemd, unit):
        super().__init__(base, handlers, systemd_cgroup=True)
        self.systemd = systemd
        self.unit = unit
        self.pid = 0  # containerd's host PID

    def _find_pid(self):
        want = [cs.CONTAINERD.encode(), b"--config", self.config.encode()]
        for kid in _children(self.proc.pid):
            try:
                with open("/proc/%d/cmdline" % kid, "rb") as f:
                    if f.read().split(b"\0")[:3] == want:
                        return kid
            except OSError:
                pass
        return 0

    def launch(self):
        # nsenter forks into the PID namespace; systemd-run --scope moves that child into the
        # scope and execs sh, which execs containerd: containerd is nsenter's child.
        cmd = ["nsenter", "-t", str(self.systemd.leader), "-a", "systemd-run", "--quiet", "--scope",
               "--unit=" + self.unit, "-p", "Delegate=yes", "/bin/sh", "-c",
               'exec "$0" --config "$1" >>"$2" 2>&1', cs.CONTAINERD, self.config, self.log_path]
        return subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)

    def started(self):
        if not self.pid:
            self.pid = self._find_pid()

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            pid = self.pid or self._find_pid()
            if pid:
                os.kill(pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                if pid:
                    kill_quietly(pid)
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=10)
        self.end_shims_and_log()
