#!/bin/sh
# Installs the MPI implementations that `rsmpi-bench --compare` runs next to rsmpi:
# Debian's Open MPI and MPICH (compilers, launchers, headers). Needs root (or sudo).
set -eu
need=""
# installed: the development package where dpkg can tell (Debian's `mpich` alone has
# mpicc.mpich but not mpi.h, and .ci/run installs it for its Hydra launcher), else the
# compiler wrapper
has() { # package, command
    if command -v dpkg-query >/dev/null 2>&1; then
        dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
    else
        command -v "$2" >/dev/null 2>&1
    fi
}
has libopenmpi-dev mpicc.openmpi || need="$need openmpi-bin libopenmpi-dev"
has libmpich-dev mpicc.mpich || need="$need mpich libmpich-dev"
if [ -z "$need" ]; then
    echo "Open MPI and MPICH are already installed."
    exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y $need
