#!/usr/bin/env bash
# Installs the Debian packages gpu-devwatch needs.
#   scripts/install-deps.sh        everything: build, test (scripts/test.sh), fuzz, package,
#                                  and the arm64 cross-build (below; on amd64, unless
#                                  GDW_ARM64=0)
#   scripts/install-deps.sh run    only what scripts/run.sh needs: build the daemon and the
#                                  demo (which links the test support library, hence gtest)
#                                  and run them
#   scripts/install-deps.sh arm64  only the arm64 cross-build (scripts/build.sh --arch arm64)
# Idempotent and non-interactive: packages already present are not touched, and
# apt-get update runs only when something is missing.
#
# The arm64 cross-build uses Debian's multiarch: dpkg gets the arm64 architecture, the
# cross compiler (g++-aarch64-linux-gnu) and the :arm64 libraries install beside the amd64
# ones, and qemu-user-static runs the arm64 tests and binaries. The host's tools (cmake,
# protoc, grpc_cpp_plugin, clang and bpftool for the BPF object) stay amd64. Two -dev
# packages cannot be installed for both architectures at once (libyaml-cpp-dev is not
# Multi-Arch; prometheus-cpp-dev:arm64 needs the civetweb:arm64 program, which would
# replace the amd64 one): their arm64 files are unpacked, with their libraries', into an
# overlay directory (GDW_CROSS_OVERLAY, default /var/cache/gpu-devwatch-cross/arm64) that
# cmake/toolchain-aarch64.cmake searches first; their runtime libraries are installed.
set -euo pipefail

# The daemon and the demo (checked on a fresh debootstrap --variant=minbase bookworm with
# git). cmake configures every directory, so what any find_package() or
# find_program(... REQUIRED) there asks for is here: the BPF skeleton's clang, llvm-strip
# (llvm) and bpftool; the libraries; gtest (configured for the tests). libcurl's OpenSSL
# flavour is the HTTPS client of Events and conditions. g++ and make, not build-essential
# (dpkg-dev and its perl): the packaging tools come with the full list.
run_packages=(
  g++ make cmake pkg-config clang llvm
  libbpf-dev bpftool libelf-dev zlib1g-dev
  libsystemd-dev libspdlog-dev libfmt-dev libyaml-cpp-dev prometheus-cpp-dev libcivetweb-dev
  libgtest-dev nlohmann-json3-dev
  libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev
  libcurl4-openssl-dev libssl-dev libcrypt-dev
)
packages=(
  "${run_packages[@]}"
  build-essential libgmock-dev openssl
  # fuzzing (libFuzzer + sanitizers for clang 14)
  libfuzzer-14-dev libclang-rt-14-dev
  # tests: real runtimes, real systemd, promtool, helpers
  runc crun containerd busybox-static prometheus python3-yaml
  # the CRI runtime matrix (test/runtime): kubelet's gRPC calls to containerd from Python
  python3-grpcio python3-grpc-tools
  debootstrap systemd-container dbus
  # the kernel matrix (scripts/kernel-matrix.sh): Debian's kernels under QEMU (TCG), the
  # arm64 cell's under qemu-system-aarch64
  qemu-system-x86 qemu-system-arm cpio
  # the container image (scripts/build-image.sh) and the Debian package (cpack, dpkg-shlibdeps)
  umoci dpkg-dev
  util-linux iproute2 procps curl
)
# The arm64 cross-build: each library the build links, for arm64 (Multi-Arch: same).
arm64_libraries=(
  libbpf-dev libelf-dev zlib1g-dev libsystemd-dev libspdlog-dev libfmt-dev
  libcivetweb-dev libgtest-dev libgmock-dev libgrpc++-dev libprotobuf-dev
  libcurl4-openssl-dev libssl-dev libcrypt-dev
  libyaml-cpp0.7 libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0
)
arm64_packages=(g++-aarch64-linux-gnu qemu-user-static binfmt-support "${arm64_libraries[@]/%/:arm64}")
# Unpacked into the overlay (see above): the -dev packages and the libraries they link.
arm64_overlay_packages=(libyaml-cpp-dev libyaml-cpp0.7 prometheus-cpp-dev
                        libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0)
arm64=1
case "${1:-all}" in
  run) packages=("${run_packages[@]}"); arm64=0 ;;
  arm64) packages=("${arm64_packages[@]}") ;;
  all)
    # The cross-build is for amd64 hosts; GDW_ARM64=0 leaves it out (as scripts/test.sh does).
    if [[ "$(dpkg --print-architecture)" == amd64 && "${GDW_ARM64:-1}" != 0 ]]; then
      packages+=("${arm64_packages[@]}")
    else
      arm64=0
    fi ;;
  *) echo "usage: install-deps.sh [run|all|arm64]" >&2; exit 2 ;;
esac

if ((arm64)) && ! dpkg --print-foreign-architectures | grep -qx arm64; then
  echo "install-deps: adding the arm64 architecture to dpkg" >&2
  dpkg --add-architecture arm64
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed'; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # --no-install-recommends keeps a node lean; policy-rc.d stops postinst scripts from
  # starting services (prometheus, containerd) that the tests start themselves.
  policy=/usr/sbin/policy-rc.d
  created_policy=0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; created_policy=1
  fi
  trap '[[ $created_policy == 1 ]] && rm -f "$policy"' EXIT
  apt-get install -y -qq --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${missing[@]}"
else
  echo "install-deps: all packages present" >&2
fi

# --- arm64 programs run on this machine, through qemu-user -----------------------------
# binfmt_misc hands every arm64 ELF to qemu-aarch64-static (flag F: loaded now, so it also
# runs inside a chroot): the arm64 tests' helpers, debootstrap's second stage of the arm64
# image (scripts/build-image.sh) and `chroot … ldd` there. Only qemu-aarch64 is enabled.
if ((arm64)); then
  binfmt=/proc/sys/fs/binfmt_misc
  mountpoint -q $binfmt || mount -t binfmt_misc binfmt_misc $binfmt
  if [[ ! -e $binfmt/qemu-aarch64 ]] || ! grep -qx enabled $binfmt/qemu-aarch64; then
    echo "install-deps: registering qemu-aarch64 with binfmt_misc" >&2
    update-binfmts --enable qemu-aarch64
  fi
fi

# --- The arm64 overlay: what cannot be installed for both architectures ------------------
if ((arm64)); then
  overlay=${GDW_CROSS_OVERLAY:-/var/cache/gpu-devwatch-cross/arm64}
  # Keyed on the installed arm64 libraries' versions: an upgrade refreshes the overlay.
  wanted=()
  for p in "${arm64_overlay_packages[@]}"; do
    lib=$p
    case $p in libyaml-cpp-dev) lib=libyaml-cpp0.7 ;; prometheus-cpp-dev) lib=libprometheus-cpp-core1.0 ;; esac
    wanted+=("$p:arm64=$(dpkg-query -W -f='${Version}' "$lib:arm64")")
  done
  if [[ "$(cat "$overlay/.gdw-overlay" 2>/dev/null)" != "${wanted[*]}" ]]; then
    echo "install-deps: unpacking ${wanted[*]} into $overlay" >&2
    debs=$(mktemp -d)
    (cd "$debs" && apt-get download -q -o APT::Sandbox::User=root "${wanted[@]}" >&2)
    rm -rf "$overlay.partial"
    mkdir -p "$overlay.partial"
    for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$overlay.partial"; done
    rm -rf "$debs"
    printf '%s' "${wanted[*]}" >"$overlay.partial/.gdw-overlay"
    rm -rf "$overlay"
    mv "$overlay.partial" "$overlay"
  fi
fi
