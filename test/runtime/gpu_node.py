"""The GPU node around the real runtime: what gpu-devwatch reads, and the daemon itself.

- Cgroups only under a unique parent, /gdw-test-cri-<pid>/kubepods (in every v1 controller,
  as kubelet makes them), removed deepest first in every hierarchy at the end.
- A fixture /proc (driver/nvidia/gpus/*/information, nvidia-caps, devices, a copy of the real
  /proc/cgroups) and a /dev root with mknod'ed nodes: two GPUs (195:0, 195:1), nvidiactl
  (195:255), nvidia-uvm (237:0) and nvidia-uvm-tools (237:1). No driver is behind them: an
  allowed open() gives ENXIO, a denied one EPERM. The same directory is bind-mounted into
  the GPU container at /gpu (outside its /dev, which the runtime mounts a tmpfs over).
- kubelet's device-manager checkpoint allocating GPU 0 to the pod's `gpu` container, with
  kubelet's checksum (FNV-1a 32 over go-spew's dump, daemon/kubelet/checkpoint_checksum.cpp).
- gpu-devwatch run --config <file>, probe on (the default), mode enforce or observe.
"""

import base64
import json
import os
import random
import shutil
import signal
import socket
import stat
import subprocess
import time
import urllib.request

from proc_util import file_tail

NVIDIA_MAJOR = 195
UVM_MAJOR = 237
CAPS_MAJOR = 238
GPUS = 2
# (name, major, minor) of every fixture node; only GPU 0 is allocated.
NODES = [("nvidia0", NVIDIA_MAJOR, 0), ("nvidia1", NVIDIA_MAJOR, 1), ("nvidiactl", NVIDIA_MAJOR, 255),
         ("nvidia-uvm", UVM_MAJOR, 0), ("nvidia-uvm-tools", UVM_MAJOR, 1)]
# What the GPU container must hold: the allocated GPU and the control nodes the daemon adds.
WANTED = ["nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"]
NOT_ALLOCATED = ["nvidia1"]
CGROUP_ROOT = "/sys/fs/cgroup"


def gpu_uuid(i):
    return "GPU-%08x-e770-3ea8-8ac3-8a1d4197%04x" % (0x0650A168 + i, i)


def node_rule(name, access="rw"):
    for n, major, minor in NODES:
        if n == name:
            return "c %d:%d %s" % (major, minor, access)
    raise KeyError(name)


# --- cgroup v1 device rules -------------------------------------------------------------


def parse_rules(text):
    """devices.list lines → [(type, major, minor, access)]; '*' stays a string."""
    rules = []
    for line in text.split("\n"):
        parts = line.split()
        if len(parts) != 3:
            continue
        major, minor = parts[1].split(":")
        rules.append((parts[0], major, minor, parts[2]))
    return rules


def _covers(rule, typ, major, minor, access):
    t, ma, mi, acc = rule
    return ((t == "a" or t == typ) and (ma == "*" or ma == str(major)) and (mi == "*" or mi == str(minor))
            and set(access) <= set(acc))


def allows(rules, typ, major, minor, access):
    return any(_covers(r, typ, major, minor, access) for r in rules)


def rule_within(rule, allowed):
    """True when everything `rule` grants is granted by one rule of `allowed`."""
    t, ma, mi, acc = rule
    for a in allowed:
        at, ama, ami, aacc = a
        if at != "a" and at != t:
            continue
        if ama != "*" and ama != ma:
            continue
        if ami != "*" and ami != mi:
            continue
        if set(acc) <= set(aacc):
            return True
    return False


def spec_rules(config_json):
    """The allow rules of an OCI config's linux.resources.devices, as devices.list tuples."""
    out = []
    for d in (config_json.get("linux", {}).get("resources", {}) or {}).get("devices", []) or []:
        if not d.get("allow"):
            continue
        typ = d.get("type", "a") or "a"
        major = d.get("major")
        minor = d.get("minor")
        out.append((typ, "*" if major is None or major < 0 else str(major),
                    "*" if minor is None or minor < 0 else str(minor), d.get("access", "rwm")))
    return out


# --- the checkpoint ---------------------------------------------------------------------


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(num, payload):
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def alloc_resp(env):
    """ContainerAllocateResponse{envs} in protobuf (deviceplugin v1beta1, field 1 = map)."""
    out = b""
    for k, v in sorted(env.items()):
        out += _field(1, _field(1, k.encode()) + _field(2, v.encode()))
    return out


def _fnv1a32(data):
    h = 2166136261
    for c in data:
        h = ((h ^ c) * 16777619) & 0xFFFFFFFF
    return h


def _spew(data):
    def strings(ids):
        return "[" + " ".join(ids) + "]"

    out = "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)"
    entries = data["PodDeviceEntries"]
    if entries is None:
        out += "<nil>"
    else:
        parts = []
        for e in entries:
            ids = " ".join(k + ":" + strings(v) for k, v in sorted(e["DeviceIDs"].items(), key=lambda kv: int(kv[0])))
            resp = base64.b64decode(e["AllocResp"])
            parts.append("{PodUID:(string)%s ContainerName:(string)%s ResourceName:(string)%s "
                         "DeviceIDs:(checkpoint.DevicesPerNUMA)map[%s] AllocResp:([]uint8)[%s]}" % (
                             e["PodUID"], e["ContainerName"], e["ResourceName"], ids, " ".join(str(b) for b in resp)))
        out += "[" + " ".join(parts) + "]"
    reg = " ".join(k + ":" + strings(v) for k, v in sorted(data["RegisteredDevices"].items(),
                                                            key=lambda kv: kv[0].encode()))
    return out + " RegisteredDevices:(map[string][]string)map[" + reg + "]}"


def checkpoint_text(allocations):
    """kubelet_internal_checkpoint allocating [(pod_uid, container, [gpu uuid])] of nvidia.com/gpu."""
    entries = []
    for pod_uid, container, ids in allocations:
        entries.append({"PodUID": pod_uid, "ContainerName": container, "ResourceName": "nvidia.com/gpu",
                        "DeviceIDs": {"0": ids},
                        "AllocResp": base64.b64encode(alloc_resp({"NVIDIA_VISIBLE_DEVICES": ",".join(ids)})).decode()})
    data = {"PodDeviceEntries": entries or None,
            "RegisteredDevices": {"nvidia.com/gpu": [gpu_uuid(i) for i in range(GPUS)]}}
    checksum = _fnv1a32(_spew(data).encode())
    return '{"Data":%s,"Checksum":%d}' % (json.dumps(data, separators=(",", ":")), checksum)


# --- cgroups ------------------------------------------------------------------------------


def v1_hierarchies():
    """Mounted v1 hierarchies under /sys/fs/cgroup (real directories, not the co-mount links)."""
    out = []
    for name in sorted(os.listdir(CGROUP_ROOT)):
        path = os.path.join(CGROUP_ROOT, name)
        if os.path.islink(path) or not os.path.isdir(path) or name == "unified":
            continue
        if os.path.exists(os.path.join(path, "cgroup.procs")):
            out.append(path)
    return out


def write_file(path, text):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def read_file(path):
    with open(path) as f:
        return f.read()


class TestCgroups:
    """/gdw-test-cri-<pid>[-tag] in every hierarchy; everything below it is this test's."""

    def __init__(self, tag=""):
        self.name = "gdw-test-cri-%d%s" % (os.getpid(), "-" + tag if tag else "")

    def all_hierarchies(self):
        hs = v1_hierarchies()
        if os.path.isdir(os.path.join(CGROUP_ROOT, "unified")):
            hs.append(os.path.join(CGROUP_ROOT, "unified"))
        return hs

    def make_v1(self, rel):
        """mkdir -p <parent>/<rel> in every v1 hierarchy, as kubelet's cgroupfs driver does."""
        for h in v1_hierarchies():
            path = os.path.join(h, self.name)
            for part in [""] + rel.split("/"):
                path = os.path.join(path, part) if part else path
                if not os.path.isdir(path):
                    os.mkdir(path)
                    if os.path.basename(h) == "cpuset" or "cpuset" in os.path.basename(h).split(","):
                        parent = os.path.dirname(path)
                        for f in ("cpuset.cpus", "cpuset.mems"):
                            write_file(os.path.join(path, f), read_file(os.path.join(parent, f)).strip() or "\n")

    def make_v2(self, rel):
        path = os.path.join(CGROUP_ROOT, "unified", self.name, rel)
        os.makedirs(path, exist_ok=True)

    def cleanup(self):
        """Kills what is left in the tree (only this test's processes live there), then removes
        every cgroup of the tree, deepest first, in every hierarchy. Returns what it could not
        remove."""
        left = []
        for h in self.all_hierarchies():
            top = os.path.join(h, self.name)
            if not os.path.isdir(top):
                continue
            dirs = [d for d, _, _ in os.walk(top)]
            for d in dirs:
                try:
                    for pid in read_file(os.path.join(d, "cgroup.procs")).split():
                        try:
                            os.kill(int(pid), signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                except OSError:
                    pass
            for d in sorted(dirs, key=len, reverse=True):
                for _ in range(50):
                    try:
                        os.rmdir(d)
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.1)
                else:
                    left.append(d)
        return left


# --- the fixture node and the daemon --------------------------------------------------------


class GpuNode:
    def __init__(self, base, cgroups, v2=False, kubepods=None, systemd=None):
        self.base = base
        self.cgroups = cgroups
        self.v2 = v2
        # The v2/systemd cell: kubepods.slice below the nspawn machine's cgroup2 root (relative to
        # the host's cgroup2 mount), and that systemd's bus and unit dirs as the host reaches
        # them: {"bus_address": ..., "unit_dirs": [...]}.
        self.kubepods = kubepods
        self.systemd = systemd
        self.dev = os.path.join(base, "dev")
        self.proc = os.path.join(base, "proc")
        self.kubelet = os.path.join(base, "kubelet")
        self.checkpoint = os.path.join(self.kubelet, "device-plugins", "kubelet_internal_checkpoint")

    def kubepods_rel(self):
        return self.kubepods or self.cgroups.name + "/kubepods"

    def build(self):
        for d in (self.dev, os.path.join(self.kubelet, "device-plugins"), os.path.join(self.kubelet, "pod-resources"),
                  os.path.join(self.base, "cdi")):
            os.makedirs(d, exist_ok=True)
        for name, major, minor in NODES:
            os.mknod(os.path.join(self.dev, name), 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        devices = ("Character devices:\n  1 mem\n  5 /dev/tty\n%d nvidia\n%d nvidiactl\n%d nvidia-uvm\n"
                   "%d nvidia-caps\n\nBlock devices:\n  7 loop\n" % (NVIDIA_MAJOR, NVIDIA_MAJOR, UVM_MAJOR, CAPS_MAJOR))
        self._write(os.path.join(self.proc, "devices"), devices)
        for i in range(GPUS):
            bus = "0000:%02x:00.0" % (0x10 + i)
            self._write(os.path.join(self.proc, "driver/nvidia/gpus", bus, "information"),
                        "Model: \t\t NVIDIA H20\nIRQ:             134\nGPU UUID: \t %s\nVideo BIOS: \t 96.00.af.00.01\n"
                        "Bus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t %s\n"
                        "Device Minor: \t %d\nGPU Excluded: \t No\n" % (gpu_uuid(i), bus, i))
        self._write(os.path.join(self.proc, "driver/nvidia-caps/mig-minors"), "config 1\nmonitor 2\n")
        # The probe names v1 hierarchies by the running kernel's ids: the real file.
        self._write(os.path.join(self.proc, "cgroups"), read_file("/proc/cgroups"))
        self.write_checkpoint([])

    @staticmethod
    def _write(path, text):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)

    def write_checkpoint(self, allocations):
        tmp = self.checkpoint + ".tmp"
        self._write(tmp, checkpoint_text(allocations))
        os.rename(tmp, self.checkpoint)

    def write_config(self, path, mode, bundles_dir, metrics_port):
        if self.v2:
            cgroup = "cgroup:\n  root: %s/unified\n  version: v2\n" % CGROUP_ROOT
        else:
            cgroup = "cgroup:\n  root: %s\n  version: v1\n" % CGROUP_ROOT
        yaml = (
            "mode: %s\n" % mode + cgroup +
            "  kubepods: %s\n" % self.kubepods_rel() +
            "kubelet:\n  checkpoint: %s\n  device_plugins_dir: %s\n  pod_resources_socket: %s\n" % (
                self.checkpoint, os.path.join(self.kubelet, "device-plugins"),
                os.path.join(self.kubelet, "pod-resources", "kubelet.sock")) +
            "cdi:\n  spec_dirs: [%s]\n" % os.path.join(self.base, "cdi") +
            "runtime:\n  state_dirs: [%s]\n" % bundles_dir +
            "devices:\n  dev_root: %s\n  proc_root: %s\n  nvml_library: /nonexistent/libnvidia-ml.so.1\n" % (
                self.dev, self.proc) +
            "metrics:\n  listen: 127.0.0.1:%d\n" % metrics_port)
        if self.systemd:
            yaml += "systemd:\n  bus_address: %s\n  unit_dirs: [%s]\n" % (
                self.systemd["bus_address"], ", ".join(self.systemd["unit_dirs"]))
        self._write(path, yaml)
        return path


def free_port():
    """A loopback port from below the kernel's ephemeral range: containerd's stream server
    binds port 0 meanwhile and is given an ephemeral one, so it never takes this one (a
    port the kernel chose could be handed out again). The kernel's choice where that range
    leaves no room."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    candidates = [random.randint(10000, low - 1) for _ in range(200)] if low - 1 > 10000 else []
    for port in candidates + [0]:
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
            return s.getsockname()[1]
        except OSError:
            continue
        finally:
            s.close()
    raise RuntimeError("no free loopback port")


class Daemon:
    def __init__(self, binary, config_path, log_path, port):
        self.binary = binary
        self.config_path = config_path
        self.log_path = log_path
        self.port = port
        self.proc = None

    def start(self, timeout=20):
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([self.binary, "run", "--config", self.config_path], stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("gpu-devwatch exited with %s:\n%s" % (self.proc.returncode, self.log_tail()))
            if b" ready" in open(self.log_path, "rb").read():
                return
            time.sleep(0.05)
        raise RuntimeError("gpu-devwatch not ready within %d s:\n%s" % (timeout, self.log_tail()))

    def metrics(self):
        # Straight to the loopback port: an http_proxy in the environment must not catch it.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open("http://127.0.0.1:%d/metrics" % self.port, timeout=5) as r:
                return r.read().decode()
        except OSError:
            return ""

    def metric_sum(self, name, label=None):
        """The sum of a metric's series (only those whose labels hold `label`, e.g.
        'method="systemd"'); None when there is none."""
        total = 0.0
        found = False
        for line in self.metrics().splitlines():
            if label is not None and label not in line.split(" ", 1)[0]:
                continue
            if line.startswith(name + "{") or line.startswith(name + " "):
                try:
                    total += float(line.rsplit(" ", 1)[1])
                    found = True
                except ValueError:
                    pass
        return total if found else None

    def stop(self):
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode

    def log_tail(self, lines=40):
        return file_tail(self.log_path, lines)


def copy_binary(src, dest_dir):
    """A private copy, so that a rebuild does not swap the binary during the run."""
    dest = os.path.join(dest_dir, "gpu-devwatch")
    shutil.copy2(src, dest)
    return dest
