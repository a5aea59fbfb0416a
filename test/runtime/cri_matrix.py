#!/usr/bin/python3
"""The real-runtime matrix (issue 37): Debian's containerd 1.6 with its CRI plugin, driven over
gRPC as kubelet drives it, with gpu-devwatch running beside it, in `enforce` mode and again in
`observe` mode (the control: the daemon writes nothing), and in `check` mode (the daemon
observes while `gpu-devwatch check --repair` runs again and again: check_loop.py). Counts runtime errors, checks every
resource update landed, the GPU container whole again, nothing extra granted and the sandbox
untouched. And the tenant's view: a process of the test's in each GPU container keeps opening
its GPU nodes, and each step's loss is timed from the end of the runtime's apply, the runtime
process's exit as the kernel records it (tenant_view.py).

Cells: runc 1.1.5, runc 1.0.0~rc93 and crun 1.8.1, each on v1 and v2 with the cgroupfs driver
(containerd on the host), and on v2 with the systemd driver (v2-systemd-*) under a real systemd
252, booted with systemd-nspawn on the unified hierarchy from the cached bookworm rootfs
(nspawn_node.py); containerd (SystemdCgroup = true), its shim and the runtimes run inside it
and talk to that systemd over D-Bus (one machine for the three runtimes), the pods get
kubelet's slices, the NVIDIA hook's grant is played the v2 way, and every update is followed by
a `systemctl daemon-reload` (pod_loop.py). The daemon runs on the host, pointed at that
systemd's cgroup tree, bus and unit dirs.

  cri_matrix.py --daemon build/daemon/gpu-devwatch [--memlock-shim build/test/libmemlock_shim.so]

Environment:
  GDW_CRI_ITERATIONS  iterations per cell and mode: each is one start, GDW_CRI_UPDATES
                      updates and one restart (default 50: 200 starts, updates and
                      restarts per cell and mode; 200 for 200 of each, about 25 minutes)
  GDW_CRI_UPDATES     updates per start (default 2)
  GDW_CRI_CELLS       comma-separated subset of: v1-runc, v1-runc-rc93, v1-crun, v2-runc,
                      v2-runc-rc93, v2-crun, v2-systemd-runc, v2-systemd-runc-rc93,
                      v2-systemd-crun (default: all)
  GDW_CRI_MODES       default "enforce,observe,check"; check: the daemon observes while
                      `gpu-devwatch check --repair` runs again and again (check_loop.py)
  GDW_CRI_CHECK_ITERATIONS  iterations of a cell in check mode (default 25)
  GDW_CRI_KEEP=1      keep the temp dir (logs) after the run
  GDW_CRI_DAEMON_CONFIG  YAML appended to every daemon configuration ("\\n" for newlines), e.g.
                      the old behaviour: 'repair:\\n  apply_wait_limit: 0s'
  GDW_TEST_ROOTFS_CACHE  where fetch_old_runc.sh keeps runc 1.0.0~rc93 and the C++ tests keep
                      the bookworm rootfs the v2/systemd cell copies (/var/cache/gdw-test)
  CI=true             a cell that could not run fails the test

Exit: 0 pass, 1 fail, 77 skipped (not root; containerd, ctr, the shim, runc, crun or
busybox-static missing). A cell that cannot run here (no runc rc93 download, no memlock shim,
no systemd-nspawn or bookworm rootfs) is listed as not run with the reason.
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import containerd_stack as cs  # noqa: E402
import gpu_node as gn  # noqa: E402
import nspawn_node as nn  # noqa: E402
import pod_loop  # noqa: E402
from check_loop import CheckLoop  # noqa: E402
from runtime_exits import RuntimeExits  # noqa: E402
import tenant_view  # noqa: E402
from matrix_report import print_run, table, verdict  # noqa: E402

SKIP = 77
ALL_CELLS = ("v1-runc,v1-runc-rc93,v1-crun,v2-runc,v2-runc-rc93,v2-crun,v2-systemd-runc,v2-systemd-runc-rc93,"
             "v2-systemd-crun")
# The systemd cells' runtimes: cell → containerd runtime handler.
SYSTEMD_CELLS = {"v2-systemd-runc": "runc", "v2-systemd-runc-rc93": "runc-rc93", "v2-systemd-crun": "crun"}
# crun's one library the minbase bookworm rootfs lacks (runc needs libseccomp and libc, which it has;
# crun's others come with systemd).
CRUN_LIBS_NOT_IN_ROOTFS = ("libyajl.so.2",)


def env_int(name, default):
    try:
        return int(os.environ.get(name, "") or default)
    except ValueError:
        sys.exit("%s must be an integer" % name)


def runtime_version(binary):
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    except OSError:
        return "?"
    first = out.splitlines()[0] if out else "?"
    return first.replace("runc version ", "runc ").replace("crun version ", "crun ")


class Terminated(Exception):
    pass


def on_signal(signum, _frame):
    raise Terminated("signal %d" % signum)


def write_crun_wrapper(path):
    """crun 1.8 refuses a hybrid node ("cgroups in hybrid mode not supported, drop all controllers
    from cgroupv2"): on v1 it runs in a mount namespace of its own without the cgroup2 mount, as
    on a legacy-only node (what test/support/runc_container.cpp does for its crun tests)."""
    with open(path, "w") as f:
        f.write("#!/bin/sh\n"
                "exec unshare -m --propagation private sh -c "
                "'! mountpoint -q /sys/fs/cgroup/unified || umount /sys/fs/cgroup/unified; "
                "exec %s \"$@\"' crun \"$@\"\n" % cs.CRUN)
    os.chmod(path, 0o755)


def write_v2_wrapper(path, binary, preload=None):
    """This node's cgroup2 has no cpu controller (cpu and cpuset are bound to v1), and containerd
    always gives the sandbox CPU shares, which runc and crun turn into cpu.weight and fail on.
    The wrapper drops linux.resources.cpu from a bundle before `<runtime> create` reads it;
    nothing device-related changes. crun also gets the memlock shim (`preload`): crun 1.8 raises
    RLIMIT_MEMLOCK before each BPF_PROG_LOAD and gives up when that fails, as it does where root
    lacks CAP_SYS_RESOURCE (test/support/memlock_shim.c)."""
    strip = ("import json,sys\n"
             "a=sys.argv[1:]\n"
             "b=a[a.index('--bundle')+1] if '--bundle' in a else '.'\n"
             "p=b+'/config.json'\n"
             "c=json.load(open(p))\n"
             "c.get('linux',{}).get('resources',{}).pop('cpu',None)\n"
             "json.dump(c,open(p,'w'))\n")
    env = "env LD_PRELOAD=%s " % preload if preload else ""
    with open(path, "w") as f:
        f.write("#!/bin/sh\n"
                "for a in \"$@\"; do\n"
                "  if [ \"$a\" = create ]; then /usr/bin/python3 -c \"%s\" \"$@\" || exit 1; break; fi\n"
                "done\n"
                "exec %s%s \"$@\"\n" % (strip.replace('"', '\\"'), env, binary))
    os.chmod(path, 0o755)


def write_systemd_wrapper(path, binary, preload=None):
    """The v2 wrapper for the v2/systemd cells, where it runs inside the nspawn machine (no
    python3 there): sed drops linux.resources.cpu from the bundle before `<runtime> create`.
    containerd writes config.json compactly (Go's encoding/json), and the OCI cpu object holds
    scalars only. crun gets the memlock shim (`preload`), as on the host."""
    env = "env LD_PRELOAD=%s " % preload if preload else ""
    with open(path, "w") as f:
        f.write("#!/bin/sh\n"
                "b=.\n"
                "prev=\n"
                "for a in \"$@\"; do\n"
                "  if [ \"$prev\" = --bundle ] || [ \"$prev\" = -b ]; then b=$a; fi\n"
                "  prev=$a\n"
                "done\n"
                "for a in \"$@\"; do\n"
                "  if [ \"$a\" = create ]; then\n"
                "    sed -i -E 's/,\"cpu\":\\{[^{}]*\\}//; s/\"cpu\":\\{[^{}]*\\},?//' \"$b/config.json\" || exit 1\n"
                "    break\n"
                "  fi\n"
                "done\n"
                "exec %s%s \"$@\"\n" % (env, binary))
    os.chmod(path, 0o755)


RUNC_STATE = "/run/containerd/runc/k8s.io"  # where the shim's runtimes keep state, whatever containerd's state


def remove_runtime_state(ids, run_containerd_existed):
    """The runtime state of this test's IDs that a killed shim left, then the /run/containerd
    directories if this test made them (rmdir: only when empty)."""
    for cid in ids:
        path = os.path.join(RUNC_STATE, cid)
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
    if not run_containerd_existed:
        for d in (RUNC_STATE, os.path.dirname(RUNC_STATE), "/run/containerd/s", "/run/containerd"):
            try:
                os.rmdir(d)
            except OSError:
                pass


def run_cell(label, handler, ctd, cri, cgroups, node, daemon_bin, mode, args, base, created, v2=False,
             systemd=None):
    st = pod_loop.Stats(label, mode)
    port = gn.free_port()
    tag = "%s-%s" % (label.split()[0].replace("/", "-") + "-" + handler, mode)
    # check mode: the daemon observes, `check --repair` (enforce) is the only one to grant.
    cfg = node.write_config(os.path.join(base, "gdw-%s.yaml" % tag), "observe" if mode == "check" else mode,
                            ctd.bundles_dir, port)
    check_cfg = node.write_config(os.path.join(base, "check-%s.yaml" % tag), "enforce", ctd.bundles_dir, port)
    extra = os.environ.get("GDW_CRI_DAEMON_CONFIG", "")
    if extra:
        for path in (cfg, check_cfg):
            with open(path, "a") as f:
                f.write(extra.replace("\\n", "\n").rstrip("\n") + "\n")
    view = tenant_view.TenantView([os.path.join(node.dev, n) for n in gn.WANTED], args.exits) if args.exits else None
    st.view = view
    loop = pod_loop.PodLoop(cri, ctd, node, cgroups, st, handler, mode, v2=v2, updates=args.updates,
                            cpus=args.cpus, systemd=systemd, view=view)
    node.write_checkpoint([(loop.uid, "gpu", [gn.gpu_uuid(0)])])
    if systemd is not None:
        systemd.start_slice(loop.pod_slice, "kubepods-burstable.slice")  # kubelet's pod slice, over D-Bus
    elif v2:
        cgroups.make_v2("kubepods/burstable/pod" + loop.uid)
    else:
        cgroups.make_v1("kubepods/burstable/pod" + loop.uid)
    daemon = gn.Daemon(daemon_bin, cfg, os.path.join(base, "gdw-%s.log" % tag), port)
    daemon.start()
    if mode == "check":
        st.check = CheckLoop(daemon_bin, check_cfg)
        st.check.start()
    try:
        loop.run(args.check_iterations if mode == "check" else args.iterations)
    finally:
        if st.check:
            st.check.stop()
        if view:
            view.close()
        created.extend(loop.created)
        st.regrants = daemon.metric_sum("gpu_devwatch_regrants_total")
        if systemd is not None:
            st.systemd_regrants = daemon.metric_sum("gpu_devwatch_regrants_total", 'method="systemd"') or 0
        st.revocations = daemon.metric_sum("gpu_devwatch_revocations_total")
        st.apply_waits = daemon.metric_sum("gpu_devwatch_apply_waits_total")
        st.loads_on_path = daemon.metric_sum("gpu_devwatch_device_programs_loaded_total", 'when="repair"')
        st.loads_ahead = daemon.metric_sum("gpu_devwatch_device_programs_loaded_total", 'when="ahead"')
        code = daemon.stop()
        if code not in (0, None):
            st.errors["gpu-devwatch exited %s" % code] = 1
        if systemd is not None:
            systemd.stop_unit(loop.pod_slice)  # kubelet stops the pod's slice once the pod is gone
    print_run(st)
    if st.runtime_errors and args.show_logs:
        print("  daemon log (last lines):\n    " + daemon.log_tail(12).replace("\n", "\n    "))
    return st


def systemd_runtimes(cells, args, old_runc, versions, not_run):
    """The v2/systemd cells' runtimes that can run here: {handler: (binary, preload)}."""
    runtimes = {}
    for cell, handler in SYSTEMD_CELLS.items():
        if cell not in cells:
            continue
        if handler == "runc":
            runtimes[handler] = (cs.RUNC, None)
        elif handler == "runc-rc93":
            if old_runc:
                runtimes[handler] = (old_runc, None)
            else:
                not_run.append("v2/systemd runc 1.0.0~rc93: no runc rc93 (see the v1 cell's reason)")
        elif args.memlock_shim and os.path.exists(args.memlock_shim):
            runtimes[handler] = (cs.CRUN, args.memlock_shim)
            versions["crun"] = runtime_version(cs.CRUN)
        else:
            not_run.append("v2/systemd crun: needs --memlock-shim (libmemlock_shim.so, built with the tests)")
    return runtimes


def crun_library_binds():
    """Read-only binds of crun's libraries the machine's rootfs lacks, at their own paths."""
    binds = []
    for name in CRUN_LIBS_NOT_IN_ROOTFS:
        for libdir in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
                       "/usr/lib/aarch64-linux-gnu"):
            path = os.path.join(libdir, name)
            if os.path.exists(path):
                binds.append(os.path.realpath(path) + ":" + path)
                break
    return binds


def run_systemd_cells(args, base, cgroups, daemon_bin, image_tar, runtimes, versions, modes, created, stacks,
                      machines, not_run, results):
    """The v2-systemd-* cells: the stack inside one real systemd (nspawn_node.py), the daemon on
    the host; `runtimes`: {handler: (binary, preload)}, each a containerd runtime handler."""
    why = nn.unavailable_reason()
    rootfs = None
    if not why:
        rootfs, why = nn.ensure_rootfs()
    if why:
        not_run += ["v2/systemd %s: %s" % (handler, why) for handler in runtimes]
        return
    ctd_dir = os.path.join(base, "containerd-v2sd")
    node_dir = os.path.join(base, "node-v2sd")
    os.makedirs(ctd_dir)
    node = gn.GpuNode(node_dir, cgroups, v2=True)
    node.build()  # before the boot: its directory is bind-mounted into the machine
    wrappers = {}
    binds_ro = [cs.CONTAINERD, cs.SHIM]
    for handler, (binary, preload) in runtimes.items():
        wrappers[handler] = os.path.join(ctd_dir, handler + "-sd")
        write_systemd_wrapper(wrappers[handler], binary, preload)
        binds_ro += [binary] + ([preload] if preload else [])
        if binary == cs.CRUN:
            binds_ro += crun_library_binds()
    machine = nn.NspawnSystemd(os.path.join(base, "nspawn"), cgroups.name + "-nspawn", binds_rw=[ctd_dir, node_dir],
                               binds_ro=binds_ro)
    machines.append(machine)
    setting_up = time.monotonic()
    machine.boot(rootfs)
    print("v2/systemd: %s booted in %.1f s (leader %d, cgroup %s)" % (
        machine.run_inside(["systemctl", "--version"]).stdout.splitlines()[0], machine.boot_seconds, machine.leader,
        machine.payload), flush=True)
    # kubelet's node-level slices (its systemd driver makes them over D-Bus at start).
    machine.start_slice("kubepods.slice")
    machine.start_slice("kubepods-burstable.slice", "kubepods.slice")
    node.kubepods = machine.payload_rel + "/kubepods.slice"
    node.systemd = {"bus_address": machine.bus_address, "unit_dirs": machine.unit_dirs}
    ctd = nn.ContainerdInside(ctd_dir, wrappers, machine, "gdw-containerd-%d" % os.getpid())
    stacks.append(ctd)
    ctd.start()
    ctd.import_image(image_tar)
    from cri_client import CriClient
    cri = CriClient(ctd.address, os.path.join(base, "gen"))
    print("v2/systemd: containerd %d in %s, stack ready in %.1f s" % (ctd.pid, ctd.unit, time.monotonic() - setting_up),
          flush=True)
    try:
        for handler in runtimes:
            label = "v2/systemd %s (no CPU at create)" % versions[handler]
            for mode in modes:
                results.append(run_cell(label, handler, ctd, cri, cgroups, node, daemon_bin, mode, args, base, created,
                                        v2=True, systemd=machine))
    finally:
        cri.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--daemon", required=True, help="the gpu-devwatch binary (copied before use)")
    parser.add_argument("--memlock-shim", help="libmemlock_shim.so for crun on cgroup v2")
    parser.add_argument("--show-logs", action="store_true", help="print daemon log tails on errors")
    args = parser.parse_args()
    if args.memlock_shim:
        # LD_PRELOAD for crun, which runs in the bundle's directory: a relative path would not load.
        args.memlock_shim = os.path.abspath(args.memlock_shim)
    args.iterations = env_int("GDW_CRI_ITERATIONS", 50)
    args.check_iterations = env_int("GDW_CRI_CHECK_ITERATIONS", 25)
    args.updates = env_int("GDW_CRI_UPDATES", 2)
    ncpu = os.cpu_count() or 1
    args.cpus = ["0", "%d" % (ncpu - 1), "0-%d" % (ncpu - 1)] if ncpu > 1 else ["0"]
    cells = [c for c in os.environ.get("GDW_CRI_CELLS", ALL_CELLS).split(",") if c]
    modes = [m for m in os.environ.get("GDW_CRI_MODES", "enforce,observe,check").split(",") if m]
    ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")

    if os.geteuid() != 0:
        print("SKIP: needs root (cgroups, mknod, containerd)")
        return SKIP
    missing = cs.missing_tools()
    if missing:
        print("SKIP: missing " + ", ".join(missing) + " (scripts/install-deps.sh installs them)")
        return SKIP
    try:
        import grpc  # noqa: F401
        import grpc_tools  # noqa: F401
    except ImportError as e:
        print("FAIL: %s: install python3-grpcio and python3-grpc-tools (scripts/install-deps.sh)" % e)
        return 1
    if not os.path.isdir("/sys/fs/cgroup/devices"):
        print("FAIL: no cgroup v1 devices hierarchy at /sys/fs/cgroup/devices: the v1 cells need a hybrid host")
        return 1

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    base = tempfile.mkdtemp(prefix="gdw-cri-matrix-%d-" % os.getpid())
    cgroups = gn.TestCgroups()
    daemon_bin = gn.copy_binary(args.daemon, base)
    print("gpu-devwatch: " + subprocess.run([daemon_bin, "version"], capture_output=True, text=True).stdout.strip())
    print("containerd: " + subprocess.run([cs.CONTAINERD, "--version"], capture_output=True, text=True).stdout.strip())
    print("iterations per cell and mode: %d, in check mode %d (each: 1 start, %d updates, 1 restart); temp dir %s; "
          "cgroups /%s" % (args.iterations, args.check_iterations, args.updates, base, cgroups.name), flush=True)

    not_run = []
    created = []
    exits = RuntimeExits()
    started, why = exits.start()
    args.exits = exits if started else None
    if not started:
        not_run.append("the tenant's view from the runtime's exit (every cell): " + why)
    run_containerd_existed = os.path.exists("/run/containerd")
    results = []
    stacks = []
    machines = []
    began = time.monotonic()
    failed_setup = None
    try:
        handlers = {"runc": cs.RUNC}
        versions = {"runc": runtime_version(cs.RUNC)}
        old = None
        if any(c.endswith("-runc-rc93") for c in cells):
            old, why = cs.fetch_old_runc(os.environ.get("GDW_TEST_ROOTFS_CACHE") or None)
            if old:
                versions["runc-rc93"] = runtime_version(old)
            else:
                not_run.append("runc 1.0.0~rc93 (every rc93 cell): " + why)
        if "v1-runc-rc93" in cells and old:
            handlers["runc-rc93"] = old
        if "v1-crun" in cells:
            write_crun_wrapper(os.path.join(base, "crun-v1"))
            handlers["crun"] = os.path.join(base, "crun-v1")
            versions["crun"] = runtime_version(cs.CRUN)
        image_tar = os.path.join(base, "image.tar")
        cs.build_image_tar(image_tar)

        v1_cells = [(c, c[len("v1-"):]) for c in cells if c.startswith("v1-") and c[len("v1-"):] in handlers]
        if v1_cells:
            node = gn.GpuNode(os.path.join(base, "node-v1"), cgroups)
            node.build()
            ctd = cs.Containerd(os.path.join(base, "containerd-v1"), handlers)
            stacks.append(ctd)
            ctd.start()
            ctd.import_image(image_tar)
            from cri_client import CriClient
            cri = CriClient(ctd.address, os.path.join(base, "gen"))
            for cell, handler in v1_cells:
                label = "v1/cgroupfs " + versions[handler]
                for mode in modes:
                    results.append(run_cell(label, handler, ctd, cri, cgroups, node, daemon_bin, mode, args, base,
                                            created))
            cri.close()
        v2_handlers = {}
        if "v2-runc" in cells:
            write_v2_wrapper(os.path.join(base, "runc-v2"), cs.RUNC)
            v2_handlers["runc"] = os.path.join(base, "runc-v2")
        if "v2-runc-rc93" in cells and old:
            write_v2_wrapper(os.path.join(base, "runc-rc93-v2"), old)
            v2_handlers["runc-rc93"] = os.path.join(base, "runc-rc93-v2")
        if "v2-crun" in cells:
            if args.memlock_shim and os.path.exists(args.memlock_shim):
                write_v2_wrapper(os.path.join(base, "crun-v2"), cs.CRUN, args.memlock_shim)
                v2_handlers["crun"] = os.path.join(base, "crun-v2")
                versions["crun"] = runtime_version(cs.CRUN)
            else:
                not_run.append("v2/cgroupfs crun: needs --memlock-shim (libmemlock_shim.so, built with the tests): "
                               "root lacks CAP_SYS_RESOURCE here and crun 1.8 gives up when RLIMIT_MEMLOCK "
                               "cannot be raised before BPF_PROG_LOAD")
        if v2_handlers:
            node = gn.GpuNode(os.path.join(base, "node-v2"), cgroups, v2=True)
            node.build()
            ctd = cs.Containerd(os.path.join(base, "containerd-v2"), v2_handlers, unified_ns=True)
            stacks.append(ctd)
            ctd.start()
            ctd.import_image(image_tar)
            from cri_client import CriClient
            cri = CriClient(ctd.address, os.path.join(base, "gen"))
            for handler in v2_handlers:
                label = "v2/cgroupfs %s (no CPU)" % versions[handler]
                for mode in modes:
                    results.append(run_cell(label, handler, ctd, cri, cgroups, node, daemon_bin, mode, args, base,
                                            created, v2=True))
            cri.close()
        sd_runtimes = systemd_runtimes(cells, args, old, versions, not_run)
        if sd_runtimes:
            run_systemd_cells(args, base, cgroups, daemon_bin, image_tar, sd_runtimes, versions, modes, created,
                              stacks, machines, not_run, results)
    except Terminated as e:
        failed_setup = "terminated by " + str(e)
    except Exception as e:  # a broken stack is a failure with its reason, after the cleanup
        import traceback
        traceback.print_exc()
        failed_setup = "%s: %s" % (type(e).__name__, e)
        for ctd in stacks:
            print("containerd log (%s):\n%s" % (ctd.base, ctd.log_tail(20)))
        for machine in machines:
            print("nspawn console (%s):\n%s" % (machine.machine, machine.console_tail(20)))
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        exits.stop()
        for ctd in stacks:
            ctd.stop()
            ctd.unmount_all()
        left = []
        for machine in machines:
            stopping = time.monotonic()
            left += machine.cleanup()
            print("v2/systemd: %s stopped in %.1f s, removed in %.1f s" % (
                machine.machine, machine.stop_seconds, time.monotonic() - stopping))
        left += cgroups.cleanup()
        remove_runtime_state(created, run_containerd_existed)
        if left:
            print("cleanup: could not remove " + ", ".join(left))
        if os.environ.get("GDW_CRI_KEEP") == "1":
            print("kept " + base)
        else:
            shutil.rmtree(base, ignore_errors=True)

    table(results, not_run)
    print("\n%.0f s in all" % (time.monotonic() - began))
    failures = verdict(results, not_run, ci)
    if failed_setup:
        failures.insert(0, "the stack failed: " + failed_setup)
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
