#!/usr/bin/env bash
# Fetches Debian 11's runc 1.0.0~rc93 (the last runc whose `runc update` re-applies the device
# rules) into a cache directory, WITHOUT installing it: a private apt source list for bullseye,
# private lists and archives, `apt-get download`, `dpkg-deb -x`. The host's apt state and its
# installed runc are never touched.
#
#   fetch_old_runc.sh [CACHE_DIR]
#
# CACHE_DIR defaults to $GDW_TEST_ROOTFS_CACHE or /var/cache/gdw-test (the other privileged
# tests' cache). On success prints the path of the runc binary (<cache>/runc-rc93/usr/sbin/runc)
# and exits 0; a second run finds it there and downloads nothing. Exits 1 with the reason on
# stderr when it cannot be fetched (no network, no such version).
set -euo pipefail

cache=${1:-${GDW_TEST_ROOTFS_CACHE:-/var/cache/gdw-test}}
dest=$cache/runc-rc93
marker=$dest/.gdw-complete
if [[ -f $marker && -x $dest/usr/sbin/runc ]]; then
  echo "$dest/usr/sbin/runc"
  exit 0
fi

for tool in apt-get apt-cache dpkg-deb; do
  command -v "$tool" >/dev/null || { echo "fetch_old_runc: $tool is missing" >&2; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/gdw-apt-bullseye.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/archives/partial" "$work/sources.list.d"
cat >"$work/bullseye.sources" <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bullseye
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
apt_opts=(
  -o "Dir::Etc::sourcelist=$work/bullseye.sources"
  -o "Dir::Etc::sourceparts=$work/sources.list.d"
  -o "Dir::State::Lists=$work/lists"
  -o "Dir::Cache=$work/cache"
  -o "Dir::Cache::archives=$work/archives"
  -o "Dir::State::status=/var/lib/dpkg/status"
  -o "APT::Get::List-Cleanup=0"
  -o "APT::Sandbox::User=root"
  -o "Acquire::Retries=2"
  -o "Acquire::http::Timeout=20"
)
mkdir -p "$work/cache"
if ! apt-get "${apt_opts[@]}" -qq update 2>"$work/update.err"; then
  echo "fetch_old_runc: apt-get update for bullseye failed: $(tail -n 3 "$work/update.err" | tr '\n' ' ')" >&2
  exit 1
fi
# The one bullseye runc: 1.0.0~rc93+ds1-5+deb11u<N> (security updates raise N).
version=$(apt-cache "${apt_opts[@]}" madison runc 2>/dev/null | awk -F'|' '{gsub(/ /, "", $2); print $2}' |
          grep '^1\.0\.0~rc93' | sort -V | tail -n 1 || true)
if [[ -z $version ]]; then
  # apt-get update exits 0 when an index could not be fetched: say why it is empty.
  why=$(grep -E '^(W|E):' "$work/update.err" | head -n 3 | tr '\n' ' ' || true)
  echo "fetch_old_runc: no runc 1.0.0~rc93 in bullseye's index${why:+ (apt-get update: $why)}" >&2
  exit 1
fi
if ! (cd "$work" && apt-get "${apt_opts[@]}" -qq download "runc=$version" 2>"$work/download.err"); then
  echo "fetch_old_runc: apt-get download runc=$version failed: $(tail -n 3 "$work/download.err" | tr '\n' ' ')" >&2
  exit 1
fi
deb=$(ls "$work"/runc_*.deb)
rm -rf "$dest.partial"
mkdir -p "$dest.partial"
dpkg-deb -x "$deb" "$dest.partial"
"$dest.partial/usr/sbin/runc" --version >/dev/null
echo "$version" >"$dest.partial/.gdw-version"
rm -rf "$dest"
mv "$dest.partial" "$dest"
touch "$marker"
echo "$dest/usr/sbin/runc"
