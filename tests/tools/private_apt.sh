# Sourced (not run) by tests/tools/fetch-wireguard-go.sh and tests/arm64/run.sh.
#
#   private_apt WORK ARCH
#
# An apt state of its own under WORK/apt: package lists, an archives cache and an
# empty dpkg status (nothing counts as installed, so apt takes a package's whole
# dependency closure), with the sources and preferences the caller writes to
# WORK/apt/etc (sources.list, sources.list.d/, preferences, preferences.d/), for
# the architecture ARCH.  Sets the array apt_opts to the apt-get options that use
# it; a caller adds its own after them.  The system's apt state (/var/lib/apt,
# /var/cache/apt, its sources) and dpkg database are not touched.
# Both callers hash this file into their cache keys.
private_apt() {
    local work=$1 arch=$2
    mkdir -p "$work/apt/state/lists/partial" "$work/apt/cache/archives/partial" \
             "$work/apt/etc/preferences.d"
    : > "$work/apt/status"
    apt_opts=(
        -o Dir::State="$work/apt/state" -o Dir::State::status="$work/apt/status"
        -o Dir::Cache="$work/apt/cache"
        -o Dir::Etc::SourceList="$work/apt/etc/sources.list"
        -o Dir::Etc::SourceParts="$work/apt/etc/sources.list.d"
        -o Dir::Etc::PreferencesParts="$work/apt/etc/preferences.d"
        -o Dir::Etc::Preferences="$work/apt/etc/preferences"
        -o APT::Architecture="$arch" -o APT::Architectures::="$arch"
        -o Debug::NoLocking=1 -o APT::Sandbox::User=root
    )
}
