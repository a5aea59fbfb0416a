#!/usr/bin/env bash
# Builds the gpu-devwatch container image without a container engine: a minimal Debian
# bookworm root file system (debootstrap --variant=minbase) with the shared libraries the
# binary links against, the binary at /usr/local/bin/gpu-devwatch and the default
# configuration at /etc/gpu-devwatch/gpu-devwatch.yaml, packed by umoci as an OCI image
# layout directory and a tar of it (an "oci-archive").
#
# usage: scripts/build-image.sh [--binary PATH] [--output DIR]
#   --binary  the gpu-devwatch to ship (default: build/daemon/gpu-devwatch; scripts/build.sh)
#   --output  where the layout and the tar go (default: build/image)
# Environment: GDW_IMAGE_CACHE (default /var/cache/gpu-devwatch-image) keeps the
# debootstrapped root file systems, one per package set; DEBIAN_MIRROR picks the mirror;
# GDW_IMAGE_SOURCE / GDW_IMAGE_LICENSES set those labels (left out when unknown).
#
# The image is tagged with the project version (CMakeLists.txt project(VERSION)), read from
# the binary itself (`gpu-devwatch version`) so that a stale binary cannot be mislabelled;
# the git revision it was built from is the org.opencontainers.image.revision label. The
# last line printed is the tar's path. Push it with skopeo (Debian package skopeo):
#   skopeo copy oci-archive:build/image/gpu-devwatch-<version>.oci.tar:<version> \
#     docker://<your registry>/gpu-devwatch:<version>
# Needs root (debootstrap, and umoci keeps file ownership), debootstrap and umoci
# (scripts/install-deps.sh), and Debian's mirror the first time per package set.
set -euo pipefail
source_dir=$(cd "$(dirname "$0")/.." && pwd)
binary=$source_dir/build/daemon/gpu-devwatch
output=$source_dir/build/image
while (($#)); do
  case $1 in
    --binary) binary=$(realpath "$2"); shift 2 ;;
    --output) output=$(realpath -m "$2"); shift 2 ;;
    *) sed -n '9,14p' "$0" >&2; exit 2 ;;
  esac
done
cache=${GDW_IMAGE_CACHE:-/var/cache/gpu-devwatch-image}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bookworm

die() { echo "build-image: $*" >&2; exit 1; }
((EUID == 0)) || die "needs root (debootstrap; umoci keeps file ownership)"
for tool in debootstrap umoci dpkg-query ldd sha256sum strip; do
  command -v $tool >/dev/null || die "$tool is not installed: run scripts/install-deps.sh"
done
[[ -x $binary ]] || die "$binary does not exist: run scripts/build.sh"

# --- Version: the binary's own, which must be the project's -----------------------------
read -r _ version revision < <("$binary" version) || die "$binary version failed"
revision=${revision#(}; revision=${revision%)}
project_version=$(sed -nE 's/^project\(gpu-devwatch VERSION ([0-9.]+).*/\1/p' "$source_dir/CMakeLists.txt")
[[ $version == "$project_version" ]] ||
  die "$binary is version $version, the project is $project_version: rebuild it"

# --- Runtime packages: the Debian packages owning every library the binary loads -------
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
packages=()
while read -r lib; do
  [[ -n $lib ]] || continue
  package=$(owner_of "$lib") || die "no Debian package owns $lib (needed by $binary)"
  packages+=("$package")
done < <(ldd "$binary" | awk '/=> \// {print $3} /^\t\/.*ld-linux/ {print $1}')
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sort -u)
((${#packages[@]})) || die "ldd found no libraries in $binary"

# --- Root file system: debootstrap once per package set, cached ------------------------
include=$(IFS=,; echo "${packages[*]}")
key=$(printf '%s %s %s\n' "$suite" minbase "$include" | sha256sum | cut -c1-16)
rootfs=$cache/rootfs-$suite-$key
mkdir -p "$cache"
exec 8>"$cache/rootfs.lock"
flock 8
if [[ ! -e $rootfs/.gdw-image-rootfs-complete ]]; then
  partial=$rootfs.partial
  rm -rf --one-file-system "$partial" "$rootfs"
  echo "build-image: debootstrap $suite minbase + ${packages[*]}" >&2
  if ! debootstrap --variant=minbase --include="$include" "$suite" "$partial" "$mirror" >"$cache/debootstrap.log" 2>&1; then
    tail -n 20 "$cache/debootstrap.log" >&2
    for m in $(awk -v d="$partial/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r); do umount -l "$m"; done
    rm -rf --one-file-system "$partial"
    die "debootstrap failed (log: $cache/debootstrap.log)"
  fi
  # Lean: no package lists or downloaded .debs, no documentation, man pages or locales.
  rm -rf "$partial"/var/cache/apt/* "$partial"/var/lib/apt/lists/* "$partial"/var/cache/debconf/*-old \
    "$partial"/usr/share/doc/* "$partial"/usr/share/man/* "$partial"/usr/share/info/* \
    "$partial"/usr/share/locale/* "$partial"/var/log/* "$partial"/tmp/* "$partial"/root/.bash_history
  echo "$suite minbase ${packages[*]}" >"$partial/.gdw-image-rootfs-complete"
  mv "$partial" "$rootfs"
fi
flock -u 8

# --- Image ------------------------------------------------------------------------------
work=$(mktemp -d)
trap 'rm -rf --one-file-system "$work"' EXIT
layout=$work/oci
umoci init --layout "$layout"
umoci new --image "$layout:$version"
umoci unpack --image "$layout:$version" "$work/bundle" >/dev/null
cp -a "$rootfs/." "$work/bundle/rootfs/"
rm -f "$work/bundle/rootfs/.gdw-image-rootfs-complete"
# Without its debug information (RelWithDebInfo): a fifth of the size.
install -D -m 0755 "$binary" "$work/bundle/rootfs/usr/local/bin/gpu-devwatch"
strip --strip-debug "$work/bundle/rootfs/usr/local/bin/gpu-devwatch"
install -D -m 0644 "$source_dir/config/gpu-devwatch.yaml" "$work/bundle/rootfs/etc/gpu-devwatch/gpu-devwatch.yaml"
# The binary must find every library in the image, not just on this host.
missing=$(chroot "$work/bundle/rootfs" /usr/bin/ldd /usr/local/bin/gpu-devwatch | grep 'not found' || true)
[[ -z $missing ]] || die "libraries missing in the image: $missing"
umoci repack --image "$layout:$version" "$work/bundle"

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
config_args=(--config.entrypoint /usr/local/bin/gpu-devwatch
             --config.cmd run --config.cmd --config --config.cmd /etc/gpu-devwatch/gpu-devwatch.yaml
             --config.workingdir / --config.exposedports 9477/tcp
             --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
             --os linux --architecture "$(dpkg --print-architecture)" --created "$created")
for l in "${labels[@]}"; do config_args+=(--config.label "$l" --manifest.annotation "$l"); done
umoci config --image "$layout:$version" "${config_args[@]}"
umoci gc --layout "$layout"

mkdir -p "$output"
rm -rf "$output/oci"
cp -a "$layout" "$output/oci"
tar_path=$output/gpu-devwatch-$version.oci.tar
tar -C "$layout" -cf "$tar_path.tmp" . && mv "$tar_path.tmp" "$tar_path"
echo "build-image: gpu-devwatch:$version ($revision), $(du -sh "$tar_path" | cut -f1) tar" >&2
echo "build-image: layout $output/oci (tag $version)" >&2
echo "$tar_path"
