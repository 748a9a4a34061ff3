#!/bin/bash
# Run a command inside a real Linux kernel (Debian's 6.12, or 7.3) that has zoned block
# devices.
#
# The repository's copy of shared/tools/kernel-vm.sh, so that CI on a fresh machine
# needs nothing beside the repository. Differences: each run builds its guest root,
# initrd and ZNS backing file in a directory of its own, and the first run's kernel
# download is taken under a lock, so that several runs (test binaries, engineers)
# can share the kernel cache at once; and a second guest kernel, Linux 7.3 (--kernel).
#
# The host kernel has no zoned block support; this boots a Debian kernel under QEMU
# (software emulation, ~2 s to boot 6.12, ~15 s for 7.3), creates zoned null_blk
# devices, mounts the host's root read-only over 9p plus a writable share, and runs
# COMMAND in a chroot of the host. The guest's kernel release is printed at boot
# ("kernel-vm.sh: guest kernel Linux RELEASE").
#
# Usage: kernel-vm.sh [options] -- COMMAND...
#   --kernel 6.12|7.3  the guest kernel (default: $ZBLK_VM_KERNEL, else 6.12). 6.12 is
#                      bookworm's linux-image-6.12.*-amd64; 7.3 is trixie-backports'
#                      linux-binary-7.3.*-amd64 and linux-modules-7.3.*-amd64 (the
#                      kernel of zoned_qd1_writes, write zeroes with unmap and the
#                      in-order split fix), fetched through a private apt configuration
#                      under the cache (the machine's own apt sources are not touched)
#   --nullb "PARAMS"   null_blk module parameters for /dev/nullb0
#                      (default: "zoned=1 zone_size=64 zone_nr_conv=0 gb=1 memory_backed=1 zone_max_open=4")
#   --zns              also attach QEMU's emulated NVMe ZNS drive as /dev/nvme0n1
#                      (16 MiB zones, 12 MiB capacity, 4 KiB blocks, max_open 4, max_active 8)
#   --ublk             also load the ublk driver (/dev/ublk-control)
#   --share DIR        host directory mounted read-write at the same path in the guest
#                      (default: the current directory)
#   --mem SIZE         guest memory (default 2G)
#   --modules "NAMES"  also load these modules of the guest kernel, with their dependencies
#                      (e.g. "f2fs btrfs" for zoned file systems)
# COMMAND runs with the host's root file system (read-only) as /, the share writable,
# and /dev of the guest. Its exit status is printed as "@@ exit N" and returned.
# Needs root (apt-get). Caches the kernels under ${ZBLK_KVM_DIR:-/var/tmp/zblk-kvm}
# (k/ for 6.12, k-7.3/ for 7.3).
# A boot is stopped after 15 minutes (ZBLK_VM_TIMEOUT=SECONDS sets another limit), or
# after 3 minutes if the guest has not started its init by then
# (ZBLK_VM_BOOT_TIMEOUT=SECONDS).
# The guest has two vCPUs (ZBLK_VM_SMP=N sets another number: scripts/test-jobs runs
# two guests of one vCPU at once, which on two host cores run each as fast as alone,
# where two guests of two vCPUs slow each other down 1.5 to 3 times).
set -euo pipefail
NULLB="zoned=1 zone_size=64 zone_nr_conv=0 gb=1 memory_backed=1 zone_max_open=4"
ZNS=0; UBLK=0; SHARE=$PWD; MEM=2G; EXTRA=""; KERNEL=${ZBLK_VM_KERNEL:-6.12}
while [ $# -gt 0 ]; do
  case "$1" in
    --nullb) NULLB=$2; shift 2;; --zns) ZNS=1; shift;; --ublk) UBLK=1; shift;;
    --share) SHARE=$(realpath "$2"); shift 2;; --mem) MEM=$2; shift 2;;
    --modules) EXTRA="$EXTRA $2"; shift 2;; --kernel) KERNEL=$2; shift 2;;
    --) shift; break;; *) echo "kernel-vm.sh: unknown option $1" >&2; exit 2;;
  esac
done
[ $# -gt 0 ] || { echo "kernel-vm.sh: no command given (usage: kernel-vm.sh [options] -- COMMAND)" >&2; exit 2; }
W=${ZBLK_KVM_DIR:-/var/tmp/zblk-kvm}; mkdir -p "$W"
case "$KERNEL" in
  6.12) KDIR=$W/k;; 7.3) KDIR=$W/k-7.3;;
  *) echo "kernel-vm.sh: --kernel takes 6.12 or 7.3, not '$KERNEL'" >&2; exit 2;;
esac
# First use: one run installs and downloads, the others wait for it.
exec 9>"$W/lock"; flock 9
need() { command -v "$1" >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" >/dev/null; }; }
need qemu-system-x86_64 qemu-system-x86; need cpio cpio; need xz xz-utils; need depmod kmod
[ -x /bin/busybox ] || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null; }
# The kernel's release: the one directory under lib/modules (6.12's linux-image) or
# usr/lib/modules (7.3's linux-binary and linux-modules) of the cache.
krel() { (ls -d "$KDIR"/lib/modules/*/ "$KDIR"/usr/lib/modules/*/ 2>/dev/null || true) | xargs -r -n1 basename | sort -V | tail -1; }
KREL=$(krel)
if [ -z "$KREL" ] && [ "$KERNEL" = 6.12 ]; then
  # The newest Debian 6.12 generic kernel (the generic flavour has the 9p modules).
  pick() { apt-cache search --names-only '^linux-image-6\.12\.[0-9]+\+deb[0-9]+-amd64$' | cut -d' ' -f1 | sort -V | tail -1; }
  PKG=$(pick); [ -n "$PKG" ] || { apt-get update -qq; PKG=$(pick); }
  [ -n "$PKG" ] || { echo "kernel-vm.sh: no linux-image-6.12.*-amd64 package found" >&2; exit 2; }
  (cd "$W" && apt-get -qq -o APT::Sandbox::User=root download "$PKG")
  mkdir -p "$KDIR"; dpkg-deb -x "$W/${PKG}"_*.deb "$KDIR"
  KREL=$(krel)
elif [ -z "$KREL" ]; then
  # trixie-backports through an apt configuration of our own: its sources list names the
  # machine's own Debian mirror, its package lists and downloads stay under the cache.
  A=$W/apt; mkdir -p "$A/lists/partial" "$A/cache/archives/partial"
  MIRROR=$( (cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null || true) \
    | grep -oE 'https?://[^ ]+/debian/?( |$)' | grep -v security | head -1 | tr -d ' ')
  MIRROR=${MIRROR:-http://deb.debian.org/debian}
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] ${MIRROR%/} trixie-backports main" > "$A/sources.list"
  APT=(-o "Dir::Etc::SourceList=$A/sources.list" -o Dir::Etc::SourceParts=/nonexistent -o "Dir::State::Lists=$A/lists"
       -o "Dir::Cache=$A/cache" -o APT::Sandbox::User=root)
  apt-get "${APT[@]}" -qq update
  PKG=$(apt-cache "${APT[@]}" search --names-only '^linux-binary-7\.3\.[0-9]+\+deb[0-9]+-amd64$' | cut -d' ' -f1 | sort -V | tail -1)
  [ -n "$PKG" ] || { echo "kernel-vm.sh: no linux-binary-7.3.*-amd64 package in trixie-backports ($MIRROR)" >&2; exit 2; }
  REL=${PKG#linux-binary-}
  (cd "$A" && rm -f ./*.deb && apt-get "${APT[@]}" -qq download "$PKG" "linux-modules-$REL")
  rm -rf "$KDIR.new"; mkdir -p "$KDIR.new"; for d in "$A"/*.deb; do dpkg-deb -x "$d" "$KDIR.new"; done
  rm -f "$A"/*.deb; rm -rf "$KDIR"; mv "$KDIR.new" "$KDIR"
  KREL=$(krel)
fi
MROOT=$KDIR/lib/modules/$KREL; DEPBASE=$KDIR
[ -d "$MROOT" ] || { MROOT=$KDIR/usr/lib/modules/$KREL; DEPBASE=$KDIR/usr; }
KIMG=$KDIR/boot/vmlinuz-$KREL; [ -f "$KIMG" ] || KIMG=$MROOT/vmlinuz
[ -f "$KIMG" ] || { echo "kernel-vm.sh: no kernel image in $KDIR" >&2; exit 2; }
MODDIR=$MROOT/kernel
DEP=$MROOT/modules.dep
# The packages ship no module index: made once, for the dependencies of what is loaded.
[ -s "$DEP" ] || depmod -b "$DEPBASE" "$KREL" 2>/dev/null || { echo "kernel-vm.sh: depmod failed for $KREL" >&2; exit 2; }
exec 9>&-
# This run's own guest root, initrd and ZNS backing file.
RUN=$(mktemp -d "$W/run.XXXXXX"); trap 'rm -rf "$RUN"' EXIT
R=$RUN/root; mkdir -p "$R"/{bin,proc,sys,dev,mnt/host,lib/modules}
cp /bin/busybox "$R/bin/"; for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"; done
MODS=""
MA=$MROOT/modules.alias; SD=$MROOT/modules.softdep
add_mod() {   # NAME or alias [soft]: its soft and hard dependencies first, then itself
  local name=$1 soft=${2:-} line p
  line=$(grep -E "(^|/)${name//[-_]/[-_]}\.ko(\.xz)?:" "$DEP" | head -1 || true)
  if [ -z "$line" ]; then   # an alias (e.g. crc32c -> crc32c_generic)
    local real r; real=$(awk -v a="$name" '$1=="alias" && ($2==a || $2=="crypto-" a) && $3!=a {print $3}' "$MA" 2>/dev/null | sort -u || true)
    [ -n "$real" ] && { for r in $real; do add_mod "$r" soft; done; return; }
    [ -n "$soft" ] && return   # a soft dependency that is built in
    echo "kernel-vm.sh: the guest kernel has no module $name" >&2; exit 2
  fi
  case " $MODS " in *" $(echo "${line%%:*}" | sed 's#^kernel/##; s#\.ko\.xz$##') "*) return;; esac
  for p in $(awk -v m="${name//-/_}" '$1=="softdep" && $2==m {for(i=4;i<=NF;i++) if($i!="post:") print $i; else break}' "$SD" 2>/dev/null); do add_mod "$p" soft; done
  for p in $(echo "${line#*:}" | tr ' ' '\n' | tac); do add_mod "$(basename "${p%.ko.xz}")"; done
  p=${line%%:*}; p=${p#kernel/}; p=${p%.ko.xz}; MODS="$MODS $p"
}
# The guest's own modules, with their dependencies from the index ("soft": a module the
# kernel has built in is not an error); nvme-core of 7.3 needs nvme-keyring first.
for name in configfs null_blk 9pnet_virtio 9p; do add_mod "$name" soft; done
[ $ZNS = 1 ] && for name in nvme-keyring nvme-auth nvme; do add_mod "$name" soft; done
[ $UBLK = 1 ] && add_mod ublk_drv soft
for name in $EXTRA; do add_mod "$name"; done
LOAD=""; for m in $MODS; do
  [ -f "$MODDIR/$m.ko.xz" ] || continue
  xz -dc "$MODDIR/$m.ko.xz" > "$R/lib/modules/$(basename $m).ko"; LOAD="$LOAD $(basename $m)"; done
for a in "$@"; do printf '%s' "$a" | base64 -w0; echo; done > "$R/cmd"   # one argument a line, base64 (newlines survive)
cat > "$R/init" <<INIT
#!/bin/sh
export PATH=/bin
echo; echo "@@ guest up"; echo "kernel-vm.sh: guest kernel Linux \$(uname -r)"
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
ln -sf /proc/self/fd /dev/fd; ln -sf fd/0 /dev/stdin; ln -sf fd/1 /dev/stdout; ln -sf fd/2 /dev/stderr
for m in $LOAD; do
  case \$m in null_blk) insmod /lib/modules/\$m.ko $NULLB;; *) insmod /lib/modules/\$m.ko;; esac
done
mount -t configfs none /sys/kernel/config 2>/dev/null
# The host's root read-only with the guest's page cache on (cache=loose): without it
# every exec and page fault of a host program (sh, fio, python3) is a 9p round trip,
# and a guest script spends most of its time loading programs. The guest may then see
# a host file as it was when first read; nothing a guest reads from the host root
# changes during a run (what the host and the guest both write is the share).
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288,cache=loose hostroot /mnt/host
for d in dev proc sys; do mount --bind /\$d /mnt/host/\$d; done
mount -t configfs none /mnt/host/sys/kernel/config 2>/dev/null
mount -t tmpfs tmpfs /mnt/host/tmp
mkdir -p /mnt/host$SHARE 2>/dev/null
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 share /mnt/host$SHARE
set --; while IFS= read -r a; do set -- "\$@" "\$(echo "\$a" | base64 -d)"; done < /cmd
chroot /mnt/host /usr/bin/env HOME=/tmp PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin sh -c 'cd "\$0" && exec "\$@"' "$SHARE" "\$@"
echo "@@ exit \$?"
poweroff -f
INIT
chmod +x "$R/init"; (cd "$R" && find . | cpio -o -H newc --quiet) > "$RUN/initrd.cpio"
Q=(-virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
   -virtfs "local,path=$SHARE,mount_tag=share,security_model=none")
if [ $ZNS = 1 ]; then
  truncate -s 256M "$RUN/zns.img"
  Q+=(-drive "file=$RUN/zns.img,if=none,id=zns0,format=raw" -device nvme,serial=zns0,id=nvme0
      -device "nvme-ns,drive=zns0,bus=nvme0,nsid=1,logical_block_size=4096,physical_block_size=4096,zoned=true,zoned.zone_size=16M,zoned.zone_capacity=12M,zoned.max_open=4,zoned.max_active=8")
fi
OUT=$RUN/console
# A guest that has not started its init within the boot limit is stopped: under
# emulation on a loaded host a kernel now and then hangs while booting (its vCPUs
# spinning, no output), and without this only the run's own limit (15 minutes) ends
# it. Its "@@ exit unknown" says it never ran the command; the VM tests boot again.
# (The console is written unbuffered, so the check sees the init's first line.)
BOOT_LIMIT=${ZBLK_VM_BOOT_TIMEOUT:-180}
( for _ in $(seq "$BOOT_LIMIT"); do sleep 1; grep -q "^@@ guest up" "$OUT" 2>/dev/null && exit 0
    [ -s "$RUN/qemu.pid" ] && ! kill -0 "$(cat "$RUN/qemu.pid")" 2>/dev/null && exit 0; done
  echo "kernel-vm.sh: the guest did not start its init within ${BOOT_LIMIT} s: stopped" >&2
  kill "$(cat "$RUN/qemu.pid" 2>/dev/null)" 2>/dev/null ) &
WATCH=$!
timeout "${ZBLK_VM_TIMEOUT:-900}" qemu-system-x86_64 -accel tcg,thread=multi -smp "${ZBLK_VM_SMP:-2}" -cpu max -m "$MEM" -nographic -no-reboot \
  -pidfile "$RUN/qemu.pid" -nic none "${Q[@]}" -kernel "$KIMG" -initrd "$RUN/initrd.cpio" \
  -append "console=ttyS0 panic=-1 loglevel=3 rdinit=/init" 2>&1 | stdbuf -o0 tr -d '\r' | tee "$OUT" | grep -v -E "^\s*$|SeaBIOS|iPXE|Booting from|Probing EDD|^@@ exit|@@ guest up|reboot: Power down" || true
kill "$WATCH" 2>/dev/null || true
rc=$(sed -n 's/^@@ exit \([0-9]*\).*/\1/p' "$OUT" | tail -1)
echo "@@ exit ${rc:-unknown}"; exit "${rc:-1}"
