"""A private containerd 1.6 with its CRI plugin, for the real-runtime matrix (cri_matrix.py).

Everything lives under one temp dir: config, root, state, the gRPC socket, the CNI dirs and
the test's own image. Runtime handlers: `runc` (Debian's runc), `runc-rc93` (Debian 11's
runc 1.0.0~rc93, fetched by fetch_old_runc.sh into a cache, never installed) and `crun`, each
through containerd-shim-runc-v2 with BinaryName. No registry is reachable: the sandbox and
container image is busybox-static in an OCI layout tar built here and imported with ctr.

Only processes this module started are ever signalled: containerd by its PID, then the shims
it spawned (found by the unique socket path on their command line), each by PID.
"""

import hashlib
import io
import json
import os
import signal
import subprocess
import tarfile
import time

from proc_util import file_tail, kill_quietly

IMAGE_REF = "docker.io/library/gdw-cri-busybox:1"
SANDBOX_CMD = ["/bin/sleep", "1000000"]
BUSYBOX = "/bin/busybox"
# Applets the image links to busybox (sandbox and GPU container commands, the exec probe).
APPLETS = ["sh", "sleep", "cat", "ls", "true", "echo", "sed", "grep"]

RUNC = "/usr/sbin/runc"
CRUN = "/usr/bin/crun"
CONTAINERD = "/usr/bin/containerd"
CTR = "/usr/bin/ctr"
SHIM = "/usr/bin/containerd-shim-runc-v2"

HERE = os.path.dirname(os.path.abspath(__file__))


def missing_tools():
    """The runtime binaries the test cannot do without ([] when all are there)."""
    return [p for p in (CONTAINERD, CTR, SHIM, RUNC, CRUN, BUSYBOX) if not os.access(p, os.X_OK)]


def fetch_old_runc(cache_dir=None):
    """(path of runc 1.0.0~rc93, "") or (None, why it could not be fetched)."""
    cmd = [os.path.join(HERE, "fetch_old_runc.sh")]
    if cache_dir:
        cmd.append(cache_dir)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return None, "fetch_old_runc.sh timed out after 300 s"
    if r.returncode != 0:
        return None, (r.stderr.strip() or "fetch_old_runc.sh failed (exit %d)" % r.returncode)
    return r.stdout.strip().splitlines()[-1], ""


def _tar_add(tar, name, data=None, mode=0o755, symlink=None, directory=False):
    info = tarfile.TarInfo(name)
    info.mtime = 0
    info.uid = info.gid = 0
    if directory:
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
        tar.addfile(info)
    elif symlink is not None:
        info.type = tarfile.SYMTYPE
        info.linkname = symlink
        info.mode = 0o777
        tar.addfile(info)
    else:
        info.size = len(data)
        info.mode = mode
        tar.addfile(info, io.BytesIO(data))


def build_image_tar(path):
    """An OCI image layout tar: one uncompressed layer with busybox-static and its applets."""
    layer_buf = io.BytesIO()
    with tarfile.open(fileobj=layer_buf, mode="w", format=tarfile.PAX_FORMAT) as layer:
        for d in ("bin", "etc", "tmp", "gpu"):
            _tar_add(layer, d, directory=True)
        with open(BUSYBOX, "rb") as f:
            _tar_add(layer, "bin/busybox", f.read())
        for applet in APPLETS:
            _tar_add(layer, "bin/" + applet, symlink="busybox")
        _tar_add(layer, "etc/passwd", b"root:x:0:0:root:/:/bin/sh\n", mode=0o644)
        _tar_add(layer, "etc/group", b"root:x:0:\n", mode=0o644)
    layer_bytes = layer_buf.getvalue()
    layer_digest = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": ["PATH=/bin"], "Cmd": SANDBOX_CMD, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }, sort_keys=True).encode()
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest,
                   "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest,
                    "size": len(layer_bytes)}],
    }, sort_keys=True).encode()
    manifest_digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    index = json.dumps({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest,
                       "size": len(manifest),
                       "platform": {"architecture": "amd64", "os": "linux"},
                       "annotations": {"io.containerd.image.name": IMAGE_REF,
                                       "org.opencontainers.image.ref.name": IMAGE_REF.rsplit(":", 1)[1]}}],
    }, sort_keys=True).encode()
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        _tar_add(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}', mode=0o644)
        _tar_add(tar, "index.json", index, mode=0o644)
        _tar_add(tar, "blobs", directory=True)
        _tar_add(tar, "blobs/sha256", directory=True)
        for digest, blob in ((layer_digest, layer_bytes), (config_digest, config), (manifest_digest, manifest)):
            _tar_add(tar, "blobs/sha256/" + digest.split(":")[1], blob, mode=0o644)


def _toml_str(s):
    return json.dumps(s)  # a TOML basic string is a JSON string for these paths


class Containerd:
    """containerd with the CRI plugin under `base` (a temp dir this test owns)."""

    def __init__(self, base, handlers, snapshotter="overlayfs", unified_ns=False, log_level="info",
                 systemd_cgroup=False):
        # handlers: {"runc": "/usr/sbin/runc", "runc-rc93": "...", "crun": "/usr/bin/crun"}
        self.base = base
        self.handlers = dict(handlers)
        self.snapshotter = snapshotter
        self.unified_ns = unified_ns
        self.systemd_cgroup = systemd_cgroup  # the runtimes' systemd cgroup driver (cgroupfs when False)
        self.log_level = log_level
        self.root = os.path.join(base, "root")
        self.state = os.path.join(base, "state")
        self.address = os.path.join(base, "containerd.sock")
        self.config = os.path.join(base, "config.toml")
        self.log_path = os.path.join(base, "containerd.log")
        self.proc = None
        self.log = None

    @property
    def bundles_dir(self):
        """Where the runc shim keeps each task's bundle (config.json with the CRI annotations)."""
        return os.path.join(self.state, "io.containerd.runtime.v2.task", "k8s.io")

    def write_config(self):
        for d in (self.root, self.state, self.bundles_dir, os.path.join(self.base, "cni", "bin"),
                  os.path.join(self.base, "cni", "conf"), os.path.join(self.base, "opt")):
            os.makedirs(d, exist_ok=True)
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        lines = [
            "version = 2",
            "root = " + _toml_str(self.root),
            "state = " + _toml_str(self.state),
            "oom_score = 0",
            # Plugins that would probe the host's disks or need other daemons.
            'disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",'
            ' "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper",'
            ' "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]',
            "[grpc]",
            "  address = " + _toml_str(self.address),
            "[ttrpc]",
            "  address = " + _toml_str(self.address + ".ttrpc"),
            "[debug]",
            '  address = ""',
            "  level = " + _toml_str(self.log_level),
            "[metrics]",
            '  address = ""',
            '[plugins."io.containerd.internal.v1.opt"]',
            "  path = " + _toml_str(os.path.join(self.base, "opt")),
            "[" + cri + "]",
            "  sandbox_image = " + _toml_str(IMAGE_REF),
            "  restrict_oom_score_adj = true",
            "  disable_apparmor = true",
            "  enable_selinux = false",
            '  stream_server_address = "127.0.0.1"',
            '  stream_server_port = "0"',
            "  enable_unprivileged_ports = false",
            "  enable_unprivileged_icmp = false",
            "[" + cri + ".containerd]",
            "  snapshotter = " + _toml_str(self.snapshotter),
            # The CRI plugin refuses to load when its default runtime has no section.
            "  default_runtime_name = " + _toml_str("runc" if "runc" in self.handlers else next(iter(self.handlers))),
            "[" + cri + ".cni]",
            "  bin_dir = " + _toml_str(os.path.join(self.base, "cni", "bin")),
            "  conf_dir = " + _toml_str(os.path.join(self.base, "cni", "conf")),
        ]
        for name, binary in self.handlers.items():
            section = cri + ".containerd.runtimes." + _toml_str(name)
            lines += [
                "[" + section + "]",
                '  runtime_type = "io.containerd.runc.v2"',
                "[" + section + ".options]",
                "  BinaryName = " + _toml_str(binary),
                "  SystemdCgroup = " + ("true" if self.systemd_cgroup else "false"),
            ]
        with open(self.config, "w") as f:
            f.write("\n".join(lines) + "\n")

    def launch(self):
        """Starts containerd (or what runs it); the Popen whose exit means containerd's."""
        cmd = [CONTAINERD, "--config", self.config]
        if self.unified_ns:
            # cgroup v2 for containerd, its shims and the runtimes: a private mount namespace
            # where the host's cgroup2 mount (/sys/fs/cgroup/unified) is /sys/fs/cgroup.
            cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                   "mount --bind /sys/fs/cgroup/unified /sys/fs/cgroup && exec \"$@\"", "sh"] + cmd
        return subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)

    def started(self):
        """Called once containerd answers."""

    def start(self, timeout=30):
        self.write_config()
        self.log = open(self.log_path, "ab")
        self.proc = self.launch()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("containerd exited with %s:\n%s" % (self.proc.returncode, self.log_tail()))
            if os.path.exists(self.address):
                r = subprocess.run([CTR, "-a", self.address, "version"], capture_output=True, text=True)
                if r.returncode == 0:
                    self.started()
                    return
            time.sleep(0.1)
        raise RuntimeError("containerd did not answer on %s within %d s:\n%s" % (self.address, timeout,
                                                                                 self.log_tail()))

    def import_image(self, tar_path):
        r = subprocess.run([CTR, "-a", self.address, "-n", "k8s.io", "images", "import",
                            "--snapshotter", self.snapshotter, tar_path], capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError("ctr images import failed: " + (r.stderr or r.stdout).strip())
        r = subprocess.run([CTR, "-a", self.address, "-n", "k8s.io", "images", "ls", "-q"],
                           capture_output=True, text=True, timeout=30)
        if IMAGE_REF not in r.stdout.split():
            raise RuntimeError("image %s not listed after import: %s" % (IMAGE_REF, r.stdout.strip()))

    def log_tail(self, lines=30):
        return file_tail(self.log_path, lines)

    def shim_pids(self):
        """PIDs of the shims this containerd started (their command line names its socket)."""
        pids = []
        needle = self.address.encode()
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as f:
                    args = f.read().split(b"\0")
            except OSError:
                continue
            if args and args[0].endswith(b"containerd-shim-runc-v2") and needle in args:
                pids.append(int(entry))
        return pids

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.end_shims_and_log()

    def end_shims_and_log(self):
        # Shims outlive containerd by design; end the ones ours started.
        for pid in self.shim_pids():
            kill_quietly(pid)
        if self.log is not None:
            self.log.close()
            self.log = None

    def unmount_all(self):
        """Unmounts whatever is still mounted under the base dir (rootfs, shm), deepest first."""
        mounts = []
        with open("/proc/self/mountinfo") as f:
            for line in f:
                point = line.split()[4].replace("\\040", " ")
                if point == self.base or point.startswith(self.base + "/"):
                    mounts.append(point)
        for point in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True)
        return mounts
