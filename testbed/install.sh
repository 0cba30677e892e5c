#!/usr/bin/env bash
# Tally: install what the project needs (Debian 12, as root): the loopback Slurm cluster's
# packages, and what the planner's HiGHS solver builds with (cmake, a C++ compiler, libclang
# for the highs-sys bindings).
# On Debian 13 (the chroot of testbed/trixie.sh, which runs this inside it) only the test
# bed's packages: Slurm 24.11, munge, MariaDB and the commands the bed scripts and the tests
# call (nothing is built there).
# Idempotent: a fast no-op when everything is already installed at the right version.
# Slurm packages are pinned (22.05.8-4+deb12u3 on Debian 12, 24.11.5-4+deb13u1 on Debian 13);
# nothing is installed with recommends.
# The emulator packages (slurm-wlm-emulator, slurm-client-emulator) are never installed: they
# take over /usr/sbin/slurmctld and slurmd.
#
# Environment: none (DEBIAN_FRONTEND=noninteractive is set here).
set -euo pipefail
# shellcheck source=testbed/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SLURM_PKGS=(slurmctld slurmd slurm-client libslurm-dev slurm-wlm-basic-plugins-dev slurmdbd)
if [[ $TB_SLURM_RELEASE == 22.05 ]]; then
    # dpkg-dev: make deb (dpkg-shlibdeps, dpkg-architecture); sudo: the private reports'
    # end-to-end test runs the sudoers set-up docs/reports.md gives; openssl: the exporter's
    # TLS test makes its certificate; curl: scripts/fetch.sh and its test.
    OTHER_PKGS=(munge mariadb-server mariadb-client procps util-linux passwd coreutils sudo
                cmake g++ libclang-dev dpkg-dev openssl curl)
    WHAT="cmake and libclang for HiGHS, dpkg-dev for the package"
else
    # findutils: find of lib.sh; libstdc++6: target/release/tally (HiGHS is C++); sudo: as above.
    OTHER_PKGS=(munge mariadb-server mariadb-client procps util-linux passwd coreutils hostname sudo
                findutils libstdc++6)
    WHAT="munge and MariaDB"
fi

[[ $(id -u) == 0 ]] || die "install.sh must run as root"

# missing: print the packages not installed (or a Slurm package at another version).
missing() {
    local p want have
    for p in "${SLURM_PKGS[@]}" "${OTHER_PKGS[@]}"; do
        want=
        [[ " ${SLURM_PKGS[*]} " == *" $p "* ]] && want=$TB_SLURM_VERSION
        have=$(dpkg-query -W -f='${db:Status-Status} ${Version}' "$p" 2>/dev/null || true)
        if [[ $have != "installed "* ]] || [[ -n $want && $have != "installed $want" ]]; then
            echo "$p"
        fi
    done
}

t0=$(now)
mapfile -t todo < <(missing)
if (( ${#todo[@]} == 0 )); then
    log "install: all packages present (${TB_SLURM_VERSION} for Slurm, $WHAT) [$(elapsed "$t0")s]"
    exit 0
fi
log "install: to install: ${todo[*]}"

for p in slurm-wlm-emulator slurm-client-emulator; do
    if dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -q installed; then
        die "$p is installed: it replaces slurmctld/slurmd; remove it (apt-get purge $p)"
    fi
done

args=()
for p in "${todo[@]}"; do
    if [[ " ${SLURM_PKGS[*]} " == *" $p "* ]]; then args+=("$p=$TB_SLURM_VERSION"); else args+=("$p"); fi
done

updated=0
apt_update() { log "install: apt-get update"; apt-get update -qq || warn "apt-get update reported errors"; updated=1; }

# Refresh the package lists when the pinned version is unknown to them.
if ! apt-cache show "slurmctld=$TB_SLURM_VERSION" >/dev/null 2>&1; then apt_update; fi

install() {
    apt-get install -y -qq --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${args[@]}"
}
if ! install; then
    (( updated )) && die "apt-get install failed"
    # Stale lists (a superseded security update gives 404): refresh once and retry.
    apt_update
    install || die "apt-get install failed"
fi

mapfile -t todo < <(missing)
(( ${#todo[@]} == 0 )) || die "still missing after install: ${todo[*]}"
log "install: done [$(elapsed "$t0")s]"
