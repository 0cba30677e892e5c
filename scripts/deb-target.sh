# shellcheck shell=bash disable=SC2034
# Which Slurm packages a Tally .deb is built against, by Slurm release: sourced by
# scripts/mkdeb.sh, scripts/deb-check.sh and testbed/deb.sh (one definition).
#
#   deb_target <major.minor>   sets DEB_CTLD_PKG (the package holding slurmctld, which the
#                              .deb depends on at exactly the release) and DEB_PLUGIN_SUBDIR
#                              (where that packaging's slurmctld loads plugins from, under
#                              /usr/lib/<multiarch>/), and DEB_SLURM_PACKAGING (its name)
#
# 22.05 and 24.11: Debian's own packages (slurm-wlm: slurmctld, plugins in slurm-wlm/).
# 25.11 and later: SchedMD's packages, built by a site from the debian/ directory of the
# release tarball (slurm-smd-slurmctld, plugins in slurm/), since Debian has none of them.
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
