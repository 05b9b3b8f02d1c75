#!/usr/bin/env bash
# Clebsch: run a command inside the Debian sid chroot that holds LAMMPS with KOKKOS (made by
# scripts/build-lammps-kokkos.sh). Debian's libkokkos-dev (OpenMP) needs glibc >= 2.38, newer
# than Debian 12's, so the Kokkos LAMMPS, its plugin build and its runs live in that chroot.
#
# Usage: kokkos-chroot.sh ROOT WORKDIR COMMAND [ARG...]
#
# Each call enters a private mount namespace (unshare -m), so nothing stays mounted afterwards:
# /proc, /dev and /sys, then /tmp, the cache ($CLEBSCH_CACHE), WORKDIR and any folder listed in
# CLEBSCH_CHROOT_BINDS (colon-separated: the source tree, build folders) are bind-mounted at the
# same paths inside, so host paths (run directories, models, plugins) mean the same on both sides.
# The host's / and its system folders (/usr, /etc, /var, ...) are never bound over the chroot's;
# the CUDA toolkit (/usr/local/cuda) may be, for libclebsch_cuda's NVRTC.
# Needs root (or CAP_SYS_ADMIN), as CI and these machines have.
set -euo pipefail

if [ $# -lt 3 ]; then
  echo "usage: $0 ROOT WORKDIR COMMAND [ARG...]" >&2
  exit 2
fi
chroot_root=$1 workdir=$2
shift 2
cache=${CLEBSCH_CACHE:-$HOME/.cache/clebsch}
binds="/tmp:$cache:$workdir${CLEBSCH_CHROOT_BINDS:+:$CLEBSCH_CHROOT_BINDS}"

# shellcheck disable=SC2016
inner='set -euo pipefail
root=$1 workdir=$2 binds=$3
shift 3
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount --rbind /sys "$root/sys"
IFS=: read -r -a dirs <<<"$binds"
for d in "${dirs[@]}"; do
  [ -n "$d" ] && [ -d "$d" ] || continue
  # Never the host root or its system folders: they would hide those of the chroot.
  case "$d" in
    /usr/local/cuda|/usr/local/cuda/*|/usr/local/cuda-*) ;;   # not in the chroot: hides nothing
    /|/usr|/usr/*|/etc|/etc/*|/bin|/bin/*|/sbin|/sbin/*|/lib|/lib/*|/lib32|/lib32/*|/lib64|/lib64/*|\
    /var|/var/*|/proc|/proc/*|/sys|/sys/*|/dev|/dev/*|/boot|/boot/*|/run|/run/*) continue ;;
  esac
  mkdir -p "$root$d"
  mount --bind "$d" "$root$d"
done
cp -f /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
exec chroot "$root" /usr/bin/env HOME=/root PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
  /bin/bash -c "cd \"\$1\" && shift && exec \"\$@\"" bash "$workdir" "$@"'
exec unshare --mount --propagation private -- bash -c "$inner" inner "$chroot_root" "$workdir" \
  "$binds" "$@"
