#!/usr/bin/env bash
# The main job (README): installs what it needs, builds only what it runs (the daemon and
# the demo; scripts/test.sh builds everything), and then
#  - on a node where kubelet runs (a kubepods cgroup exists): runs the daemon in the
#    foreground with /etc/gpu-devwatch/gpu-devwatch.yaml if present, else the defaults;
#  - elsewhere: the demo on a sandbox node (real cgroups, no GPU or kubelet needed).
# Must run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $(id -u) -ne 0 ]]; then echo "run.sh: run as root (device cgroups, mknod, BPF)" >&2; exit 2; fi

scripts/install-deps.sh run
scripts/build.sh first-run  # gpu-devwatch and gdw-demo (test/CMakeLists.txt)

if [[ -d /sys/fs/cgroup/devices/kubepods || -d /sys/fs/cgroup/devices/kubepods.slice ||
      -d /sys/fs/cgroup/kubepods || -d /sys/fs/cgroup/kubepods.slice ]]; then
  echo "run.sh: kubelet's pod cgroups found: starting the daemon (Ctrl-C to stop)"
  exec build/daemon/gpu-devwatch run "$@"
fi
echo "run.sh: no kubelet on this machine: running the demo on a sandbox node"
exec build/test/gdw-demo
