"""One cell run: a host-network pod with one GPU container, driven through the CRI as kubelet
drives it, while gpu-devwatch watches the node. Counts what kubelet would see.

Per iteration:
  start    CreateContainer (attempt 0) + StartContainer; then the NVIDIA hook's out-of-band
           grant (v1: the GPU and control nodes to devices.allow; v2/systemd: libnvidia-container's
           v2 way, each attached program swapped for a copy with "allow the GPU nodes" in front;
           the v2/cgroupfs cells: none, the daemon alone grants), as the hook does after the
           runtime's device apply.
  updates  UpdateContainerResources (cpu_shares and cpuset_cpus: CPUManager static, in-place
           resize), each checked in the container's cgroup. v2/systemd: the update carries no CPU
           (the node's cgroup2 has no cpu controller, and runc writes cpu.weight itself after
           systemd), so the CPU goes through the scope's properties as runc's systemd driver
           sends them (`systemctl set-property --runtime <scope> CPUWeight=<runc's weight for
           the shares>`), then `systemctl daemon-reload`; each attaches a fresh `sd_devices`
           from DeviceAllow= alone, and each is checked.
  restart  StopContainer, CreateContainer attempt+1, StartContainer, the hook's grant,
           RemoveContainer of the old one.
  end      StopContainer, RemoveContainer.
After each start, update and restart: how long until the container holds every wanted node
again (v1: its devices.list, polled every 2 ms; v2: a shell joining its cgroup2 opens them; up to
1 s in enforce mode), then an ExecSync that opens every fixture node from inside (allocated:
ENXIO, i.e. allowed; the unallocated GPU: EPERM), nothing granted beyond the spec + allocation +
control nodes (v1), and the sandbox (pause) container without any GPU node (v1: its
devices.list; v2: opened from its cgroup).
"""

import errno
import json
import os
import re
import subprocess
import time
import uuid

import bpf_device
import gpu_node as gn
from containerd_stack import IMAGE_REF
from nspawn_node import expand_slice
from cri_client import CriError

POLL_S = 0.002
WHOLE_TIMEOUT_ENFORCE = 1.0
WHOLE_TIMEOUT_OBSERVE = 0.05  # the control: nothing grants back, do not wait for it
WHOLE_TIMEOUT_CHECK = 2.0  # check --repair, run again and again: one run and its waits
SHARES = [256, 512, 1024, 2048]
# An exec probe: one line per node, "<name> <error text>" (no driver: an allowed open fails
# with ENXIO "No such device or address", a denied one with EPERM "Operation not permitted").
PROBE = 'for n in "$@"; do echo "$n $( (exec 3<>/gpu/$n) 2>&1 )"; done'


def percentile(xs, p):
    """The p-th percentile of sorted `xs` (nearest rank), or None."""
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))] if xs else None


def normalize_error(text):
    text = " ".join(text.split())
    text = re.sub(r"[0-9a-f]{64}", "<id>", text)
    text = re.sub(r"pod[0-9a-f-]{36}", "pod<uid>", text)
    text = re.sub(r"/tmp/[^ :\"]+", "<tmp>", text)
    text = re.sub(r"gdw-test-cri-\d+", "gdw-test-cri-<pid>", text)
    text = re.sub(r"pid=\d+", "pid=<n>", text)
    return text


def cpu_weight(shares):
    """runc's cpu.shares → cgroup v2 cpu.weight (ConvertCPUSharesToCgroupV2Value), the CPUWeight=
    its systemd driver sends."""
    return 0 if shares == 0 else 1 + ((shares - 2) * 9999) // 262142


class Stats:
    def __init__(self, cell, mode):
        self.cell = cell
        self.mode = mode
        self.starts = 0          # StartContainer that returned OK (attempt 0)
        self.start_calls = 0
        self.updates = 0         # UpdateContainerResources that returned OK
        self.update_calls = 0
        self.updates_landed = 0  # ... whose values are in the cgroup
        self.restarts = 0        # attempt+1 started OK
        self.restart_calls = 0
        self.errors = {}         # "Method: text" -> count
        self.whole_checks = 0
        self.whole = 0
        self.latencies = []      # seconds from the call's return to whole
        self.latencies_by = {}   # "start" | "update" | "restart" -> the same, by step
        self.exec_checks = 0
        self.exec_ok = 0         # every allocated node ENXIO and the unallocated GPU EPERM
        self.exec_failures = []
        self.extras = []         # rules granted beyond spec + allocation + control nodes
        self.sandbox_touched = []
        self.landed_failures = []
        self.not_whole = []
        self.hook_grants = 0     # v2/systemd: the NVIDIA hook's v2 grants done ...
        self.hook_failures = {}  # ... and failed: errno text -> count
        self.max_programs = None  # v2/systemd: most device programs seen on a container's scope
        self.regrants = None     # the daemon's gpu_devwatch_regrants_total (all results)
        self.systemd_regrants = None  # ... its method="systemd" part (DeviceAllow= added to a scope)
        self.revocations = None  # gpu_devwatch_revocations_total
        self.apply_waits = None  # gpu_devwatch_apply_waits_total (absent before the fix)
        # gpu_devwatch_device_programs_loaded_total (v2): verifier runs on a repair's path,
        # and ahead of repairs (while a runtime applied, or after a grant)
        self.loads_on_path = None
        self.loads_ahead = None
        self.seconds = 0.0
        self.view = None         # tenant_view.TenantView of the run (None: not measured)
        self.check = None        # check_loop.CheckLoop of a check-mode run

    @property
    def runtime_errors(self):
        return sum(self.errors.values())

    def error(self, e):
        self.error_text(e.method, e.details)

    def error_text(self, method, details):
        key = "%s: %s" % (method, normalize_error(details))
        self.errors[key] = self.errors.get(key, 0) + 1

    def percentile(self, p, what=None):
        return percentile(sorted(self.latencies if what is None else self.latencies_by.get(what, [])), p)


class PodLoop:
    def __init__(self, cri, ctd, node, cgroups, stats, handler, mode, v2=False, updates=2, cpus=None, systemd=None,
                 view=None):
        self.cri = cri
        self.ctd = ctd
        self.node = node
        self.cg = cgroups
        self.st = stats
        self.handler = handler
        self.mode = mode
        self.v2 = v2
        self.updates = updates
        self.cpus = cpus or ["0-%d" % (os.cpu_count() - 1)]
        self.uid = str(uuid.uuid4())
        self.name = "gpu-pod-" + self.uid[:5]
        # v2/systemd (`systemd`: the NspawnSystemd whose systemd runs containerd): kubelet's
        # systemd driver sends the pod's slice as the cgroup parent; the test makes it over D-Bus.
        self.systemd = systemd
        self.pod_slice = "kubepods-burstable-pod%s.slice" % self.uid.replace("-", "_")
        if systemd is not None:
            self.parent = self.pod_slice
        else:
            self.parent = "/%s/kubepods/burstable/pod%s" % (cgroups.name, self.uid)
        self.sandbox_id = None
        self.sandbox_cfg = None
        self.sandbox_rules = []
        self.created = []  # every sandbox and container ID (the cleanup removes leftover runtime state)
        self.step = 0
        # tenant_view.TenantView (None: not measured): a process of the test's in each GPU
        # container from its start to its stop, timing each step from the runtime's exit.
        self.view = view

    # --- cgroup reads -----------------------------------------------------------------

    def cgroup_path(self, container_id):
        """The container's cgroup below the hierarchy's root (the host's cgroup2 mount on v2)."""
        with open(os.path.join(self.ctd.bundles_dir, container_id, "config.json")) as f:
            path = json.load(f)["linux"]["cgroupsPath"]
        if self.systemd is None:
            return path
        # systemd driver: "<slice>:<prefix>:<name>" is the unit <prefix>-<name>.scope in the slice,
        # below the nspawn machine's cgroup2 root.
        slice_, prefix, name = path.split(":")
        scope = "/%s/%s/%s-%s.scope" % (self.systemd.payload_rel, expand_slice(slice_), prefix, name)
        # crun runs the container in a `container` sub-cgroup of its scope, and attaches its
        # device program there (runc: in the scope itself).
        if os.path.isdir(self.v2_dir(scope + "/container")):
            return scope + "/container"
        return scope

    def expected_procs(self, container_id):
        """The cgroup.procs the container's start will create (its cgroupsPath is in the bundle only
        then): the watcher waits for it. crun under systemd runs the container in a `container`
        sub-cgroup of its scope, and needs the scope itself empty to enable controllers there."""
        if self.systemd is not None:
            rel = "/%s/%s/cri-containerd-%s.scope" % (self.systemd.payload_rel, expand_slice(self.parent), container_id)
            if "crun" in self.handler:
                rel += "/container"
        else:
            rel = "%s/%s" % (self.parent, container_id)
        hierarchy = "unified" if self.v2 else "devices"
        return os.path.join(gn.CGROUP_ROOT, hierarchy) + rel + "/cgroup.procs"

    def check_joined(self, container_id, cgpath):
        actual = os.path.join(gn.CGROUP_ROOT, "unified" if self.v2 else "devices") + cgpath + "/cgroup.procs"
        if self.view and self.expected_procs(container_id) != actual:
            self.view.errors.append("the watcher awaited %s, the container is in %s" % (
                self.expected_procs(container_id), actual))

    def sandbox_cgroup(self):
        if self.systemd is not None:
            return self.cgroup_path(self.sandbox_id)
        return self.parent + "/" + self.sandbox_id

    def v2_dir(self, cgpath):
        return os.path.join(gn.CGROUP_ROOT, "unified") + cgpath

    def devices_rules(self, cgpath):
        if self.v2:
            return None
        return gn.parse_rules(gn.read_file(os.path.join(gn.CGROUP_ROOT, "devices") + cgpath + "/devices.list"))

    def is_whole(self, cgpath):
        rules = self.devices_rules(cgpath)
        if rules is None:  # v2: no rule file; ask from inside
            return None
        for name in gn.WANTED:
            _, major, minor = next(n for n in gn.NODES if n[0] == name)
            if not gn.allows(rules, "c", major, minor, "rw"):
                return False
        return True

    # --- checks -----------------------------------------------------------------------

    def exec_probe(self, container_id):
        """{node: 'ENXIO'|'EPERM'|text} from inside the container."""
        names = gn.WANTED + gn.NOT_ALLOCATED
        _, out, _, _ = self.cri.exec_sync(container_id, ["/bin/sh", "-c", PROBE, "probe"] + names)
        result = {}
        for line in out.splitlines():
            name, _, text = line.partition(" ")
            result[name] = ("ENXIO" if "No such device or address" in text else
                            "EPERM" if "Operation not permitted" in text else text or "opened")
        return result

    def host_probe(self, cgpath, names):
        """v2 has no rule file to read: a short-lived shell joins the cgroup2 at `cgpath` and
        opens each node (its v1 devices cgroup is the test's, which allows all).
        {name: 'ENXIO'|'EPERM'|text}; None when it could not join."""
        procs = self.v2_dir(cgpath) + "/cgroup.procs"
        r = subprocess.run(["/bin/busybox", "sh", "-c",
                            'echo $$ > "$1" || exit 9; shift; for n in "$@"; do echo "$n $( (exec 3<>"$n") 2>&1 )"; '
                            'done', "probe", procs] + [os.path.join(self.node.dev, n) for n in names],
                           capture_output=True, text=True)
        if r.returncode == 9:
            return None
        result = {}
        for line in r.stdout.splitlines():
            path, _, text = line.partition(" ")
            result[os.path.basename(path)] = ("ENXIO" if "No such device or address" in text else
                                              "EPERM" if "Operation not permitted" in text else text or "opened")
        return result

    def host_whole(self, cgpath):
        seen = self.host_probe(cgpath, gn.WANTED)
        return seen is not None and all(seen.get(n) == "ENXIO" for n in gn.WANTED)

    def wait_whole(self, container_id, cgpath, since, what):
        """Polls until the container holds every wanted node; records the latency."""
        self.st.whole_checks += 1
        limit = {"enforce": WHOLE_TIMEOUT_ENFORCE, "check": WHOLE_TIMEOUT_CHECK}.get(self.mode, WHOLE_TIMEOUT_OBSERVE)
        whole = False
        while True:
            whole = self.host_whole(cgpath) if self.v2 else self.is_whole(cgpath)
            now = time.monotonic()
            if whole or now - since > limit:
                break
            time.sleep(POLL_S)
        if whole:
            self.st.whole += 1
            self.st.latencies.append(now - since)
            self.st.latencies_by.setdefault(what, []).append(now - since)
        else:
            self.st.not_whole.append(what)
        return whole

    def check(self, container_id, cgpath, since, what):
        whole = self.wait_whole(container_id, cgpath, since, what)
        try:
            seen = self.exec_probe(container_id)
        except CriError as e:
            self.st.error(e)
            return
        self.st.exec_checks += 1
        want = {n: ("ENXIO" if whole else "EPERM") for n in gn.WANTED}
        want.update({n: "EPERM" for n in gn.NOT_ALLOCATED})
        if seen == want:
            self.st.exec_ok += 1
        else:
            self.st.exec_failures.append("%s: %s" % (what, seen))
        if not self.v2:
            self.check_extras(container_id, cgpath, what)
        if self.systemd is not None:
            try:
                n = len(bpf_device.query_ids(self.v2_dir(cgpath)))
                self.st.max_programs = max(self.st.max_programs or 0, n)
            except OSError:
                pass
        self.check_sandbox(what)

    def check_extras(self, container_id, cgpath, what):
        """The spec's rules are config.json's plus the runtime's own defaults, which the runtime
        adds itself (runc and crun differ): those are what the same runtime gave the sandbox."""
        with open(os.path.join(self.ctd.bundles_dir, container_id, "config.json")) as f:
            allowed = gn.spec_rules(json.load(f))
        allowed += self.sandbox_rules
        allowed += [("c", str(major), str(minor), "rw") for name, major, minor in gn.NODES if name in gn.WANTED]
        for rule in self.devices_rules(cgpath):
            if not gn.rule_within(rule, allowed):
                self.st.extras.append("%s: %s %s:%s %s" % ((what,) + rule))

    def check_sandbox(self, what):
        if not self.sandbox_id:
            return
        if self.v2:  # opened from the sandbox's cgroup: every fixture node denied
            seen = self.host_probe(self.sandbox_cgroup(), [n[0] for n in gn.NODES])
            if seen is None:
                self.st.sandbox_touched.append("%s: could not join the sandbox's cgroup to check it" % what)
                return
            for name, verdict in sorted(seen.items()):
                if verdict != "EPERM":
                    self.st.sandbox_touched.append("%s: %s %s in the sandbox" % (what, name, verdict))
            return
        rules = self.devices_rules(self.parent + "/" + self.sandbox_id)
        for name, major, minor in gn.NODES:
            if gn.allows(rules, "c", major, minor, "r") or gn.allows(rules, "c", major, minor, "w"):
                self.st.sandbox_touched.append("%s: %s allowed in the sandbox" % (what, name))

    # --- the hook ---------------------------------------------------------------------

    def hook_grant(self, cgpath):
        if self.v2:
            if self.systemd is None:
                return
            nodes = [(major, minor) for name, major, minor in gn.NODES if name in gn.WANTED]
            err = bpf_device.nvidia_style_grant(self.v2_dir(cgpath), nodes)
            self.st.hook_grants += 1
            if err:
                text = "%s (%s)" % (os.strerror(err), errno.errorcode.get(err, err))
                self.st.hook_failures[text] = self.st.hook_failures.get(text, 0) + 1
            return
        allow = os.path.join(gn.CGROUP_ROOT, "devices") + cgpath + "/devices.allow"
        for name in gn.WANTED:
            gn.write_file(allow, gn.node_rule(name, "rw"))

    # --- CRI steps --------------------------------------------------------------------

    def run_sandbox(self):
        log_dir = os.path.join(self.node.base, "pods", self.uid)
        os.makedirs(log_dir, exist_ok=True)
        self.sandbox_cfg = self.cri.sandbox_config(self.name, self.uid, "default", self.parent, log_dir)
        self.sandbox_id, _ = self.cri.run_pod_sandbox(self.sandbox_cfg, self.handler)
        self.created.append(self.sandbox_id)
        if not self.v2:
            self.sandbox_rules = self.devices_rules(self.parent + "/" + self.sandbox_id)

    def stop_sandbox(self):
        if self.sandbox_id:
            for call in (self.cri.stop_pod_sandbox, self.cri.remove_pod_sandbox):
                try:
                    call(self.sandbox_id)
                except CriError as e:
                    self.st.error(e)
            self.sandbox_id = None

    def resources(self):
        self.step += 1
        return SHARES[self.step % len(SHARES)], self.cpus[self.step % len(self.cpus)]

    def create_start(self, attempt):
        """(container id, start returned at) or (None, None) when the runtime refused."""
        shares, cpus = self.resources()
        if self.view:
            self.view.step("restart" if attempt else "start")
        mounts = [("/gpu", self.node.dev, False)]
        cfg = self.cri.container_config("gpu", attempt, IMAGE_REF, ["/bin/sleep", "1000000"], mounts,
                                        0 if self.v2 else shares, "" if self.v2 else cpus, self.sandbox_cfg)
        try:
            cid, _ = self.cri.create_container(self.sandbox_id, cfg, self.sandbox_cfg)
        except CriError as e:
            self.st.error(e)
            return None, None
        self.created.append(cid)
        if self.view:
            self.view.join(self.expected_procs(cid))
        try:
            self.cri.start_container(cid)
        except CriError as e:
            self.st.error(e)
            self.remove(cid)
            return None, None
        return cid, time.monotonic()

    def leave(self):
        """The watcher out of the container before anything stops it."""
        if self.view:
            self.view.leave()

    def remove(self, cid):
        self.leave()
        for call in (self.cri.stop_container, self.cri.remove_container):
            try:
                call(cid)
            except CriError as e:
                self.st.error(e)

    def update(self, cid, cgpath):
        shares, cpus = self.resources()
        self.st.update_calls += 1
        if self.view:
            self.view.step("update")
        if self.systemd is not None:
            return self.update_systemd(cid, cgpath, shares)
        try:
            if self.v2:
                # The node's cgroup2 has no cpu or cpuset controller here: the update carries
                # no CPU fields. The shim still runs `<runtime> update` (crun re-attaches its
                # device program; runc >= 1.0 leaves devices alone).
                self.cri.update_resources(cid, 0, "")
            else:
                self.cri.update_resources(cid, shares, cpus)
        except CriError as e:
            self.st.error(e)
            return
        returned = time.monotonic()
        self.st.updates += 1
        if self.v2:
            self.st.updates_landed += 1
        else:
            got_shares = gn.read_file(os.path.join(gn.CGROUP_ROOT, "cpu") + cgpath + "/cpu.shares").strip()
            got_cpus = gn.read_file(os.path.join(gn.CGROUP_ROOT, "cpuset") + cgpath + "/cpuset.cpus").strip()
            if got_shares == str(shares) and got_cpus == cpus:
                self.st.updates_landed += 1
            else:
                self.st.landed_failures.append("cpu.shares %s (want %d), cpuset.cpus %s (want %s)" % (
                    got_shares, shares, got_cpus, cpus))
        self.check(cid, cgpath, returned, "update")

    def update_systemd(self, cid, cgpath, shares):
        """The update without CPU through the CRI, the CPU through the scope's properties, then a
        daemon-reload: two fresh sd_devices programs, each checked."""
        try:
            self.cri.update_resources(cid, 0, "")
        except CriError as e:
            self.st.error(e)
            return
        self.st.updates += 1
        unit = [part for part in cgpath.split("/") if part.endswith(".scope")][-1]
        weight = cpu_weight(shares)
        if self.view:
            self.view.step("set-property")
        r = self.systemd.systemctl("set-property", "--runtime", unit, "CPUWeight=%d" % weight)
        changed = time.monotonic()
        if r.returncode != 0:
            self.st.error_text("systemctl set-property", r.stderr or r.stdout)
        self.check(cid, cgpath, changed, "update")
        if r.returncode == 0:
            got = self.systemd.systemctl("show", "-p", "CPUWeight", "--value", unit).stdout.strip()
            if got == str(weight):
                self.st.updates_landed += 1
            else:
                self.st.landed_failures.append("CPUWeight %s (want %d)" % (got, weight))
        if self.view:
            self.view.step("reload")
        r = self.systemd.systemctl("daemon-reload", timeout=60)
        reloaded = time.monotonic()
        if r.returncode != 0:
            self.st.error_text("systemctl daemon-reload", r.stderr or r.stdout)
        self.check(cid, cgpath, reloaded, "reload")

    def iteration(self):
        self.st.start_calls += 1
        cid, started = self.create_start(0)
        if cid is None:
            return
        self.st.starts += 1
        cgpath = self.cgroup_path(cid)
        self.check_joined(cid, cgpath)
        self.hook_grant(cgpath)
        self.check(cid, cgpath, started, "start")
        for _ in range(self.updates):
            self.update(cid, cgpath)
        # Restart: the old one stops, attempt+1 is created and started, the old one removed.
        self.st.restart_calls += 1
        self.leave()
        try:
            self.cri.stop_container(cid)
        except CriError as e:
            self.st.error(e)
        new, started = self.create_start(1)
        if new is not None:
            self.st.restarts += 1
            new_cgpath = self.cgroup_path(new)
            self.check_joined(new, new_cgpath)
            self.hook_grant(new_cgpath)
            self.check(new, new_cgpath, started, "restart")
        self.remove(cid)  # kubelet's garbage collection of the exited attempt
        if new is not None:
            self.remove(new)

    def run(self, iterations):
        start = time.monotonic()
        try:
            self.run_sandbox()
        except CriError as e:
            self.st.error(e)
            return
        try:
            for _ in range(iterations):
                self.iteration()
        finally:
            self.stop_sandbox()
            self.st.seconds = time.monotonic() - start
