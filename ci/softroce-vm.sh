#!/bin/bash
# Vendored from the team's shared tools (shared/tools/softroce/softroce-vm.sh) so that CI
# runs from a clean clone; keep in step with it.
# softroce-vm.sh - run a command inside a throw-away qemu guest that has a
# SoftRoCE (rdma_rxe) RDMA device, on a Debian bookworm x86_64 host whose own
# kernel has no RDMA support.
#
# Usage:
#   softroce-vm.sh <cache-dir> <host-dir> <command> [args...]
#
#   <cache-dir>  where the guest (kernel + initramfs, ~80 MiB) is built on first
#                use and reused afterwards. Safe to share between runs (locked).
#   <host-dir>   host directory shared read-write into the guest at the SAME
#                absolute path; the command starts there (cwd).
#   <command>    one argument  -> run as a bash script string (bash -c "...")
#                several args  -> run as an argv (exec "$@")
#
# The command's stdout/stderr are streamed to this script's stdout/stderr and
# the script exits with the command's exit status (124 = timeout, 125 = the
# guest/infrastructure failed before reporting a status).
#
# Guest: Debian bookworm kernel (linux-image-amd64's dependency), busybox
# initramfs, and the HOST's root filesystem mounted read-only over virtio-9p with
# a tmpfs overlay on top (virtme-style): everything installed on the host,
# including binaries built on the host against libibverbs, runs unchanged.
# /tmp, /run, /var/tmp are empty tmpfs in the guest; writes outside <host-dir>
# are discarded.  Before the command runs the guest has:
#   eth0   virtio-net, $SOFTROCE_IP (default 10.0.2.15/24), qemu user net
#   rxe0   SoftRoCE device on eth0 (GID index 1 = RoCEv2 ::ffff:<ip>)
#   with SOFTROCE_TOPO=veth also: rxe_v0 on veth0 (10.10.0.1/24) and rxe_v1 on
#          veth1 (10.10.0.2/24), a veth pair in the same netns; policy routing
#          makes 10.10.0.1 <-> 10.10.0.2 traffic really cross the veth "wire"
# Inside, SOFTROCE_GUEST=1 is set; /run/softroce/setup.log shows the setup.
#
# Environment knobs (all optional):
#   SOFTROCE_ACCEL    auto|kvm|tcg  (auto: kvm only if /dev/kvm is usable AND
#                     the CPU advertises vmx/svm; else tcg = software emulation)
#   SOFTROCE_CPUS     guest vCPUs (default: host nproc clamped to 2..8)
#   SOFTROCE_MEM      guest memory (default 2G)
#   SOFTROCE_TIMEOUT  seconds before the VM is killed (default 3600)
#   SOFTROCE_NET      eth0 (default) | dummy (no NIC, rxe0 on a dummy device)
#   SOFTROCE_NETDEV   qemu -netdev spec for eth0, must contain id=n0
#                     (default user,id=n0,restrict=on). To connect two guests use UDP:
#                     A: socket,id=n0,udp=127.0.0.1:5556,localaddr=127.0.0.1:5555
#                     B: socket,id=n0,udp=127.0.0.1:5555,localaddr=127.0.0.1:5556
#                     (TCP listen=/connect= works too but Nagle makes it ~40 ms/op)
#   SOFTROCE_IP       eth0/dummy0 address (default 10.0.2.15/24)
#   SOFTROCE_MAC      eth0 MAC address (default 52:54:00:12:34:56)
#   SOFTROCE_TOPO     single (default) | veth
#   SOFTROCE_PASSENV  space-separated names of host env vars to pass to the command
#   SOFTROCE_VERBOSE  1 = print the guest kernel console to stderr at the end
#   SOFTROCE_QUIET    1 = no progress messages from this script
#   SOFTROCE_KPKG     kernel package to build the guest from (default: current
#                     dependency of linux-image-amd64, pinned once built)
#   SOFTROCE_REBUILD  1 = rebuild the guest (e.g. to pick up a new kernel)
#   SOFTROCE_NO_APT   1 = never call apt-get (fail if something is missing)
#   SOFTROCE_MONITOR  path of a unix socket for the qemu HMP monitor (debugging)
#   SOFTROCE_KAPPEND  extra guest kernel command line (e.g. loglevel=7)
#
# Notes:
#  * Without hardware KVM the guest runs under TCG (software emulation): the
#    guest CPU has SSE4.2/AVX/AVX2 but no AVX-512, so do not build the tested
#    binaries with -march=native on an AVX-512 host (SIGILL in the guest).
#  * Busy-polling verbs programs need >= 2 vCPUs: rxe does its work in softirq/
#    kernel threads, and with one vCPU a spinning process starves it (~10 ms/op).
#  * rdma_rxe in kernel 6.1 only works in the initial network namespace.
#  * Examples:  softroce-vm.sh ~/.cache/softroce $PWD 'make check'
#               softroce-vm.sh /var/cache/softroce /src/proj ./build/verbs_test --gtest_brief=1
set -euo pipefail

die() { echo "softroce-vm: $*" >&2; exit 125; }
log() { [ "${SOFTROCE_QUIET:-0}" = 1 ] || echo "softroce-vm: $*" >&2; }

[ $# -ge 3 ] || { sed -n '4,18p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
CACHE=$(realpath -m -- "$1"); HOSTDIR=$(realpath -e -- "$2") || die "host dir $2 does not exist"; shift 2
[ -d "$HOSTDIR" ] || die "$HOSTDIR is not a directory"
case "$HOSTDIR" in /|/proc|/proc/*|/sys|/sys/*|/dev|/dev/*) die "refusing to share $HOSTDIR";; esac
case "$HOSTDIR" in *[[:space:]]*|*[\'\"\\\$\`]*) die "host dir path must not contain spaces, quotes, \\, \$ or \`";; esac
mkdir -p "$CACHE"

# ------------------------------------------------------------- host packages
HOST_PKGS="qemu-system-x86 busybox-static kmod cpio gzip xz-utils iproute2
  rdma-core ibverbs-providers ibverbs-utils rdmacm-utils"
apt_get() {  # apt-get with retries while another apt/dpkg holds the lock
  local i
  for i in $(seq 1 90); do
    if DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=60 "$@" >"$CACHE/apt.log" 2>&1; then return 0; fi
    grep -q 'Could not get lock\|Unable to acquire\|Unable to lock' "$CACHE/apt.log" || return 1
    sleep 2
  done
  return 1
}
ensure_host_pkgs() {
  local missing=() p
  for p in $HOST_PKGS; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "${SOFTROCE_NO_APT:-0}" = 1 ] && die "missing host packages: ${missing[*]}"
  [ "$(id -u)" = 0 ] || die "missing host packages (need root to install): ${missing[*]}"
  log "installing host packages: ${missing[*]}"
  if ! apt_get install -y --no-install-recommends "${missing[@]}"; then
    apt_get update || { cat "$CACHE/apt.log" >&2; die "apt-get update failed"; }
    apt_get install -y --no-install-recommends "${missing[@]}" || { cat "$CACHE/apt.log" >&2; die "apt-get install failed"; }
  fi
}

# --------------------------------------------------------------- guest build
GUEST_MODULES="virtio_pci virtio_net virtio_console 9pnet_virtio 9p overlay dummy veth
  crc32_generic crc32-pclmul udp_tunnel ip6_udp_tunnel ib_core ib_uverbs rdma_rxe
  ib_cm iw_cm rdma_cm rdma_ucm ib_umad"
BUILD_VERSION=7   # bump when the guest layout/init changes

write_init() {  # $1 = initramfs root
cat > "$1/init" <<'EOF'
#!/bin/sh
# softroce guest init (busybox sh, PID 1)
export PATH=/bin:/sbin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
fail() { echo "SOFTROCE-INIT-FAIL: $*"; echo 125 > /ctl/rc 2>/dev/null; sync; poweroff -f; }
echo "SOFTROCE-INIT $(cat /proc/uptime)"
while read -r m; do insmod "/mods/$m" || echo "insmod $m failed"; done < /mods/order
echo "SOFTROCE-MODS-LOADED $(cat /proc/uptime)"
O=trans=virtio,version=9p2000.L,msize=262144
mount -t 9p -o $O,cache=none ctl /ctl || fail "mount ctl"
. /ctl/config || fail "read config"
mount -t 9p -o $O,ro,cache=loose hostroot /lower || fail "mount hostroot"
mount -t tmpfs -o mode=0755 tmpfs /upper; mkdir -p /upper/u /upper/w
mount -t overlay -o lowerdir=/lower,upperdir=/upper/u,workdir=/upper/w overlay /newroot || fail "mount overlay"
R=/newroot
mount -t proc proc $R/proc; mount -t sysfs sys $R/sys; mount -o bind /dev $R/dev
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts $R/dev/pts
mount -t tmpfs tmpfs $R/dev/shm
for d in /tmp /run /var/tmp; do mount -t tmpfs -o mode=1777 tmpfs $R$d; done
chmod 0755 $R/run
mkdir -p "$R$SR_HOSTDIR" $R/run/softroce
mount -t 9p -o $O,cache=mmap hostdir "$R$SR_HOSTDIR" || fail "mount hostdir"
mount -o bind /ctl $R/run/softroce
mkdir -p $R/lib/modules; mount -o bind /lib/modules $R/lib/modules
OUT=/dev/null; ERR=/dev/null
for p in /sys/class/virtio-ports/*; do
  case "$(cat $p/name 2>/dev/null)" in
    softroce.out) OUT=/dev/${p##*/};; softroce.err) ERR=/dev/${p##*/};;
  esac
done
echo "SOFTROCE-MOUNTED $(cat /proc/uptime) out=$OUT err=$ERR"
chroot $R /bin/bash /run/softroce/setup.sh > /ctl/setup.log 2>&1 || { cat /ctl/setup.log; fail "guest setup failed"; }
echo "SOFTROCE-CMD-START $(cat /proc/uptime)"
chroot $R /bin/bash /run/softroce/cmd.sh </dev/null >$OUT 2>$ERR
rc=$?
echo "SOFTROCE-CMD-END rc=$rc $(cat /proc/uptime)"
echo $rc > /ctl/rc
sync
umount "$R$SR_HOSTDIR" 2>/dev/null
poweroff -f
EOF
chmod 0755 "$1/init"
}

build_guest() {
  local kpkg="${SOFTROCE_KPKG:-}"
  if [ -f "$CACHE/guest/stamp" ] && [ "${SOFTROCE_REBUILD:-0}" != 1 ]; then
    local have; have=$(cat "$CACHE/guest/stamp")
    if [ "${have%% *}" = "$BUILD_VERSION" ] && { [ -z "$kpkg" ] || [ "${have#* }" = "$kpkg" ]; }; then
      return 0   # pinned: a warm run never touches apt
    fi
  fi
  if [ -z "$kpkg" ]; then
    kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
    if [ -z "$kpkg" ]; then
      apt_get update || true
      kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
    fi
    [ -n "$kpkg" ] || die "cannot find the kernel package (apt-cache depends linux-image-amd64)"
    apt-cache show "$kpkg-unsigned" >/dev/null 2>&1 && kpkg="$kpkg-unsigned"
  fi
  log "building guest in $CACHE/guest from $kpkg"
  local b="$CACHE/build.$$"; rm -rf "$b"; mkdir -p "$b/deb" "$b/x"
  (cd "$b/deb" && apt-get download -q "$kpkg" >"$b/dl.log" 2>&1) ||
    { apt_get update || true; (cd "$b/deb" && apt-get download -q "$kpkg" >"$b/dl.log" 2>&1) ||
      { cat "$b/dl.log" >&2; rm -rf "$b"; die "apt-get download $kpkg failed"; }; }
  dpkg-deb -x "$b"/deb/*.deb "$b/x"
  local kver; kver=$(ls "$b/x/lib/modules" | head -1); [ -n "$kver" ] || die "no modules in $kpkg"
  depmod -b "$b/x" "$kver"
  local ir="$b/initramfs"
  mkdir -p "$ir"/{bin,sbin,proc,sys,dev,ctl,lower,upper,newroot,mods,lib/modules/$kver,usr/bin,usr/sbin}
  cp /bin/busybox "$ir/bin/busybox"
  local a; for a in $("$ir/bin/busybox" --list-full); do
    [ -e "$ir/$a" ] || ln -s /bin/busybox "$ir/$a"; done
  # modules + load order = dependency closure of GUEST_MODULES
  local m f kw rest seen=" " base rel
  : > "$ir/mods/order"
  for m in $GUEST_MODULES; do
    while read -r kw f rest; do
      [ "$kw" = insmod ] || continue
      f=${f#"$b/x"}; case "$seen" in *" $f "*) continue;; esac; seen="$seen$f "
      base=$(basename "$f"); rel=${f#/lib/modules/$kver/}
      mkdir -p "$(dirname "$ir/lib/modules/$kver/$rel")"; cp "$b/x$f" "$ir/lib/modules/$kver/$rel"
      ln -s "/lib/modules/$kver/$rel" "$ir/mods/$base"
      echo "$base" >> "$ir/mods/order"
    done < <(modprobe -d "$b/x" -S "$kver" --show-depends "$m" 2>/dev/null || true)
  done
  grep -q '^rdma_rxe' "$ir/mods/order" || die "rdma_rxe not found in $kpkg"
  cp "$b/x/lib/modules/$kver"/modules.{order,builtin,builtin.modinfo} "$ir/lib/modules/$kver/" 2>/dev/null || true
  depmod -b "$ir" "$kver"   # so that modprobe / request_module work in the guest
  write_init "$ir"
  local g="$CACHE/guest.new.$$"; rm -rf "$g"; mkdir -p "$g"
  (cd "$ir" && find . | cpio -o -H newc --quiet | gzip -1) > "$g/initramfs.cpio.gz"
  cp "$b/x/boot/vmlinuz-$kver" "$g/vmlinuz"
  # Uncompressed ELF vmlinux: qemu boots it through the PVH entry point, which
  # skips the in-guest decompression (slow under TCG). Same as extract-vmlinux.
  local off
  for off in $(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$g/vmlinuz" | cut -d: -f1); do
    tail -c +$((off + 1)) "$g/vmlinuz" | xz -dc > "$g/vmlinux" 2>/dev/null || true
    [ "$(head -c 4 "$g/vmlinux" | od -An -c | tr -d ' ')" = '177ELF' ] && break
    rm -f "$g/vmlinux"
  done
  echo "$kver" > "$g/kver"
  echo "$BUILD_VERSION $kpkg" > "$g/stamp"
  rm -rf "$CACHE/guest"; mv "$g" "$CACHE/guest"
  rm -rf "$b"
  log "guest built: $(du -sh "$CACHE/guest" | cut -f1) ($(cat "$CACHE/guest/kver"))"
}

# ----------------------------------------------------------------------- run
exec 9>"$CACHE/.lock"
flock 9                      # one builder/installer at a time
ensure_host_pkgs
build_guest
flock -u 9; exec 9>&-

ACCEL=${SOFTROCE_ACCEL:-auto}
if [ "$ACCEL" = auto ]; then
  ACCEL=tcg
  if [ -r /dev/kvm ] && [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo; then ACCEL=kvm; fi
fi
NCPU=$(nproc); [ "$NCPU" -lt 2 ] && NCPU=2; [ "$NCPU" -gt 8 ] && NCPU=8; NCPU=${SOFTROCE_CPUS:-$NCPU}
MEM=${SOFTROCE_MEM:-2G}
NET=${SOFTROCE_NET:-eth0}
TOPO=${SOFTROCE_TOPO:-single}
IPADDR=${SOFTROCE_IP:-10.0.2.15/24}
MAC=${SOFTROCE_MAC:-52:54:00:12:34:56}
NETDEV=${SOFTROCE_NETDEV:-user,id=n0,restrict=on}

RUN=$(mktemp -d "${TMPDIR:-/tmp}/softroce-run.XXXXXX")
QPID= CAT1= CAT2=
cleanup() {
  if [ -n "$QPID" ] && kill -0 "$QPID" 2>/dev/null; then kill "$QPID" 2>/dev/null || true; wait "$QPID" 2>/dev/null || true; fi
  for p in $CAT1 $CAT2; do kill "$p" 2>/dev/null || true; done
  rm -rf "$RUN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

printf "SR_HOSTDIR='%s'\n" "$HOSTDIR" > "$RUN/config"

# guest-side network + rxe setup (runs in the chroot, i.e. with host binaries)
cat > "$RUN/setup.sh" <<EOF
PS4='+ \$(read -r u _ < /proc/uptime; echo \$u) '
set -ex
NET=$NET TOPO=$TOPO IPADDR=$IPADDR
EOF
cat >> "$RUN/setup.sh" <<'EOF'
ip link set lo up
if [ "$NET" = eth0 ] && ip link show eth0 >/dev/null 2>&1; then dev=eth0; else
  ip link show dummy0 >/dev/null 2>&1 || ip link add dummy0 type dummy; dev=dummy0; fi
ip addr add $IPADDR dev $dev
ip link set $dev up
rdma link add rxe0 type rxe netdev $dev
if [ "$TOPO" = veth ]; then
  # Two rxe devices on the two ends of a veth pair in the SAME netns (rxe in
  # kernel 6.1 only works in the initial netns).  Policy routing sends locally
  # generated traffic between the two addresses over the veth wire instead of lo.
  ip link add veth0 type veth peer name veth1
  for d in all default veth0 veth1; do
    sysctl -qw net.ipv4.conf.$d.accept_local=1 net.ipv4.conf.$d.rp_filter=0; done
  ip addr add 10.10.0.1/24 dev veth0; ip addr add 10.10.0.2/24 dev veth1
  ip link set veth0 up; ip link set veth1 up
  ip route add 10.10.0.2 dev veth0 src 10.10.0.1 table 100
  ip route add 10.10.0.1 dev veth1 src 10.10.0.2 table 101
  ip rule add pref 10 iif lo to 10.10.0.2 lookup 100
  ip rule add pref 11 iif lo to 10.10.0.1 lookup 101
  ip rule add pref 100 lookup local; ip rule del pref 0
  rdma link add rxe_v0 type rxe netdev veth0
  rdma link add rxe_v1 type rxe netdev veth1
fi
# wait (max ~5s) until rxe0 has its IPv4-based GID (filled asynchronously)
for i in $(seq 1 50); do
  for g in /sys/class/infiniband/rxe0/ports/1/gids/[0-7]; do
    read -r v < $g; case $v in 0000:0000:0000:0000:0000:ffff:*) break 2;; esac
  done
  sleep 0.1
done
rdma link show
EOF

{
  echo 'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb LANG=C.UTF-8'
  echo 'export SOFTROCE_GUEST=1'
  for v in ${SOFTROCE_PASSENV:-}; do [ -n "${!v+x}" ] && printf 'export %s=%q\n' "$v" "${!v}"; done
  printf 'cd %q || exit 125\n' "$HOSTDIR"
  if [ $# -eq 1 ]; then printf '%s\n' "$1"; else printf 'exec'; printf ' %q' "$@"; printf '\n'; fi
} > "$RUN/cmd.sh"

# The command's stdout/stderr: guest virtio-serial ports -> qemu -> FIFOs -> cat
# -> our own fds 1/2 (never reopen our fds by path: breaks offsets and sockets).
mkfifo "$RUN/out1" "$RUN/out2"
cat "$RUN/out1" & CAT1=$!
cat "$RUN/out2" >&2 & CAT2=$!

QEMU_NET=(-nic none)
[ "$NET" = eth0 ] && QEMU_NET=(-netdev "$NETDEV" -device "virtio-net-pci,netdev=n0,mac=$MAC,speed=10000,duplex=full")
CPU=max; [ "$ACCEL" = kvm ] && CPU=host
KERNEL=$CACHE/guest/vmlinuz; [ -f "$CACHE/guest/vmlinux" ] && [ "${SOFTROCE_BZIMAGE:-0}" != 1 ] && KERNEL=$CACHE/guest/vmlinux
KAPPEND="console=ttyS0 panic=-1 rdinit=/init quiet loglevel=4 mitigations=off tsc=reliable random.trust_cpu=on ${SOFTROCE_KAPPEND:-}"

log "booting ($ACCEL, ${NCPU} vCPU, $MEM)"
T0=$(date +%s.%N)
timeout -k 10 "${SOFTROCE_TIMEOUT:-3600}" \
qemu-system-x86_64 -nodefaults -no-user-config -display none -no-reboot \
  -machine q35,accel="$ACCEL" -cpu "$CPU" -smp "$NCPU" -m "$MEM" \
  -kernel "$KERNEL" -initrd "$CACHE/guest/initramfs.cpio.gz" -append "$KAPPEND" \
  -serial "file:$RUN/console.log" \
  -device virtio-serial-pci,id=vser \
  -chardev file,id=o1,path="$RUN/out1" -device virtserialport,bus=vser.0,chardev=o1,name=softroce.out \
  -chardev file,id=o2,path="$RUN/out2" -device virtserialport,bus=vser.0,chardev=o2,name=softroce.err \
  -fsdev local,id=fs0,path=/,security_model=none,readonly=on,multidevs=remap -device virtio-9p-pci,fsdev=fs0,mount_tag=hostroot \
  -fsdev local,id=fs1,path="$HOSTDIR",security_model=none,multidevs=remap -device virtio-9p-pci,fsdev=fs1,mount_tag=hostdir \
  -fsdev local,id=fs2,path="$RUN",security_model=none -device virtio-9p-pci,fsdev=fs2,mount_tag=ctl \
  "${QEMU_NET[@]}" -device virtio-rng-pci ${SOFTROCE_MONITOR:+-monitor unix:$SOFTROCE_MONITOR,server=on,wait=off} \
  </dev/null 2>"$RUN/qemu.err" &
QPID=$!
set +e; wait $QPID; QRC=$?; set -e; QPID=
T1=$(date +%s.%N)
# qemu is gone; if it never opened a FIFO (early failure), unblock that cat
for f in out1 out2; do ( exec 3<>"$RUN/$f" ) 2>/dev/null || true; done
wait $CAT1 $CAT2 2>/dev/null || true; CAT1= CAT2=
if [ "${SOFTROCE_VERBOSE:-0}" = 1 ]; then
  echo "----- guest console -----" >&2; cat "$RUN/console.log" >&2
  echo "----- guest setup log -----" >&2; cat "$RUN/setup.log" >&2 2>/dev/null || true
fi
if [ -s "$RUN/rc" ]; then
  RC=$(cat "$RUN/rc")
  log "guest command exited $RC (vm wall time $(awk "BEGIN{printf \"%.1f\", $T1 - $T0}")s)"
  exit "$RC"
fi
if [ $QRC -eq 124 ] || [ $QRC -eq 137 ]; then echo "softroce-vm: TIMEOUT after ${SOFTROCE_TIMEOUT:-3600}s" >&2; RC=124; else RC=125; fi
echo "softroce-vm: guest did not report an exit status (qemu rc=$QRC)" >&2
echo "----- qemu stderr -----" >&2; cat "$RUN/qemu.err" >&2 || true
echo "----- guest console (tail) -----" >&2; tail -n 60 "$RUN/console.log" >&2 || true
[ -f "$RUN/setup.log" ] && { echo "----- guest setup log -----" >&2; cat "$RUN/setup.log" >&2; }
exit $RC
