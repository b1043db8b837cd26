#!/bin/sh
# Installs the MPI implementations that `rsmpi-bench --compare` runs next to rsmpi:
# Debian's Open MPI and MPICH (compilers, launchers, headers). Needs root (or sudo).
set -eu
need=""
command -v mpicc.openmpi >/dev/null 2>&1 || need="$need openmpi-bin libopenmpi-dev"
command -v mpicc.mpich >/dev/null 2>&1 || need="$need mpich libmpich-dev"
if [ -z "$need" ]; then
    echo "Open MPI and MPICH are already installed."
    exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y $need
