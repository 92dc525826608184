#!/usr/bin/env bash
# Re-record the fio client/server outputs used as test fixtures (fio 3.33, ext4 on virtio, 2 vCPU).
# Servers run on this machine only: unix sockets in a private folder and loopback TCP ports. All servers
# share one data folder (the shared-file-system case), so every host's job has a name of its own
# (`<name>.h<index>`, files `<name>.h<index>.<job>.0` with unique_filename=0), as gdsbench writes them.
#
# Per fixture NAME: NAME.txt = fio's stdout (banners, then the json+ document), NAME.stderr, NAME.rc = the
# exit status, NAME.hosts = the --client arguments in order (a host-list file), NAME.h<i>.fio = the job
# file sent to host i. The command is always (FORMAT json+,normal for the `-normal` fixture)
#   $FIO --output-format=json+ --client=<host 0> NAME.h0.fio --client=<host 1> NAME.h1.fio ...
# run with SIGPIPE ignored, as gdsbench runs it: with SIGPIPE at its default, a client writing to a server
# that closed the connection (other fio version, server killed) dies of it, printing nothing at all.
#
# OTHER_FIO=/path/to/fio of another version (here fio-3.41 built from the axboe/fio tag with
# ./configure --disable-native && make) also records the version mismatch and the >= 3.39 JSON shape.
# PORT=18765 is the first of the loopback ports used (18765..18768 must be free).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
FIO=${FIO:-fio}
OTHER_FIO=${OTHER_FIO:-}
PORT=${PORT:-18765}
work=$(mktemp -d /tmp/gdsbench-fio-client.XXXXXX)
mkdir "$work/data"
servers=()

serve() {  # serve FIO SPEC: start `FIO --server=SPEC` in its own session; wait until it listens
  setsid "$1" --server="$2" >"$work/server-${#servers[@]}.log" 2>&1 &
  servers+=($!)
  case $2 in
    sock:*) until [ -S "${2#sock:}" ]; do sleep 0.1; done ;;
    *) until ss -ltn | grep -q ":${2##*,} "; do sleep 0.1; done ;;
  esac
}

running() { ps -o stat= -p "$1" 2>/dev/null | grep -qv Z; }

stop_all() {  # SIGINT (clean exit), repeated: fio 3.33 misses one that lands outside poll(); then SIGKILL
  for pid in "${servers[@]}"; do
    for _ in 1 2 3 4 5; do running "$pid" || break; kill -INT "$pid"; sleep 0.3; done
    kill -KILL -- "-$pid" 2>/dev/null || true  # and any job a killed client left running
    wait "$pid" 2>/dev/null || true
  done
  servers=()
  rm -f "$work"/s?.sock  # sockets of servers that did not exit cleanly
}
trap 'stop_all; rm -f "$work"/data/fixture.* "$work"/*.log; rmdir "$work/data" "$work"' EXIT

jobfile() {  # jobfile NAME RW NUMJOBS: one job section (BS, ENGINE, EXTRA, GLOBAL may change it) on stdout
  [ -z "${GLOBAL:-}" ] || printf '[global]\n%s\n' "$GLOBAL"
  printf '[%s]\n' "$1"
  printf '%s\n' "directory=$work/data" "size=16777216" "bs=${BS:-1048576}" "rw=$2" "numjobs=$3" \
    "iodepth=4" "direct=1" "iomem=malloc" "ioengine=${ENGINE:-libaio}"
  [ -z "${EXTRA:-}" ] || printf '%s\n' "$EXTRA"
  echo "unique_filename=0"
}

rec() {  # rec NAME RW NUMJOBS HOST...: one client-mode run (CLIENT_FIO, BAD_HOST/BAD may change it)
  local name=$1 rw=$2 numjobs=$3 i=0 args=()
  shift 3
  : >"$here/$name.hosts"
  for host in "$@"; do
    { jobfile "fixture.h$i" "$rw" "$numjobs"; [ "${BAD_HOST:-}" != "$i" ] || echo "$BAD"; } >"$here/$name.h$i.fio"
    echo "$host" >>"$here/$name.hosts"
    args+=("--client=$host" "$here/$name.h$i.fio")
    i=$((i + 1))
  done
  local rc=0
  (trap '' PIPE; exec "${CLIENT_FIO:-$FIO}" --output-format="${FORMAT:-json+}" "${args[@]}") >"$here/$name.txt" 2>"$here/$name.stderr" || rc=$?
  echo "$rc" >"$here/$name.rc"
  sed -i "s#$here/##g" "$here/$name.txt" "$here/$name.stderr"  # job file paths relative to this folder
}

kill_after() {  # kill_after SECONDS PID: SIGKILL a server's whole session (its job processes too)
  (sleep "$1"; kill -KILL -- "-$2") &
}

s=$work
t=127.0.0.1
serve "$FIO" "sock:$s/s0.sock"; serve "$FIO" "sock:$s/s1.sock"; serve "$FIO" "sock:$s/s2.sock"
rec sock2-write-1job write 1 "sock:$s/s0.sock" "sock:$s/s1.sock"
rec sock2-read-2jobs read 2 "sock:$s/s0.sock" "sock:$s/s1.sock"
rec sock3-write-2jobs write 2 "sock:$s/s0.sock" "sock:$s/s1.sock" "sock:$s/s2.sock"
rec sock3-read-1job read 1 "sock:$s/s0.sock" "sock:$s/s1.sock" "sock:$s/s2.sock"
# As gdsbench runs a case: normal output too, each host's job results printed as they arrive, JSON last.
FORMAT=json+,normal rec sock2-write-2jobs-normal write 2 "sock:$s/s0.sock" "sock:$s/s1.sock"
# A unix socket nobody listens on: "fio: connect; No such file or directory", exit 0.
rec dead-sock write 1 "sock:$s/s0.sock" "sock:$s/gone.sock"
stop_all

serve "$FIO" "ip:$t,$PORT"; serve "$FIO" "ip:$t,$((PORT + 1))"; serve "$FIO" "ip:$t,$((PORT + 2))"
rec tcp2-write-2jobs write 2 "ip:$t,$PORT" "ip:$t,$((PORT + 1))"
rec tcp2-read-1job read 1 "ip:$t,$PORT" "ip:$t,$((PORT + 1))"
rec tcp3-read-2jobs read 2 "ip:$t,$PORT" "ip:$t,$((PORT + 1))" "ip:$t,$((PORT + 2))"
rec tcp3-write-1job write 1 "ip:$t,$PORT" "ip:$t,$((PORT + 1))" "ip:$t,$((PORT + 2))"
# Time-bound: every host runs 1 s, so the hosts' bandwidths add up to fio's "All clients" bandwidth.
BS=4096 ENGINE=psync EXTRA=$'time_based\nruntime=1' rec tcp2-randread-timebased randread 2 "ip:$t,$PORT" "ip:$t,$((PORT + 1))"
# A refused port between two live servers: its host has no entries; "All clients" misses a live host's job.
rec dead-tcp write 2 "ip:$t,$PORT" "ip:$t,$((PORT + 3))" "ip:$t,$((PORT + 2))"
# Nobody listening at all: no JSON, exit 1.
rec all-dead write 1 "ip:$t,$((PORT + 3))" "sock:$s/gone.sock"
# One host's job fails (O_DIRECT with a 1000-byte block: EINVAL): its entries carry error 22, exit 1.
BAD_HOST=1 BAD=bs=1000 rec job-error write 1 "ip:$t,$PORT" "ip:$t,$((PORT + 1))"
stop_all

# A server killed (SIGKILL to its session) 1 s into a 3 s run: "client: host=... disconnected", exit 1.
serve "$FIO" "ip:$t,$PORT"; serve "$FIO" "ip:$t,$((PORT + 1))"
kill_after 1 "${servers[1]}"
BS=65536 ENGINE=psync EXTRA=$'time_based\nruntime=3' rec killed-tcp read 1 "ip:$t,$PORT" "ip:$t,$((PORT + 1))"
stop_all
serve "$FIO" "sock:$s/s0.sock"; serve "$FIO" "sock:$s/s1.sock"
kill_after 1 "${servers[1]}"
BS=65536 ENGINE=psync EXTRA=$'time_based\nruntime=3' rec killed-sock read 1 "sock:$s/s0.sock" "sock:$s/s1.sock"
stop_all

if [ -n "$OTHER_FIO" ]; then
  # Host 1 runs another fio version: "fio: client/server version mismatch (113 != 97)", exit 0 or 1.
  serve "$FIO" "sock:$s/s0.sock"; serve "$OTHER_FIO" "sock:$s/s1.sock"
  rec version-mismatch write 1 "sock:$s/s0.sock" "sock:$s/s1.sock"
  stop_all
  # fio >= 3.39 as client and servers: `global options` is a list with one object per host.
  serve "$OTHER_FIO" "sock:$s/s0.sock"; serve "$OTHER_FIO" "sock:$s/s1.sock"
  ENGINE=psync GLOBAL=thread CLIENT_FIO=$OTHER_FIO rec fio341-sock2-write-global write 1 \
    "sock:$s/s0.sock" "sock:$s/s1.sock"
  stop_all
fi
