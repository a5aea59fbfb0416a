#!/usr/bin/env bash
# The kernel matrix: Debian's own kernels booted under QEMU, each twice (with `bpf` in
# `lsm=` and without it), running the privileged tests that need only a kernel (cgroup v2
# device programs, the eBPF probe, the daemon on a v2 sandbox node) on pure cgroup v2.
#
#   scripts/kernel-matrix.sh fetch [KERNEL…]     download the kernels (6.1, 6.12) into .cache/kernels
#   scripts/kernel-matrix.sh initramfs           build the guest's initramfs from the build
#   scripts/kernel-matrix.sh cell KERNEL LSM     boot one cell (LSM: bpf_lsm or no_bpf_lsm), report
#   scripts/kernel-matrix.sh [all]               every cell, one after the other
#   scripts/kernel-matrix.sh run KERNEL LSM PROGRAM [ARG…]
#                                                boot one cell that runs PROGRAM (a file, with
#                                                every library it links) with ARGs instead of
#                                                the tests and prints its output; its exit
#                                                status is PROGRAM's (a bench in a guest:
#                                                docs/performance.md)
#
# One arm64 cell, KERNEL arm64-6.1 (Debian's arm64 6.1 under qemu-system-aarch64 -M virt),
# runs the arm64 cross-build's tests (build-arm64) of GUEST_TESTS_ARM64 on a hybrid v1 + v2
# layout like this host's: a grant proven by open(), a v1 and a v2 repair, the probe's record
# of who revoked. Its busybox is busybox-static:arm64, fetched like the kernels.
#
# ctest runs one test per cell (privileged.kernel_matrix.6_1.bpf_lsm …,
# privileged.kernel_matrix.arm64_6_1 where build-arm64 exists; test/CMakeLists.txt).
# A cell prints each guest test's result and exits non-zero when a guest test failed or was
# skipped, the guest did not boot or did not finish. A host without the cell's QEMU skips
# (a "[  SKIPPED ]" line, which ctest reports as skipped; under CI scripts/test.sh fails it).
#
# The kernels come from Debian's archive through a private apt source list and private apt
# state under .cache/kernels/apt (the host's apt configuration and dpkg database are not
# touched); only ./boot of each package is extracted, nothing is installed. They are fetched
# once and kept; GDW_KERNEL_REFRESH=1 fetches the newest again.
#
# The guest is an initramfs: busybox-static, /init (written below), the daemon, the test
# binaries of GUEST_TESTS and fake NVML with every library they link and their loader, at
# the same paths as on this host (the tests find the daemon and fixtures by the absolute
# paths compiled into them), and test/fixtures. No kernel module is loaded: everything used
# (serial console, cgroup2, BPF, BTF, devtmpfs, tracefs) is built into Debian's kernels.
# Results come back on the guest's second serial port (ttyS1, a file on this host; on arm64's
# virt board a PCI 16550, ttyS0 there: the PL011 ttyAMA0 is the console).
#
# Environment: GDW_BUILD_DIR (default build), GDW_ARM64_BUILD_DIR (the arm64 cell's, default
# build-arm64), GDW_KERNEL_CACHE (default .cache/kernels),
# GDW_DEBIAN_MIRROR / GDW_DEBIAN_SECURITY_MIRROR (deb.debian.org), GDW_GUEST_TIMEOUT
# (seconds a cell's guest may run, default 420), GDW_QEMU (default qemu-system-x86_64;
# GDW_QEMU_ARM64, qemu-system-aarch64), GDW_QEMU_ARGS (more options for QEMU),
# GDW_GUEST_FILTER (a gtest filter that replaces every row's own, for a quick look),
# GDW_KERNEL_MATRIX_DIR (the initramfs and the cells' logs, default <build>/kernel-matrix).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=$(realpath -m "${GDW_BUILD_DIR:-build}")
arm64_build=$(realpath -m "${GDW_ARM64_BUILD_DIR:-build-arm64}")
cache=$(realpath -m "${GDW_KERNEL_CACHE:-.cache/kernels}")
mirror=${GDW_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${GDW_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
guest_timeout=${GDW_GUEST_TIMEOUT:-420}
qemu=${GDW_QEMU:-qemu-system-x86_64}
qemu_arm64=${GDW_QEMU_ARM64:-qemu-system-aarch64}

# The kernels: name → the apt package pattern (the newest match is taken).
declare -A KERNEL_PACKAGE=(
  [6.1]='^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$'          # bookworm (or its security updates)
  [6.12]='^linux-image-6\.12\.[0-9]+\+deb12-amd64-unsigned$'  # bookworm-security
  [arm64-6.1]='^linux-image-6\.1\.0-[0-9]+-arm64-unsigned$'  # the arm64 cell's
)
KERNELS=(6.1 6.12)
ARM64_KERNELS=(arm64-6.1)
kernel_arch() { if [[ $1 == arm64-* ]]; then echo arm64; else echo amd64; fi; }
# Where the initramfs and the cells' logs of architecture $1 go.
matrix_dir() {
  if [[ -n ${GDW_KERNEL_MATRIX_DIR:-} ]]; then
    if [[ $1 == arm64 ]]; then realpath -m "$GDW_KERNEL_MATRIX_DIR/arm64"; else realpath -m "$GDW_KERNEL_MATRIX_DIR"; fi
  elif [[ $1 == arm64 ]]; then
    echo "$arm64_build/kernel-matrix"
  else
    echo "$build/kernel-matrix"
  fi
}
# The lsm= of the bpf_lsm cells; the no_bpf_lsm cells pass the same without bpf (Debian's
# built-in default, CONFIG_LSM, has bpf: leaving lsm= out would not turn it off).
LSM_WITH_BPF=lockdown,yama,integrity,apparmor,bpf

say() { echo "kernel-matrix: $*" >&2; }
die() { say "$*"; exit 1; }
skip() { echo "[  SKIPPED ] kernel-matrix: $*"; exit 0; }

# ---- fetching the kernels ----------------------------------------------------------------

apt_private() {
  local dir=$cache/apt
  apt-get -q -o APT::Architectures=amd64,arm64 -o Dir::Etc::sourcelist="$dir/sources.list" -o Dir::Etc::sourceparts=- \
    -o Dir::State::Lists="$dir/lists" -o Dir::Cache="$dir/cache" -o APT::Sandbox::User=root \
    -o Debug::NoLocking=1 "$@"
}

apt_private_cache() {
  local dir=$cache/apt
  apt-cache -o APT::Architectures=amd64,arm64 -o Dir::Etc::sourcelist="$dir/sources.list" -o Dir::Etc::sourceparts=- \
    -o Dir::State::Lists="$dir/lists" -o Dir::Cache="$dir/cache" "$@"
}

# The private lists (amd64 and arm64), fetched again when older than an hour or when the
# sources changed.
apt_private_update() {
  local dir=$cache/apt
  command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || die "needs apt-get and dpkg-deb to fetch kernels"
  mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
  local keyring=/usr/share/keyrings/debian-archive-keyring.gpg sources
  sources=$(printf 'deb [arch=amd64,arm64 signed-by=%s] %s bookworm main\ndeb [arch=amd64,arm64 signed-by=%s] %s bookworm-security main' \
    "$keyring" "$mirror" "$keyring" "$security_mirror")
  [[ $(cat "$dir/sources.list" 2>/dev/null) == "$sources" ]] || { echo "$sources" >"$dir/sources.list"; rm -f "$dir/updated"; }
  local lists_age=$(( $(date +%s) - $(stat -c %Y "$dir/updated" 2>/dev/null || echo 0) ))
  if (( lists_age > 3600 )); then
    say "apt-get update (private lists in $dir)"
    apt_private update >&2 || die "apt-get update failed (no network?)"
    touch "$dir/updated"
  fi
}

# Downloads the newest package matching $1 for architecture $2 and extracts the paths $4…
# of it into the new directory $3; prints the package's file name (without .deb).
fetch_package() {
  local pattern=$1 arch=$2 into=$3 package
  shift 3
  apt_private_update
  package=$(apt_private_cache search --names-only "$pattern" | cut -d' ' -f1 | sort -V | tail -n1)
  [[ -n $package ]] || die "no package matches $pattern"
  say "downloading $package:$arch"
  (cd "$into" && apt_private download "$package:$arch" >&2) || die "apt-get download $package:$arch failed"
  local deb
  deb=$(echo "$into"/*.deb)
  dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$into" "$@"
  rm "$deb"
  basename "$deb" .deb
}

# Prints the cached kernel's directory; fetches it first when it is not there.
fetch_kernel() {
  local k=$1 dir=$cache/$1
  [[ -n ${KERNEL_PACKAGE[$k]:-} ]] || die "unknown kernel '$k' (known: ${KERNELS[*]} ${ARM64_KERNELS[*]})"
  if [[ -f $dir/vmlinuz && ${GDW_KERNEL_REFRESH:-} != 1 ]]; then echo "$dir"; return; fi
  mkdir -p "$cache"
  local tmp package
  tmp=$(mktemp -d "$cache/fetch.XXXXXX")
  package=$(fetch_package "${KERNEL_PACKAGE[$k]}" "$(kernel_arch "$k")" "$tmp" ./boot) || { rm -rf "$tmp"; exit 1; }
  rm -rf "$dir" && mkdir -p "$dir"
  mv "$tmp"/boot/vmlinuz-* "$dir/vmlinuz"
  cp "$tmp"/boot/config-* "$dir/config"
  echo "$package" >"$dir/package"
  rm -rf "$tmp"
  say "kernel $k: $package"
  echo "$dir"
}

# Prints the busybox for the guest of architecture $1: this host's busybox-static on amd64,
# busybox-static:arm64 (fetched once, extracted into the cache, never installed) on arm64.
guest_busybox() {
  local busybox
  if [[ $1 == arm64 ]]; then
    busybox=$cache/busybox-arm64/bin/busybox
    if [[ ! -f $busybox || ${GDW_KERNEL_REFRESH:-} == 1 ]]; then
      local tmp
      tmp=$(mktemp -d "$cache/fetch.XXXXXX")
      fetch_package '^busybox-static$' arm64 "$tmp" ./bin/busybox >"$tmp/package" || { rm -rf "$tmp"; exit 1; }
      chmod 755 "$tmp" && rm -rf "$cache/busybox-arm64" && mv "$tmp" "$cache/busybox-arm64"
      say "busybox for arm64: $(cat "$cache/busybox-arm64/package")"
    fi
    echo "$busybox"; return
  fi
  busybox=$(command -v busybox) || die "needs busybox-static"
  file -L "$busybox" 2>/dev/null | grep -q 'statically linked' || ldd "$busybox" 2>&1 | grep -q 'not a dynamic' ||
    die "$busybox is not statically linked (Debian package busybox-static)"
  echo "$busybox"
}

with_lock() {
  mkdir -p "$cache"
  exec 9>"$cache/.lock"
  flock 9
}

# ---- the guest ---------------------------------------------------------------------------

# The tests the guests run: build target, what each row needs ("-": nothing; a kernel
# version: that one or newer; bpf_lsm: bpf in the active LSM list), and the gtest filter.
# The attach hook's lsm kind loads only with bpf in the LSM list; cgroup revisions are kept
# from 6.17 upstream and in Debian's 6.12, not in its 6.1. Left out everywhere: which copy
# of a wrapper a repair takes (ASpareWrapperWaits) depends on a 2 ms timer racing the
# re-reads after an lsm/bpf record, which emulation's slow CPU decides either way; the
# host's run judges it. Only tests that need no more than a kernel: no runtime, systemd or
# network beyond loopback; v1 rule files do not exist in the guests (pure v2). Rows of
# 6.14 need the cap_capable tracepoint (the probe's capability hook), which 6.1 and 6.12
# lack: they run on this host's kernel, and a cell lists them as not run.
GUEST_TESTS=(
  "privileged_kernel_facts_test           -    *"
  "privileged_device_programs_v2_test     -    *"
  "privileged_probe_test                  -    *"
  "privileged_probe_writer_exits_test     -    *:-*RuleWriter*"
  "privileged_probe_device_programs_test  -    *:-ProbeWithoutAttachHookTest.*:*/lsm"
  "privileged_probe_device_programs_test  bpf_lsm */lsm"
  "privileged_v2_revision_swap_test       -    *WithoutRevisions*:*ADetachAfter*"
  "privileged_v2_revision_swap_test       6.12 *AnAttachBetween*:*TheDaemonsGrant*"
  "privileged_probe_device_programs_test  6.14 ProbeWithoutAttachHookTest.*"
  "privileged_probe_focus_test            6.14 *"
  "privileged_v2_repair_test              -    *V2Repair*:-*WithTheAttachHookOff*:*ASpareWrapperWaits*"
  "privileged_v2_repair_test              6.14 *WithTheAttachHookOff*"
)
# The arm64 cell's tests (the arm64 cross-build's; test/CMakeLists.txt builds them as the
# target arm64-guest-tests, which scripts/test.sh cross-builds), on the hybrid layout: a
# grant proven by open() and a v1 repair, two v2 repairs (check --repair and the daemon's
# periodic query), the probe loaded by the daemon and counting denied opens, and the probe's
# record of who wrote a rule (writer, rule, target, result) at syscall exit, the path arm64
# 6.1 names rule writers on. The daemon naming the writer of a v1 revocation needs the
# capability hook (6.14) or the write path hook, an fexit program that arm64 attaches only
# with ftrace direct calls (upstream from 6.5; 6.1 refuses it, ENOTSUPP, and the daemon's
# attribution degrades): listed as not run.
GUEST_TESTS_ARM64=(
  "privileged_daemon_test                 -    DaemonOnRealCgroups.OldRuncReapplyIsRepaired"
  "privileged_v2_repair_test              -    V2Repair.CheckFindsTheAndedProgramAndRepairKeepsTheSpec:V2Repair.WithoutTheProbeThePeriodicQueryRepairs"
  "privileged_daemon_probe_test           -    DaemonWithProbe.CheckSaysWhetherTheProbeIsLoaded:DaemonWithProbe.DeniedOpensInsideAGpuContainerAreCounted"
  "privileged_probe_rule_writes_test      -    *AtSyscallExit*"
  "privileged_daemon_probe_test           6.5  DaemonWithProbe.TheRepairNamesTheWriter:DaemonWithProbe.AnUnknownWriterIsOtherWithItsExecutable:DaemonWithProbe.ARepairedRevocationNeverAttachesTheSyscallHook"
)

# The guest's /init (busybox sh). Writes each test binary's gtest XML to the second serial
# port between marker lines; the console (first port) shows everything as it runs.
write_init() {
  cat <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin:/sbin:/usr/sbin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm && mount -t devpts devpts /dev/pts && mount -t tmpfs tmpfs /dev/shm
# A checkout below /tmp put the tests there (at their build path): keep the initramfs's
# own /tmp then, rather than hide them under a fresh tmpfs.
if [ -z "$(ls -A /tmp)" ]; then mount -t tmpfs tmpfs /tmp; else chmod 1777 /tmp; fi
mount -t tmpfs tmpfs /run
if grep -qw gdw.cgroup=hybrid /proc/cmdline; then
  # v1 controllers at /sys/fs/cgroup/<controller>, cgroup2 at /sys/fs/cgroup/unified (as systemd's hybrid layout).
  mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup
  for c in devices memory pids cpu,cpuacct freezer; do
    mkdir -p "/sys/fs/cgroup/${c%%,*}" && mount -t cgroup -o "$c" cgroup "/sys/fs/cgroup/${c%%,*}"
  done
  ln -s cpu /sys/fs/cgroup/cpuacct
  mkdir -p /sys/fs/cgroup/unified && mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup/unified
else
  # Pure cgroup v2 at /sys/fs/cgroup, as on a GPU node.
  mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
fi
mount -t bpf bpf /sys/fs/bpf
mount -t debugfs debugfs /sys/kernel/debug
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t securityfs securityfs /sys/kernel/security
ip link set lo up
out=/dev/$(sed -n 's/.*gdw.out=\([^ ]*\).*/\1/p' /proc/cmdline)
[ "$out" = /dev/ ] && out=/dev/ttyS1
stty -F $out raw -echo
echo "GDW-GUEST-BOOTED $(uname -r) $(cat /proc/uptime)" >$out
if [ -f /gdw/command ]; then
  # kernel-matrix.sh run: one program instead of the tests, its output on the results port.
  echo "GDW-RUN-BEGIN" >$out
  sh /gdw/command </dev/null >$out 2>&1
  echo "GDW-RUN-END rc=$?" >$out
  echo "GDW-GUEST-DONE $(cat /proc/uptime)" >$out
  sync
  poweroff -f
fi
filter_override=$(sed -n 's/.*gdw.filter=\([^ ]*\).*/\1/p' /proc/cmdline)
release=$(uname -r)
kernel_major=${release%%.*}
kernel_minor=${release#*.}; kernel_minor=${kernel_minor%%.*}
mkdir -p /tmp/results
row=0
while read -r bin oldest filter; do
  row=$((row + 1))
  name=$(basename "$bin").$row
  if [ "$oldest" = "bpf_lsm" ]; then
    if ! grep -qw bpf /sys/kernel/security/lsm; then
      echo "GDW-NOT-RUN $name needs bpf in the LSM list: $filter" >$out
      continue
    fi
  elif [ "$oldest" != "-" ]; then
    major=${oldest%%.*} minor=${oldest#*.}
    if [ "$kernel_major" -lt "$major" ] || { [ "$kernel_major" -eq "$major" ] && [ "$kernel_minor" -lt "$minor" ]; }; then
      echo "GDW-NOT-RUN $name needs $oldest+: $filter" >$out
      continue
    fi
  fi
  [ -n "$filter_override" ] && filter=$filter_override
  echo "=== $name --gtest_filter=$filter"
  start=$(cut -d' ' -f1 /proc/uptime)
  "$bin" --gtest_filter="$filter" --gtest_output="xml:/tmp/results/$name.xml" </dev/null
  rc=$?
  echo "GDW-TEST $name rc=$rc from=$start to=$(cut -d' ' -f1 /proc/uptime)" >$out
  if [ -f "/tmp/results/$name.xml" ]; then
    echo "GDW-XML-BEGIN $name" >$out; cat "/tmp/results/$name.xml" >$out; echo "GDW-XML-END $name" >$out
  fi
done </gdw/tests
echo "GDW-GUEST-DONE $(cat /proc/uptime)" >$out
sync
poweroff -f
INIT
}

# Copies a file to the same path below $2, with every library it links and its loader ($3:
# the architecture; an arm64 file's are listed by the arm64 loader under qemu-user).
copy_with_libraries() {
  local file=$1 stage=$2 arch=$3
  local ldd=(ldd)
  [[ $arch == arm64 ]] && ldd=(qemu-aarch64-static -L / /lib/ld-linux-aarch64.so.1 --list)
  cp -L --parents "$file" "$stage/"
  "${ldd[@]}" "$file" | awk '/=>/ {print $3} /ld-linux/ {print $1}' | grep '^/' | while read -r lib; do
    [[ -e $stage$lib ]] || cp -L --parents "$lib" "$stage/"
  done
}

# Creates and prints a staging directory below $2 for a guest of architecture $1: busybox,
# /init and the few files of /etc.
stage_base() {
  local arch=$1 busybox stage
  busybox=$(guest_busybox "$arch") || exit 1
  mkdir -p "$2"
  stage=$(mktemp -d "$2/stage.XXXXXX")
  mkdir -p "$stage"/{bin,dev,proc,sys,tmp,run,root,etc,gdw}
  cp "$busybox" "$stage/bin/busybox"
  write_init >"$stage/init" && chmod 755 "$stage/init"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$stage/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$stage/etc/group"
  printf '127.0.0.1 localhost\n::1 localhost\n' >"$stage/etc/hosts"
  echo "$stage"
}

# Packs the staging directory $1 into the initramfs $2 and removes the staging directory.
pack_initramfs() {
  (cd "$1" && find . | cpio -o -H newc --quiet | gzip -1) >"$2.tmp"
  mv "$2.tmp" "$2"
  rm -rf "$1"
}

# Prints the initramfs's path for architecture $1 (amd64: the build's tests of GUEST_TESTS;
# arm64: the arm64 build's of GUEST_TESTS_ARM64); builds it when an input is newer.
build_initramfs() {
  local arch=$1 build=$build tests=("${GUEST_TESTS[@]}") strip=strip build_hint=scripts/build.sh
  if [[ $arch == arm64 ]]; then
    build=$arm64_build tests=("${GUEST_TESTS_ARM64[@]}") strip=aarch64-linux-gnu-strip
    build_hint="scripts/build.sh --arch arm64 arm64-guest-tests"
  fi
  local dir out
  dir=$(matrix_dir "$arch") && out=$dir/guest.cpio.gz
  local inputs=("$0" "$build/daemon/gpu-devwatch" "$build/test/libfake-nvml.so")
  local entry target
  for entry in "${tests[@]}"; do inputs+=("$build/test/${entry%% *}"); done
  for target in "${inputs[@]}"; do
    [[ -f $target ]] || die "$target is missing: build first ($build_hint)"
  done
  # The fixtures where the build's tests look for them: below the source tree it was
  # configured from (GDW_TEST_FIXTURES), which need not be this one.
  local source
  source=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt" 2>/dev/null)
  source=${source:-$root}
  if [[ -f $out ]] && [[ -z $(find "${inputs[@]}" "$source/test/fixtures" -newer "$out" -print -quit) ]]; then
    echo "$out"; return
  fi
  local stage
  stage=$(stage_base "$arch" "$dir") || exit 1
  for target in "$build/daemon/gpu-devwatch" "$build/test/libfake-nvml.so"; do copy_with_libraries "$target" "$stage" "$arch"; done
  for entry in "${tests[@]}"; do
    copy_with_libraries "$build/test/${entry%% *}" "$stage" "$arch"
    echo "$build/test/$entry" >>"$stage/gdw/tests"
  done
  # Debug info is most of a test binary: the guest needs none of it.
  find "$stage$build" -type f -perm -u+x -exec "$strip" --strip-debug {} +
  mkdir -p "$stage$source/test" && cp -a "$source/test/fixtures" "$stage$source/test/"
  pack_initramfs "$stage" "$out"
  say "initramfs: $out ($(du -h "$out" | cut -f1))"
  echo "$out"
}

# Prints the path of an initramfs in the directory $2 for architecture $1 that runs the
# program $3 with the arguments $4… instead of the tests (kernel-matrix.sh run).
build_run_initramfs() {
  local arch=$1 dir=$2 program strip=strip
  program=$(realpath -e "$3") || die "$3 is missing"
  shift 3
  [[ $arch == arm64 ]] && strip=aarch64-linux-gnu-strip
  local stage
  stage=$(stage_base "$arch" "$dir") || exit 1
  copy_with_libraries "$program" "$stage" "$arch"
  "$strip" --strip-debug "$stage$program"
  printf '%q ' "$program" "$@" >"$stage/gdw/command"
  pack_initramfs "$stage" "$dir/run.cpio.gz"
  echo "$dir/run.cpio.gz"
}

# Prints what the program of a `run` cell ($1) wrote; fails as the program did, or when the
# guest did not boot or finish.
report_run() {
  local cell=$1 kernel=$2 lsm=$3 took=$4 package=$5
  echo "kernel $kernel ($package), $lsm: guest ran $took s"
  if ! grep -q GDW-GUEST-BOOTED "$cell/results.txt" 2>/dev/null; then
    echo "FAILED: the guest did not boot (console: $cell/console.log):"; tail -n 40 "$cell/console.log"; return 1
  fi
  sed -n '/^GDW-RUN-BEGIN/,/^GDW-RUN-END/{/^GDW-RUN-/!p}' "$cell/results.txt"
  local rc
  rc=$(sed -n 's/^GDW-RUN-END rc=\([0-9]*\).*/\1/p' "$cell/results.txt")
  if [[ -z $rc ]]; then
    echo "FAILED: the guest stopped before the program ended (console: $cell/console.log):"
    tail -n 40 "$cell/console.log"; return 1
  fi
  echo "exit status $rc"
  return "$rc"
}

# ---- a cell: one kernel booted with or without the bpf LSM --------------------------------

# run_cell KERNEL LSM: the tests; run_cell KERNEL LSM PROGRAM [ARG…]: that program instead.
run_cell() {
  local kernel=$1 lsm=$2
  [[ $lsm == bpf_lsm || $lsm == no_bpf_lsm ]] || die "LSM must be bpf_lsm or no_bpf_lsm"
  local arch build=$build
  arch=$(kernel_arch "$kernel")
  if [[ $arch == arm64 ]]; then
    build=$arm64_build
    command -v "$qemu_arm64" >/dev/null ||
      skip "no $qemu_arm64 on this host (Debian package qemu-system-arm; scripts/install-deps.sh installs it)"
    command -v qemu-aarch64-static >/dev/null || skip "no qemu-aarch64-static (scripts/install-deps.sh arm64)"
  else
    command -v "$qemu" >/dev/null ||
      skip "no $qemu on this host (Debian package qemu-system-x86; scripts/install-deps.sh installs it)"
  fi
  command -v python3 >/dev/null || die "needs python3 to read the guest's results"
  local kdir initramfs cell
  cell=$(matrix_dir "$arch")/${kernel}-${lsm}
  (( $# > 2 )) && cell+=-run
  rm -rf "$cell" && mkdir -p "$cell"
  with_lock
  kdir=$(fetch_kernel "$kernel") || return 1
  if (( $# > 2 )); then
    initramfs=$(build_run_initramfs "$arch" "$cell" "${@:3}") || return 1
  else
    initramfs=$(build_initramfs "$arch") || return 1
  fi
  flock -u 9
  # Debian's lsm list with bpf, or the same without it (the built-in default has bpf).
  local lsm_list=$LSM_WITH_BPF
  [[ $lsm == no_bpf_lsm ]] && lsm_list=${LSM_WITH_BPF%,bpf}
  local append="panic=-1 quiet lsm=$lsm_list"
  [[ -n ${GDW_GUEST_FILTER:-} ]] && append+=" gdw.filter=$GDW_GUEST_FILTER"
  # No KVM: these hosts' KVM does not boot stock kernels; TCG does.
  local machine
  if [[ $arch == arm64 ]]; then
    # virt's one serial port (PL011, ttyAMA0) is the console; the results go to a PCI 16550,
    # ttyS0 in the guest (8250_pci is built in; virtio_console is a module). The hybrid
    # layout, so that both a v1 and a v2 repair run. pauth-impdef: QEMU's cheaper pointer
    # authentication (the architected one is most of TCG's time).
    machine=("$qemu_arm64" -accel tcg -M virt -cpu max,pauth-impdef=on -m 1536 -smp 1
             -serial "file:$cell/console.log"
             -chardev "file,id=results,path=$cell/results.txt" -device pci-serial,chardev=results)
    append="console=ttyAMA0 $append gdw.out=ttyS0 gdw.cgroup=hybrid"
  else
    machine=("$qemu" -accel tcg -cpu max -m 1536 -smp 1
             -serial "file:$cell/console.log" -serial "file:$cell/results.txt")
    append="console=ttyS0 $append"
  fi
  # GDW_QEMU_ARGS: more options for QEMU, split at spaces (e.g. -icount shift=0 for a bench:
  # guest time counted in instructions, immune to this host's load).
  # shellcheck disable=SC2206
  [[ -n ${GDW_QEMU_ARGS:-} ]] && machine+=($GDW_QEMU_ARGS)
  say "cell $kernel $lsm: $(cat "$kdir/package"), lsm=$lsm_list${GDW_QEMU_ARGS:+, $GDW_QEMU_ARGS}"
  local start=$SECONDS rc=0
  timeout --kill-after=10 "$guest_timeout" "${machine[@]}" -nodefaults -display none -no-reboot \
    -kernel "$kdir/vmlinuz" -initrd "$initramfs" -append "$append" </dev/null >"$cell/qemu.log" 2>&1 || rc=$?
  local took=$((SECONDS - start))
  [[ $rc == 124 || $rc == 137 ]] && say "the guest ran past GDW_GUEST_TIMEOUT=${guest_timeout}s and was stopped"
  if (( $# > 2 )); then report_run "$cell" "$kernel" "$lsm" "$took" "$(cat "$kdir/package")"; return; fi
  python3 - "$cell" "$kernel" "$lsm" "$took" "$(cat "$kdir/package")" <<'PY'
import re, sys, xml.etree.ElementTree as ET
cell, kernel, lsm, took, package = sys.argv[1:]
text = open(f"{cell}/results.txt", encoding="utf-8", errors="replace").read()
def console_tail(n=40):
    try:
        lines = open(f"{cell}/console.log", encoding="utf-8", errors="replace").read().splitlines()
    except OSError:
        lines = []
    return "\n".join("    " + l for l in lines[-n:])
print(f"kernel {kernel} ({package}), {lsm}: guest ran {took} s")
if "GDW-GUEST-BOOTED" not in text:
    print(f"FAILED: the guest did not boot (console: {cell}/console.log):\n{console_tail()}")
    sys.exit(1)
failed = 0
ran = 0
for name, xml in re.findall(r"GDW-XML-BEGIN (\S+)\n(.*?)GDW-XML-END \1", text, re.S):
    try:
        suites = ET.fromstring(xml)
    except ET.ParseError as e:
        print(f"FAILED {name}: unreadable XML: {e}"); failed += 1; continue
    for case in suites.iter("testcase"):
        full = f"{case.get('classname')}.{case.get('name')}"
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        known = {"name", "status", "result", "time", "timestamp", "classname", "file", "line", "value_param", "type_param"}
        props.update({k: v for k, v in case.attrib.items() if k not in known})
        failures = [f.get("message", "") for f in case.iter("failure")]
        skipped = case.get("result") == "skipped" or case.find("skipped") is not None
        if case.get("status") == "notrun": continue
        ran += 1
        if failures:
            verdict = "FAIL"; failed += 1
        elif skipped:
            verdict = "SKIP"; failed += 1  # every test chosen for the guests must run there
        else:
            verdict = "pass"
        print(f"  {verdict} {name.rsplit('.', 1)[0]}: {full} ({float(case.get('time', 0)):.2f} s)")
        for key, value in props.items():
            print(f"       {key} = {value.strip()}")
        for message in failures:
            for line in message.strip().splitlines()[:12]:
                print(f"       | {line}")
        s = case.find("skipped")
        if skipped and s is not None and s.get("message"):
            print(f"       | skipped: {s.get('message').strip()[:300]}")
for name, why in re.findall(r"GDW-NOT-RUN (\S+) (.*)", text):
    print(f"  not run {name.rsplit('.', 1)[0]}: {why}")
for name, rc in re.findall(r"GDW-TEST (\S+) rc=(\d+)", text):
    if rc != "0" and not re.search(rf"GDW-XML-BEGIN {re.escape(name)}\n", text):
        print(f"  FAIL {name}: exited {rc} without results"); failed += 1
if "GDW-GUEST-DONE" not in text:
    print(f"FAILED: the guest stopped before its last test (console: {cell}/console.log):\n{console_tail()}")
    sys.exit(1)
if ran == 0:
    print("FAILED: no test ran in the guest"); sys.exit(1)
print(f"{ran} guest tests, {failed} failed or skipped")
sys.exit(1 if failed else 0)
PY
}

case "${1:-all}" in
  fetch)
    shift
    with_lock
    for k in "${@:-${KERNELS[@]}}"; do fetch_kernel "$k" >/dev/null; done
    ;;
  initramfs) with_lock; build_initramfs amd64 >/dev/null; [[ ! -d $arm64_build ]] || build_initramfs arm64 >/dev/null ;;
  cell) [[ $# == 3 ]] || die "usage: kernel-matrix.sh cell KERNEL bpf_lsm|no_bpf_lsm"; run_cell "$2" "$3" ;;
  run) [[ $# -ge 4 ]] || die "usage: kernel-matrix.sh run KERNEL bpf_lsm|no_bpf_lsm PROGRAM [ARG…]"; shift; run_cell "$@" ;;
  all)
    status=0
    for k in "${KERNELS[@]}"; do for l in bpf_lsm no_bpf_lsm; do run_cell "$k" "$l" || status=1; done; done
    # The arm64 cell where the arm64 cross-build exists (as ctest registers it).
    if [[ -f $arm64_build/CMakeCache.txt ]]; then run_cell arm64-6.1 bpf_lsm || status=1; fi
    exit $status
    ;;
  *) die "usage: kernel-matrix.sh [fetch [KERNEL…] | initramfs | cell KERNEL bpf_lsm|no_bpf_lsm | run KERNEL bpf_lsm|no_bpf_lsm PROGRAM [ARG…] | all]" ;;
esac
