#!/usr/bin/env bash
# Installs the Debian packages gpu-devwatch needs.
#   scripts/install-deps.sh        everything: build, test (scripts/test.sh), fuzz, package
#   scripts/install-deps.sh run    only what scripts/run.sh needs: build the daemon and the
#                                  demo (which links the test support library, hence gtest)
#                                  and run them
# Idempotent and non-interactive: packages already present are not touched, and
# apt-get update runs only when something is missing.
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
  # the kernel matrix (scripts/kernel-matrix.sh): Debian's kernels under QEMU (TCG)
  qemu-system-x86 cpio
  # the container image (scripts/build-image.sh) and the Debian package (cpack, dpkg-shlibdeps)
  umoci dpkg-dev
  util-linux iproute2 procps curl
)
case "${1:-all}" in
  run) packages=("${run_packages[@]}") ;;
  all) ;;
  *) echo "usage: install-deps.sh [run|all]" >&2; exit 2 ;;
esac

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
