#!/usr/bin/env bash
# Builds the gpu-devwatch container image without a container engine, for amd64 and arm64:
# per architecture, a minimal Debian bookworm root file system (debootstrap
# --variant=minbase) with the shared libraries the binary links against, the binary at
# /usr/local/bin/gpu-devwatch and the default configuration at
# /etc/gpu-devwatch/gpu-devwatch.yaml, packed by umoci; then an OCI image index naming each
# architecture's image (a multi-arch image: a node pulls the one of its own architecture),
# in an OCI image layout directory and a tar of it (an "oci-archive").
#
# usage: scripts/build-image.sh [--binary PATH]... [--output DIR]
#   --binary  a gpu-devwatch to ship, one per architecture (read from its ELF header)
#             (default: build/daemon/gpu-devwatch and build-arm64/daemon/gpu-devwatch,
#             those that exist: scripts/build.sh and scripts/build.sh --arch arm64)
#   --output  where the layout and the tar go (default: build/image)
# Environment: GDW_IMAGE_CACHE (default /var/cache/gpu-devwatch-image) keeps the
# debootstrapped root file systems, one per architecture and package set; DEBIAN_MIRROR
# picks the mirror; GDW_IMAGE_SOURCE / GDW_IMAGE_LICENSES set those labels (left out when
# unknown).
#
# Tags in the layout: <version> is the index (every architecture), <version>-<arch> each
# architecture's image alone. The version is the project's (CMakeLists.txt
# project(VERSION)), read from each binary itself (`gpu-devwatch version`) so that a
# stale binary cannot be mislabelled; the git revision it was built from is the
# org.opencontainers.image.revision label, and every binary must be of the same one. The
# last line printed is the tar's path. Push every architecture with skopeo (Debian
# package skopeo):
#   skopeo copy --all oci-archive:build/image/gpu-devwatch-<version>.oci.tar:<version> \
#     docker://<your registry>/gpu-devwatch:<version>
# Needs root (debootstrap, and umoci keeps file ownership), debootstrap, umoci and python3
# (scripts/install-deps.sh), and Debian's mirror the first time per package set. An arm64
# image on an amd64 machine also needs qemu-user-static registered with binfmt_misc
# (scripts/install-deps.sh does it): debootstrap's second stage, `gpu-devwatch version`
# and the image's ldd run as arm64 programs.
set -euo pipefail
source_dir=$(cd "$(dirname "$0")/.." && pwd)
binaries=()
output=$source_dir/build/image
while (($#)); do
  case $1 in
    --binary) binaries+=("$(realpath "$2")"); shift 2 ;;
    --output) output=$(realpath -m "$2"); shift 2 ;;
    *) sed -n '10,18p' "$0" >&2; exit 2 ;;
  esac
done
if ((${#binaries[@]} == 0)); then
  for candidate in "$source_dir/build/daemon/gpu-devwatch" "$source_dir/build-arm64/daemon/gpu-devwatch"; do
    [[ -x $candidate ]] && binaries+=("$candidate")
  done
fi
cache=${GDW_IMAGE_CACHE:-/var/cache/gpu-devwatch-image}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bookworm
host_arch=$(dpkg --print-architecture)

die() { echo "build-image: $*" >&2; exit 1; }
((EUID == 0)) || die "needs root (debootstrap; umoci keeps file ownership)"
for tool in debootstrap umoci dpkg-query readelf sha256sum strip python3; do
  command -v $tool >/dev/null || die "$tool is not installed: run scripts/install-deps.sh"
done
((${#binaries[@]})) || die "no binary: run scripts/build.sh (and scripts/build.sh --arch arm64)"
project_version=$(sed -nE 's/^project\(gpu-devwatch VERSION ([0-9.]+).*/\1/p' "$source_dir/CMakeLists.txt")

# The Debian architecture of an ELF binary, from its header.
arch_of() {
  case $(readelf -h "$1" 2>/dev/null | sed -nE 's/^ *Machine: *//p') in
    *X86-64*) echo amd64 ;;
    *AArch64*) echo arm64 ;;
    *) return 1 ;;
  esac
}

# --- Each binary: its architecture and version (every one the project's, of one revision)
declare -A binary_of
version='' revision=''
for binary in "${binaries[@]}"; do
  [[ -x $binary ]] || die "$binary does not exist: run scripts/build.sh"
  arch=$(arch_of "$binary") || die "$binary is neither an amd64 nor an arm64 ELF binary"
  [[ -z ${binary_of[$arch]:-} ]] || die "two $arch binaries: ${binary_of[$arch]} and $binary"
  if [[ $arch != "$host_arch" && ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]]; then
    die "$binary is $arch: qemu-aarch64 is not registered with binfmt_misc (run scripts/install-deps.sh)"
  fi
  binary_of[$arch]=$binary
  read -r _ binary_version binary_revision < <("$binary" version) || die "$binary version failed"
  binary_revision=${binary_revision#(}; binary_revision=${binary_revision%)}
  [[ $binary_version == "$project_version" ]] ||
    die "$binary is version $binary_version, the project is $project_version: rebuild it"
  [[ -z $revision || $binary_revision == "$revision" ]] ||
    die "$binary is of revision $binary_revision, ${binaries[0]} of $revision: rebuild them from one tree"
  version=$binary_version revision=$binary_revision
done
mapfile -t arches < <(printf '%s\n' "${!binary_of[@]}" | sort)

# dpkg records some libraries under /lib, others under /usr/lib (merged /usr): try both.
owner_of() {
  local lib=$1 real candidates owner
  real=$(realpath "$lib")
  candidates=("$lib" "$real" "${lib#/usr}" "/usr${lib#/usr}" "${real#/usr}" "/usr${real#/usr}")
  for path in "${candidates[@]}"; do
    owner=$(dpkg-query -S "$path" 2>/dev/null | head -n1 | cut -d: -f1) && [[ -n $owner ]] && {
      echo "$owner"; return 0; }
  done
  return 1
}

created=$(date -u ${SOURCE_DATE_EPOCH:+-d @$SOURCE_DATE_EPOCH} +%Y-%m-%dT%H:%M:%SZ)
source_url=${GDW_IMAGE_SOURCE:-$(git -C "$source_dir" remote get-url origin 2>/dev/null || true)}
labels=(
  org.opencontainers.image.title=gpu-devwatch
  "org.opencontainers.image.description=Keeps allocated GPU device nodes allowed in Kubernetes containers (Debian $suite minbase)"
  org.opencontainers.image.version="$version"
  org.opencontainers.image.revision="$revision"
  org.opencontainers.image.created="$created"
)
[[ -n $source_url ]] && labels+=(org.opencontainers.image.source="$source_url")
[[ -n ${GDW_IMAGE_LICENSES:-} ]] && labels+=(org.opencontainers.image.licenses="$GDW_IMAGE_LICENSES")

work=$(mktemp -d)
trap 'rm -rf --one-file-system "$work"' EXIT
layout=$work/oci
umoci init --layout "$layout"
mkdir -p "$cache"

# --- One architecture's image, tagged <version>-<arch> ----------------------------------
build_arch_image() {
  local arch=$1 binary=$2
  # Runtime packages: the Debian packages owning every library the binary loads, as its
  # own loader lists them (the arm64 loader runs under qemu-user).
  local interpreter packages=() lib package
  interpreter=$(readelf -l "$binary" | sed -nE 's/.*Requesting program interpreter: (.*)\]$/\1/p')
  [[ -x $interpreter ]] || die "$binary's loader $interpreter is not here (the :$arch libc6: scripts/install-deps.sh)"
  while read -r lib; do
    [[ -n $lib ]] || continue
    package=$(owner_of "$lib") || die "no Debian package owns $lib (needed by $binary)"
    packages+=("$package")
  done < <("$interpreter" --list "$binary" | awk '/=> \// {print $3} /^\t\/.*ld-linux/ {print $1}')
  mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sort -u)
  ((${#packages[@]})) || die "$interpreter --list found no libraries in $binary"

  # Root file system: debootstrap once per architecture and package set, cached.
  local include key rootfs partial
  include=$(IFS=,; echo "${packages[*]}")
  key=$(printf '%s %s %s %s\n' "$suite" "$arch" minbase "$include" | sha256sum | cut -c1-16)
  rootfs=$cache/rootfs-$suite-$arch-$key
  exec 8>"$cache/rootfs.lock"
  flock 8
  if [[ ! -e $rootfs/.gdw-image-rootfs-complete ]]; then
    partial=$rootfs.partial
    rm -rf --one-file-system "$partial" "$rootfs"
    echo "build-image: debootstrap $suite $arch minbase + ${packages[*]}" >&2
    if ! debootstrap --arch="$arch" --variant=minbase --include="$include" "$suite" "$partial" "$mirror" \
        >"$cache/debootstrap-$arch.log" 2>&1; then
      tail -n 20 "$cache/debootstrap-$arch.log" >&2
      for m in $(awk -v d="$partial/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r); do umount -l "$m"; done
      rm -rf --one-file-system "$partial"
      die "debootstrap failed (log: $cache/debootstrap-$arch.log)"
    fi
    # Lean: no package lists or downloaded .debs, no documentation, man pages or locales.
    rm -rf "$partial"/var/cache/apt/* "$partial"/var/lib/apt/lists/* "$partial"/var/cache/debconf/*-old \
      "$partial"/usr/share/doc/* "$partial"/usr/share/man/* "$partial"/usr/share/info/* \
      "$partial"/usr/share/locale/* "$partial"/var/log/* "$partial"/tmp/* "$partial"/root/.bash_history
    echo "$suite $arch minbase ${packages[*]}" >"$partial/.gdw-image-rootfs-complete"
    mv "$partial" "$rootfs"
  fi
  flock -u 8

  local tag=$version-$arch bundle=$work/bundle-$arch strip_tool=strip
  [[ $arch == amd64 ]] || strip_tool=aarch64-linux-gnu-strip
  [[ $arch == "$host_arch" ]] && strip_tool=strip
  umoci new --image "$layout:$tag"
  umoci unpack --image "$layout:$tag" "$bundle" >/dev/null
  cp -a "$rootfs/." "$bundle/rootfs/"
  rm -f "$bundle/rootfs/.gdw-image-rootfs-complete"
  # Without its debug information (RelWithDebInfo): a fifth of the size.
  install -D -m 0755 "$binary" "$bundle/rootfs/usr/local/bin/gpu-devwatch"
  "$strip_tool" --strip-debug "$bundle/rootfs/usr/local/bin/gpu-devwatch"
  install -D -m 0644 "$source_dir/config/gpu-devwatch.yaml" "$bundle/rootfs/etc/gpu-devwatch/gpu-devwatch.yaml"
  # The binary must find every library in the image, not just on this host, and run there
  # (chroot: the arm64 ldd and binary run under qemu-user, loaded by binfmt_misc before).
  local missing
  missing=$(chroot "$bundle/rootfs" /usr/bin/ldd /usr/local/bin/gpu-devwatch 2>&1 | grep 'not found' || true)
  [[ -z $missing ]] || die "libraries missing in the $arch image: $missing"
  chroot "$bundle/rootfs" /usr/local/bin/gpu-devwatch version >/dev/null ||
    die "the $arch image's gpu-devwatch does not run in it"
  umoci repack --image "$layout:$tag" "$bundle"
  rm -rf --one-file-system "$bundle"

  local config_args=(--config.entrypoint /usr/local/bin/gpu-devwatch
               --config.cmd run --config.cmd --config --config.cmd /etc/gpu-devwatch/gpu-devwatch.yaml
               --config.workingdir / --config.exposedports 9477/tcp
               --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
               --os linux --architecture "$arch" --created "$created")
  for l in "${labels[@]}"; do config_args+=(--config.label "$l" --manifest.annotation "$l"); done
  umoci config --image "$layout:$tag" "${config_args[@]}"
}

for arch in "${arches[@]}"; do build_arch_image "$arch" "${binary_of[$arch]}"; done
umoci gc --layout "$layout"

# --- The index: tag <version> names each architecture's manifest with its platform -------
python3 - "$layout" "$version" "${arches[@]}" <<'PY'
import hashlib, json, os, sys
layout, version, arches = sys.argv[1], sys.argv[2], sys.argv[3:]
index_path = os.path.join(layout, 'index.json')
top = json.load(open(index_path))
by_tag = {d.get('annotations', {}).get('org.opencontainers.image.ref.name'): d for d in top['manifests']}
manifests = []
for arch in arches:
    d = dict(by_tag[version + '-' + arch])
    d.pop('annotations', None)
    d['platform'] = {'architecture': arch, 'os': 'linux'}
    manifests.append(d)
blob = json.dumps({'schemaVersion': 2, 'mediaType': 'application/vnd.oci.image.index.v1+json',
                   'manifests': manifests}, indent=2).encode()
digest = hashlib.sha256(blob).hexdigest()
with open(os.path.join(layout, 'blobs', 'sha256', digest), 'wb') as f:
    f.write(blob)
top['manifests'] = [d for d in top['manifests']
                    if d.get('annotations', {}).get('org.opencontainers.image.ref.name') != version]
top['manifests'].append({'mediaType': 'application/vnd.oci.image.index.v1+json', 'digest': 'sha256:' + digest,
                         'size': len(blob), 'annotations': {'org.opencontainers.image.ref.name': version}})
with open(index_path + '.tmp', 'w') as f:
    json.dump(top, f)
os.replace(index_path + '.tmp', index_path)
PY

mkdir -p "$output"
rm -rf "$output/oci"
cp -a "$layout" "$output/oci"
tar_path=$output/gpu-devwatch-$version.oci.tar
tar -C "$layout" -cf "$tar_path.tmp" . && mv "$tar_path.tmp" "$tar_path"
echo "build-image: gpu-devwatch:$version ($revision) for ${arches[*]}, $(du -sh "$tar_path" | cut -f1) tar" >&2
echo "build-image: layout $output/oci (tag $version: the index; $version-<arch>: each architecture's image)" >&2
echo "$tar_path"
