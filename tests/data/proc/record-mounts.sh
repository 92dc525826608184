#!/usr/bin/env bash
# Re-record mounts-escapes.txt: /proc/self/mounts with mount points (and a device name) that hold a
# space, a tab, a newline and a backslash, which the kernel writes as \040, \011, \012 and \134; a mount
# nested in another, a sibling whose name extends another's ("with spacex"), and one mounted over another.
# Run as root (mounts small tmpfs file systems under /tmp/gdsbench-mounts, then removes them).
set -euo pipefail
d=/tmp/gdsbench-mounts
here=$(cd "$(dirname "$0")" && pwd)
odd=("$d/with space" "$d/tab	here" "$d/back\\slash" "$d/new
line")
mkdir -p "$d"
mount -t tmpfs -o size=1m gdsbench-outer "$d"
mkdir -p "${odd[@]}" "$d/with spacex"
for x in "${odd[@]}"; do mount -t tmpfs -o size=1m "gdsbench probe" "$x"; done
mkdir -p "$d/with space/inner"
mount -t tmpfs -o size=1m gdsbench-inner "$d/with space/inner"
mount -t tmpfs -o size=1m gdsbench-over "$d/back\\slash"
cat /proc/self/mounts >"$here/mounts-escapes.txt"
umount "$d/back\\slash" "$d/with space/inner"
for x in "${odd[@]}"; do umount "$x"; done
umount "$d"
rmdir "$d"
