#!/usr/bin/env bash
# Re-record the real fio outputs used as test fixtures (fio 3.33, ext4 on virtio, 2 vCPU).
# Each file holds fio's stdout for --output-format=json+,normal: the JSON document first, then the
# normal text with its "Run status" lines, from the same run, so tests can check both.
set -euo pipefail
dir=${1:-/var/tmp/gdsbench-fixtures}
mkdir -p "$dir"
here=$(cd "$(dirname "$0")" && pwd)
rec() { out=$1; shift; fio --directory="$dir" --output-format=json+,normal "$@" >"$here/$out" 2>"$here/${out%.txt}.stderr"; }
rec write-1m-2jobs-libaio.txt --name=seqw --size=64M --bs=1M --rw=write --direct=1 --ioengine=libaio --iodepth=4 --numjobs=2
rec read-1m-2jobs-libaio.txt --name=seqw --size=64M --bs=1M --rw=read --direct=1 --ioengine=libaio --iodepth=4 --numjobs=2
rec randread-4k-psync-timebased.txt --name=rr --size=64M --bs=4k --rw=randread --direct=1 --ioengine=psync --time_based --runtime=2
rec randwrite-128k-iouring-4jobs.txt --name=rw --size=32M --bs=128k --rw=randwrite --direct=1 --ioengine=io_uring --iodepth=8 --numjobs=4
rec read-16m-buffered.txt --name=br --size=256M --bs=16M --rw=read --direct=0 --ioengine=psync
rec write-16m-1job-large.txt --name=big --size=1G --bs=16M --rw=write --direct=1 --ioengine=libaio --iodepth=8
# A failing job: O_DIRECT with a block size that is not a multiple of the logical sector (EINVAL).
fio --name=fail --directory="$dir" --size=4M --bs=1000 --rw=write --direct=1 --output-format=json+ \
  >"$here/error-direct-unaligned.txt" 2>"$here/error-direct-unaligned.stderr" || true
rm -f "$dir"/seqw.* "$dir"/rr.* "$dir"/rw.* "$dir"/br.* "$dir"/big.* "$dir"/fail.*
mkdir -p "$here/series" "$here/live"
# Periodic status (what gdsbench parses for live figures): --status-interval=1 prints a whole JSON document
# every second, the final one last. And fio's bandwidth/latency logs of the same kind of run (series/).
fio --name=live --directory="$dir" --size=64M --bs=1M --rw=write --direct=1 --ioengine=libaio --iodepth=4 \
  --numjobs=2 --time_based --runtime=3 --output-format=json+ --status-interval=1 \
  >"$here/live/status-interval.txt" 2>"$here/live/status-interval.stderr"
fio --name=logs --directory="$dir" --size=64M --bs=1M --rw=read --direct=1 --ioengine=libaio --iodepth=4 \
  --numjobs=2 --time_based --runtime=2 --write_bw_log="$here/series/read-2jobs" \
  --write_lat_log="$here/series/read-2jobs" --log_avg_msec=200 --output-format=json+ \
  >"$here/series/read-2jobs.txt" 2>"$here/series/read-2jobs.stderr"
rm -f "$dir"/live.* "$dir"/logs.*
