#!/usr/bin/env bash
# Install what the R port needs: R (Debian packages), OpenBLAS, testthat, and the rpy2 series that
# matches the installed R. Idempotent: re-running it changes nothing once everything is present.
#
#   scripts/install_r.sh [PYTHON]        (PYTHON defaults to python3)
#
# rpy2 3.6.x needs R >= 4.5 (it links against R_getVar, "undefined symbol R_getVar" on R 4.2), so
# R < 4.5 gets rpy2>=3.5,<3.6 and newer R gets rpy2>=3.6,<3.7.
set -euo pipefail

PYTHON="${1:-python3}"
APT_PACKAGES_R=(r-base-core r-base-dev)
APT_PACKAGES_EXTRA=(libopenblas0-pthread r-cran-testthat)

# How to run apt-get with root rights: as root directly, or through password-less sudo.
AS_ROOT=()
CAN_ROOT=0
if [ "$(id -u)" -eq 0 ]; then
    CAN_ROOT=1
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    CAN_ROOT=1
    AS_ROOT=(sudo -n)
fi

have_apt() { command -v apt-get >/dev/null 2>&1 && command -v dpkg-query >/dev/null 2>&1; }

# Debian packages from the list that are not installed yet (prints nothing when all are).
missing_debs() {
    local pkg
    for pkg in "$@"; do
        if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
            printf '%s\n' "$pkg"
        fi
    done
}

apt_install() {
    echo "install_r.sh: apt-get install -y $*"
    "${AS_ROOT[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" || {
        # a stale package index is the usual cause on fresh containers
        "${AS_ROOT[@]}" apt-get update
        "${AS_ROOT[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"
    }
}

# 1. R itself.
if ! command -v R >/dev/null 2>&1; then
    if [ "$CAN_ROOT" -eq 1 ] && have_apt; then
        apt_install "${APT_PACKAGES_R[@]}" "${APT_PACKAGES_EXTRA[@]}"
    else
        echo "install_r.sh: R is not installed and this script cannot install it (needs root and apt-get)." >&2
        echo "Install these Debian/Ubuntu packages, then re-run this script:" >&2
        echo "    sudo apt-get install -y ${APT_PACKAGES_R[*]} ${APT_PACKAGES_EXTRA[*]}" >&2
        echo "(elsewhere: R >= 4.0 with its shared library (R built with --enable-R-shlib) and the testthat package)" >&2
        exit 1
    fi
fi

# 2. OpenBLAS and testthat, also when R was already there.
if have_apt; then
    mapfile -t MISSING < <(missing_debs "${APT_PACKAGES_EXTRA[@]}")
    if [ "${#MISSING[@]}" -gt 0 ]; then
        if [ "$CAN_ROOT" -eq 1 ]; then
            apt_install "${MISSING[@]}"
        else
            echo "install_r.sh: WARNING: not installed: ${MISSING[*]} (no root); run: sudo apt-get install -y ${MISSING[*]}" >&2
        fi
    fi
elif ! Rscript -e 'quit(status = !requireNamespace("testthat", quietly = TRUE))' >/dev/null 2>&1; then
    echo "install_r.sh: WARNING: R package testthat is missing (no apt-get here); install.packages('testthat')" >&2
fi

# 3. rpy2, in the series that matches this R.
R_VERSION="$(Rscript -e 'cat(as.character(getRversion()))')"
if Rscript -e 'quit(status = as.integer(getRversion() >= "4.5.0"))' >/dev/null 2>&1; then
    RPY2_SPEC='rpy2>=3.5,<3.6'
else
    RPY2_SPEC='rpy2>=3.6,<3.7'
fi

if "$PYTHON" - "$RPY2_SPEC" <<'EOF' 2>/dev/null; then
import sys
from importlib.metadata import version

spec = sys.argv[1]  # rpy2>=A.B,<C.D
low, high = (tuple(int(p) for p in s.split(".")) for s in spec[len("rpy2>="):].split(",<"))
installed = tuple(int(p) for p in version("rpy2").split(".")[:2])
sys.exit(0 if low <= installed < high else 1)
EOF
    echo "install_r.sh: $("$PYTHON" -c 'from importlib.metadata import version; print("rpy2", version("rpy2"))') already satisfies $RPY2_SPEC"
else
    echo "install_r.sh: $PYTHON -m pip install '$RPY2_SPEC'"
    "$PYTHON" -m pip install "$RPY2_SPEC"
fi

# 4. What we ended up with.
echo "install_r.sh: R $R_VERSION, $RPY2_SPEC"
Rscript -e 'si <- sessionInfo(); cat("BLAS:  ", si$BLAS, "\nLAPACK:", si$LAPACK, "\n");
            cat("testthat:", if (requireNamespace("testthat", quietly = TRUE)) as.character(packageVersion("testthat")) else "MISSING", "\n")'
"$PYTHON" -c 'import rpy2.robjects as ro; print("rpy2 embedded R:", ro.r("R.version.string")[0])'
