#!/usr/bin/env bash
# The current wireguard-go for the tunnel bench and the interop tests, on a
# Debian release that ships an older one; and the newest (unstable's) for the
# end-to-end suite (tests/e2e).
#
#   tests/tools/fetch-wireguard-go.sh [SUITE]      (default SUITE: trixie)
#   tests/tools/fetch-wireguard-go.sh sid          (the newest Debian has)
#
# Downloads SUITE's `wireguard-go` package for this machine's architecture
# through a PRIVATE apt state (Dir::State, Dir::Cache, Dir::Etc in a temporary
# directory: private_apt.sh, shared with tests/arm64/run.sh; the mirrors are this machine's own Debian sources moved to SUITE,
# see debian_sources.py) and unpacks it with `dpkg -x` into a cache outside the
# repo:
#   ${VPNCRYPT_WGGO_CACHE:-${XDG_CACHE_HOME:-/var/cache}/vpncrypt-wireguard-go}/<SUITE>-<ARCH>-<key>/
# keyed by SUITE and these scripts, like tests/arm64/run.sh keys its sysroot.
# The cache holds one build per suite and architecture: a new build replaces
# that suite's older ones (other script versions) and leaves other suites'
# alone, so fetching sid and trixie in turn fetches each once.
# The system's apt state (/var/lib/apt, /var/cache/apt, /etc/apt) and dpkg
# database are not touched; nothing is installed.
#
# Prints the path of the unpacked binary (…/usr/bin/wireguard-go) on stdout;
# progress and errors go to stderr.  Exit 1 on any failure.
#   vpncrypt bench tunnel --wireguard-go "$(tests/tools/fetch-wireguard-go.sh)"
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/private_apt.sh"
suite=${1:-trixie}
prog="tests/tools/fetch-wireguard-go.sh"
# a suite name is part of the cache's directory names
[[ $suite =~ ^[a-z0-9][a-z0-9.-]*$ ]] || { echo "$prog: bad suite name '$suite'" >&2; exit 1; }
for tool in apt-get dpkg dpkg-deb python3 sha256sum; do
    command -v "$tool" >/dev/null || { echo "$prog: $tool not found" >&2; exit 1; }
done
arch=$(dpkg --print-architecture)
key=$( { echo "$suite $arch"; cat "$here/fetch-wireguard-go.sh" "$here/private_apt.sh" \
         "$here/debian_sources.py" "$here/../arm64/sysroot.py"; } | sha256sum | cut -c1-16)
cache_root=${VPNCRYPT_WGGO_CACHE:-${XDG_CACHE_HOME:-/var/cache}/vpncrypt-wireguard-go}
dest="$cache_root/$suite-$arch-$key"
bin="$dest/usr/bin/wireguard-go"

if [ ! -x "$bin" ] || [ ! -f "$dest/.vpncrypt-package" ]; then
    mkdir -p "$cache_root"
    work=$(mktemp -d "$cache_root/build.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    private_apt "$work" "$arch"
    # no apt.conf.d of the system's either (its hooks are for the system's state)
    mkdir -p "$work/apt/etc/apt.conf.d" "$work/root" "$work/debs"
    apt_opts+=(-o Dir::Etc::Parts="$work/apt/etc/apt.conf.d")
    python3 "$here/debian_sources.py" "$work/apt/etc" "$suite"
    echo "$prog: fetching $suite's wireguard-go ($arch) into $dest" >&2
    apt-get "${apt_opts[@]}" -qq update
    # `download` fetches just this package (it is a static Go binary), verified
    # against the signed Release file like any apt download.
    (cd "$work/debs" && apt-get "${apt_opts[@]}" -qq download wireguard-go)
    debs=("$work"/debs/wireguard-go_*.deb)
    [ -e "${debs[0]}" ] || { echo "$prog: apt downloaded nothing" >&2; exit 1; }
    dpkg -x "${debs[0]}" "$work/root"
    [ -x "$work/root/usr/bin/wireguard-go" ] \
        || { echo "$prog: no usr/bin/wireguard-go in ${debs[0]##*/}" >&2; exit 1; }
    dpkg-deb -f "${debs[0]}" Package Version Architecture > "$work/root/.vpncrypt-package"
    rm -rf "$dest"
    mv "$work/root" "$dest"
    # this suite's builds by other script versions are stale now, and so are
    # the builds of script versions that named them by key alone; other
    # suites' builds stay
    legacy=$(printf '[0-9a-f]%.0s' {1..16})
    find "$cache_root" -mindepth 1 -maxdepth 1 -type d ! -name "${dest##*/}" \
        \( -name "$suite-$arch-*" -o -name "$legacy" \) -exec rm -rf {} +
    echo "$prog: $(tr '\n' ' ' < "$dest/.vpncrypt-package")-> $bin" >&2
fi
"$bin" --version >/dev/null 2>&1 || { echo "$prog: $bin does not run" >&2; exit 1; }
echo "$bin"
