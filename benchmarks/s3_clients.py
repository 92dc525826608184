"""Compare Python S3 clients (boto3, the AWS CRT via awscrt or s3torchconnectorclient, obstore): PUT and GET.

Every request is timed on its own, the first request of each cell is reported apart, failures are counted and
named (every client is configured not to retry), read bytes are checked against a digest of what was written.
Clients are interleaved cell by cell (A B C, A B C) because the disk's bandwidth drifts. Credentials and the
endpoint come only from the environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import os
import shlex
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from importlib.metadata import version
from typing import Any, Protocol

import xxhash

MIB = 1 << 20
CLIENTS = ["boto3", "awscrt", "crt-s3torch", "obstore"]
PART = 16 * MIB
# fmt: off
FIELDS = ["client", "version", "op", "object_bytes", "concurrency", "round", "requests", "failures", "seconds",
          "bw_bytes", "first_request_ms", "p50_ms", "p99_ms", "client_cpu_s", "failure_kinds"]
# fmt: on


class Client(Protocol):
    """What the benchmark needs from an S3 client."""

    name: str
    version: str

    def put(self, key: str, data: bytes) -> None:
        """Write one object (multipart above PART where the client has its own)."""

    def get(self, key: str, size: int) -> bytes:
        """Read one whole object of `size` bytes."""

    def delete(self, key: str) -> None:
        """Delete one object."""


class Boto3Client:
    """boto3: put_object/get_object, s3transfer's multipart above PART; no retries."""

    name = "boto3"

    def __init__(self, bucket: str, pool: int) -> None:
        """Make the client from AWS_* in the environment, with one attempt per request."""
        import boto3
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        self.version = version("boto3")
        cfg = Config(retries={"total_max_attempts": 1}, max_pool_connections=pool, region_name="us-east-1")
        self.s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], config=cfg)
        self.transfer = TransferConfig(
            multipart_threshold=PART + 1, multipart_chunksize=PART, max_concurrency=4, num_download_attempts=1
        )
        self.bucket = bucket

    def put(self, key: str, data: bytes) -> None:
        """PUT in one request up to PART, else s3transfer's multipart upload."""
        if len(data) <= PART:
            self.s3.put_object(Bucket=self.bucket, Key=key, Body=data)
        else:
            self.s3.upload_fileobj(io.BytesIO(data), self.bucket, key, Config=self.transfer)

    def get(self, key: str, size: int) -> bytes:
        """GET in one request up to PART, else s3transfer's ranged parallel download (after a HEAD)."""
        if size <= PART:
            return self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        buf = io.BytesIO()
        self.s3.download_fileobj(self.bucket, key, buf, Config=self.transfer)
        return buf.getvalue()

    def delete(self, key: str) -> None:
        """Delete one object."""
        self.s3.delete_object(Bucket=self.bucket, Key=key)


class CrtClient:
    """The AWS CRT as s3torchconnector uses it (MountpointS3Client); max_attempts=1, 16 MiB parts."""

    name = "crt-s3torch"

    def __init__(self, bucket: str, pool: int) -> None:
        """Make the client for AWS_ENDPOINT_URL, path-style; credentials from the CRT's default chain (env)."""
        from s3torchconnectorclient._mountpoint_s3_client import MountpointS3Client

        self.version = version("s3torchconnectorclient")
        self.s3 = MountpointS3Client(
            "us-east-1", endpoint=os.environ["AWS_ENDPOINT_URL"], force_path_style=True, part_size=PART, max_attempts=1
        )
        self.bucket = bucket

    def put(self, key: str, data: bytes) -> None:
        """PUT through the CRT's streaming upload (a multipart upload, PART-sized parts)."""
        stream = self.s3.put_object(self.bucket, key)
        stream.write(data)
        stream.close()

    def get(self, key: str, size: int) -> bytes:
        """GET through the CRT's meta request (ranged parts in parallel above PART)."""
        return b"".join(self.s3.get_object(self.bucket, key))

    def delete(self, key: str) -> None:
        """Delete one object."""
        self.s3.delete_object(self.bucket, key)


class AwsCrtClient:
    """awscrt's S3Client directly: its meta requests (multipart above PART, ranged GETs), retries off."""

    name = "awscrt"

    def __init__(self, bucket: str, pool: int) -> None:
        """Make the client for AWS_ENDPOINT_URL (plain HTTP), credentials from the CRT's environment provider."""
        from urllib.parse import urlparse

        from awscrt import auth, s3
        from awscrt import io as crt_io

        self.version, self.s3mod, self.bucket = version("awscrt"), s3, bucket
        self.host = urlparse(os.environ["AWS_ENDPOINT_URL"]).netloc
        elg = crt_io.EventLoopGroup(2)
        creds = auth.AwsCredentialsProvider.new_environment()
        self.s3 = s3.S3Client(
            bootstrap=crt_io.ClientBootstrap(elg, crt_io.DefaultHostResolver(elg)),
            region="us-east-1",
            tls_mode=s3.S3RequestTlsMode.DISABLED,
            signing_config=s3.create_default_s3_signing_config(region="us-east-1", credential_provider=creds),
            part_size=PART,
            multipart_upload_threshold=PART + 1,
            retry_config=s3.S3RetryConfig(retry_mode=s3.S3RetryMode.NONE),
        )

    def _request(self, method: str, key: str, kind: object, body: bytes | None = None) -> bytes:
        """Send one meta request and wait for it; the body read is returned."""
        from awscrt.http import HttpHeaders, HttpRequest

        headers = HttpHeaders([("Host", self.host)])
        if body is not None:
            headers.add("Content-Length", str(len(body)))
        chunks: list[bytes] = []
        req = HttpRequest(method, f"/{self.bucket}/{key}", headers, io.BytesIO(body) if body is not None else None)
        meta = self.s3.make_request(type=kind, request=req, on_body=lambda chunk, **_: chunks.append(bytes(chunk)))
        meta.finished_future.result()
        return b"".join(chunks)

    def put(self, key: str, data: bytes) -> None:
        """PUT in one request up to PART, else the CRT's multipart upload with PART parts."""
        self._request("PUT", key, self.s3mod.S3RequestType.PUT_OBJECT, data)

    def get(self, key: str, size: int) -> bytes:
        """GET through the CRT (PART-sized ranged GETs in parallel)."""
        return self._request("GET", key, self.s3mod.S3RequestType.GET_OBJECT)

    def delete(self, key: str) -> None:
        """Delete one object."""
        self._request("DELETE", key, self.s3mod.S3RequestType.DEFAULT)


class ObstoreClient:
    """obstore's S3Store (Rust object_store); max_retries=0, multipart above PART."""

    name = "obstore"

    def __init__(self, bucket: str, pool: int) -> None:
        """Make the store; credentials are read by obstore from AWS_* in the environment."""
        from datetime import timedelta

        import obstore
        from obstore.store import S3Store

        self.version = version("obstore")
        self.obs = obstore
        self.s3 = S3Store(
            bucket,
            endpoint=os.environ["AWS_ENDPOINT_URL"],
            region="us-east-1",
            client_options={"allow_http": True, "pool_max_idle_per_host": str(pool)},
            retry_config={"max_retries": 0, "retry_timeout": timedelta(seconds=0)},
        )

    def put(self, key: str, data: bytes) -> None:
        """PUT in one request up to PART, else obstore's multipart with PART chunks."""
        self.obs.put(self.s3, key, data, use_multipart=len(data) > PART, chunk_size=PART, max_concurrency=4)

    def get(self, key: str, size: int) -> bytes:
        """GET one object in one request."""
        return bytes(self.obs.get(self.s3, key).bytes())

    def delete(self, key: str) -> None:
        """Delete one object."""
        self.obs.delete(self.s3, key)


@dataclass
class Cell:
    """One (client, op, size, concurrency, round) measurement."""

    latencies: list[float] = field(default_factory=list)
    first_ms: float = float("nan")
    failures: Counter[str] = field(default_factory=Counter)
    done: list[str] = field(default_factory=list)
    seconds: float = 0.0
    cpu_s: float = 0.0


def run_cell(
    fn: Callable[[str], Any],
    keys: list[str],
    concurrency: int,
    deadline_s: float,
    check: Callable[[Any], None] | None = None,
) -> Cell:
    """Call fn(key) for each key from `concurrency` threads, timing each call only (check(result) after it)."""
    cell, lock, it = Cell(), threading.Lock(), iter(enumerate(keys))
    start = time.perf_counter()

    def worker() -> None:
        """Take keys until none are left or the deadline passed."""
        while True:
            with lock:
                nxt = next(it, None)
            if nxt is None or time.perf_counter() - start > deadline_s:
                return
            i, key = nxt
            t0 = time.perf_counter()
            try:
                result, err = fn(key), None
            except Exception as exc:  # every failure is counted and named, never retried
                err = f"{type(exc).__name__}: {str(exc)[:160]}"
            ms = (time.perf_counter() - t0) * 1e3
            if err is None and check is not None:
                try:
                    check(result)
                except ValueError as exc:
                    err = str(exc)
            with lock:
                if err:
                    cell.failures[err] += 1
                elif i == 0:
                    cell.first_ms = ms
                    cell.done.append(key)
                else:
                    cell.latencies.append(ms)
                    cell.done.append(key)

    cpu0 = time.process_time()
    with ThreadPoolExecutor(concurrency) as pool:
        for f in [pool.submit(worker) for _ in range(concurrency)]:
            f.result()
    cell.seconds, cell.cpu_s = time.perf_counter() - start, time.process_time() - cpu0
    return cell


def digest_check(size: int, digest: int) -> Callable[[Any], None]:
    """A check that raises when the bytes read differ from those written (length and xxh3-64)."""

    def check(data: bytes) -> None:
        """Compare one GET's bytes with what was written (outside the timed call)."""
        if len(data) != size or xxhash.xxh3_64_intdigest(data) != digest:
            raise ValueError(f"CorruptRead: {len(data)} bytes, digest mismatch")

    return check


def row(client: Client, op: str, size: int, conc: int, rnd: int, cell: Cell) -> dict[str, object]:
    """One CSV row from a cell."""
    lat, n, nan = sorted(cell.latencies), len(cell.done), float("nan")
    p50 = round(statistics.median(lat), 2) if lat else nan
    p99 = round(lat[min(len(lat) - 1, int(0.99 * len(lat)))], 2) if lat else nan
    bw = round(n * size / cell.seconds) if cell.seconds else 0
    kinds = "; ".join(f"{k} x{v}" for k, v in cell.failures.items())
    # fmt: off
    return dict(zip(FIELDS, [client.name, client.version, op, size, conc, rnd, n, sum(cell.failures.values()),
                             round(cell.seconds, 4), bw, round(cell.first_ms, 2), p50, p99, round(cell.cpu_s, 3), kinds]))
    # fmt: on


def make_clients(names: list[str], bucket: str, pool: int) -> list[Client]:
    """Build each named client; one that cannot be built is reported and skipped."""
    kinds: dict[str, Callable[[str, int], Client]] = {
        "boto3": Boto3Client,
        "awscrt": AwsCrtClient,
        "crt-s3torch": CrtClient,
        "obstore": ObstoreClient,
    }
    out: list[Client] = []
    for name in names:
        try:
            out.append(kinds[name](bucket, pool))
        except Exception as exc:  # report and move on
            print(f"client {name} unavailable: {type(exc).__name__}: {exc}", file=sys.stderr)
    return out


def sweep(args: argparse.Namespace, clients: list[Client], writer: csv.DictWriter[str]) -> None:
    """Rounds x sizes x concurrencies x clients (interleaved): PUT, checked GET, then delete (untimed)."""
    for rnd in range(1, args.rounds + 1):
        for size_mib in args.sizes:
            size = size_mib * MIB
            data = os.urandom(size)
            digest = xxhash.xxh3_64_intdigest(data)
            for conc in args.concurrency:
                count = max(conc, min(args.max_objects, args.cell_bytes // size))
                for client in clients:
                    keys = [f"{client.name}/r{rnd}/{size_mib}m/c{conc}/{i:05d}" for i in range(count)]
                    put = run_cell(partial(client.put, data=data), keys, conc, args.cell_seconds)
                    check = digest_check(size, digest)
                    get = run_cell(partial(client.get, size=size), put.done, conc, args.cell_seconds, check)
                    for op, cell in (("put", put), ("get", get)):
                        r = row(client, op, size, conc, rnd, cell)
                        writer.writerow(r)
                        print_row(r)
                    for key in keys:
                        with contextlib.suppress(Exception):  # a key whose PUT failed may not exist
                            client.delete(key)
                    if args.gc_cmd:  # radosgw frees deleted objects' data only at GC (2 h later by default)
                        subprocess.run(shlex.split(args.gc_cmd), check=False, capture_output=True)


def print_row(r: dict[str, object]) -> None:
    """Print one result line of the table."""
    bw = float(r["bw_bytes"]) / MIB  # type: ignore[arg-type]
    print(
        f"{r['round']:>2} {r['client']:<12} {r['op']:<4} {int(r['object_bytes']) // MIB:>4}M c{r['concurrency']:<2}"  # type: ignore[call-overload]
        f" n={r['requests']:<4} fail={r['failures']:<3} {bw:8.1f} MiB/s first={r['first_request_ms']:>8} ms"
        f" p50={r['p50_ms']:>8} p99={r['p99_ms']:>8} cpu={r['client_cpu_s']:>6}s {r['failure_kinds']}",
        flush=True,
    )


def admin() -> Any:
    """A plain boto3 client for bucket housekeeping (not timed)."""
    import boto3

    return boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1")


def ensure_bucket(bucket: str) -> None:
    """Create the bucket if it is missing."""
    s3 = admin()
    names = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
    if bucket not in names:
        s3.create_bucket(Bucket=bucket)


def remove_bucket(bucket: str) -> None:
    """Delete every object and multipart upload left in the bucket, then the bucket."""
    s3 = admin()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            s3.delete_object(Bucket=bucket, Key=obj["Key"])
    for up in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
        s3.abort_multipart_upload(Bucket=bucket, Key=up["Key"], UploadId=up["UploadId"])
    s3.delete_bucket(Bucket=bucket)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--csv", required=True, help="output CSV")
    p.add_argument("--bucket", default="gdsbench-clients")
    p.add_argument("--clients", nargs="+", default=["boto3", "awscrt", "obstore"], choices=CLIENTS)
    p.add_argument("--sizes", nargs="+", type=int, default=[1, 16, 256], help="object sizes in MiB")
    p.add_argument("--concurrency", nargs="+", type=int, default=[1, 8])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--max-objects", type=int, default=256, help="objects per cell at most")
    p.add_argument("--cell-bytes", type=int, default=1024 * MIB, help="bytes per cell at most")
    p.add_argument("--cell-seconds", type=float, default=4.0, help="stop issuing requests after this")
    p.add_argument("--gc-cmd", help="run after each cell, untimed (radosgw-admin gc process --include-all)")
    p.add_argument("--keep-bucket", action="store_true", help="do not delete the bucket at the end")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the sweep and write the CSV."""
    args = parse_args(argv)
    missing = [v for v in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL") if v not in os.environ]
    if missing:
        print(f"missing in the environment: {', '.join(missing)}", file=sys.stderr)
        return 2
    ensure_bucket(args.bucket)
    clients = make_clients(args.clients, args.bucket, max(args.concurrency) * 4)
    os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
    try:
        with open(args.csv, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=FIELDS)
            writer.writeheader()
            sweep(args, clients, writer)
    finally:
        if not args.keep_bucket:
            remove_bucket(args.bucket)
    return 0


if __name__ == "__main__":
    sys.exit(main())
