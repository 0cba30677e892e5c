# shellcheck shell=bash disable=SC2034
# Which Slurm release a set of headers is, and which Slurm packages a Tally .deb is built
# against, by release: sourced by scripts/mkdeb.sh, scripts/deb-check.sh,
# scripts/plugin-version.sh, scripts/gen-bindings.sh, testbed/deb.sh and testbed/lib.sh (one
# definition of each).
#
#   header_release <slurm_version.h>
#                              sets HDR_HEX (0x160508), HDR_RELEASE (22.05) and HDR_VERSION
#                              (22.05.8) from the header's SLURM_VERSION_NUMBER; returns 1 when
#                              the file cannot be read or defines none
#
#   deb_target <major.minor>   sets DEB_CTLD_PKG (the package holding slurmctld, which the
#                              .deb depends on at exactly the release) and DEB_PLUGIN_SUBDIR
#                              (where that packaging's slurmctld loads plugins from, under
#                              /usr/lib/<multiarch>/), and DEB_SLURM_PACKAGING (its name)
#
# 22.05 and 24.11: Debian's own packages (slurm-wlm: slurmctld, plugins in slurm-wlm/).
# 25.11 and later: SchedMD's packages, built by a site from the debian/ directory of the
# release tarball (slurm-smd-slurmctld, plugins in slurm/), since Debian has none of them.
header_release() {
    local v
    [[ -r $1 ]] || return 1
    v=$(awk '$1 == "#define" && $2 == "SLURM_VERSION_NUMBER" { gsub(/[()]/, "", $3); print $3; exit }' "$1")
    [[ $v =~ ^(0x[0-9a-fA-F]+|[0-9]+)$ ]] || return 1
    v=$((v))
    HDR_HEX=$(printf '0x%06x' "$v")
    HDR_RELEASE=$(( (v >> 16) & 0xff )).$(printf '%02d' $(( (v >> 8) & 0xff )))
    HDR_VERSION=$HDR_RELEASE.$(( v & 0xff ))
}

deb_target() {
    case $1 in
        22.05|24.11)
            DEB_CTLD_PKG=slurmctld
            DEB_PLUGIN_SUBDIR=slurm-wlm
            DEB_SLURM_PACKAGING="Debian's slurm-wlm packages" ;;
        *)
            DEB_CTLD_PKG=slurm-smd-slurmctld
            DEB_PLUGIN_SUBDIR=slurm
            DEB_SLURM_PACKAGING="SchedMD's slurm-smd packages (built from the release tarball's debian/)" ;;
    esac
}
