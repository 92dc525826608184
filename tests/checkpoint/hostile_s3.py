"""A small, bounded HTTP server on 127.0.0.1 that stands in for a broken or hostile S3 service (issue 44): it
really answers on a socket, and misbehaves in one chosen way. It counts every request it gets, ends each
connection it holds when told to stop, and never runs past its own limit (`lifetime`)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: The ways it can misbehave.
MODES = ("stall", "slow_body", "storm_503", "truncated_xml", "oversized_xml", "paging_forever", "entities")
LISTING_HEAD = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
)
BILLION_LAUGHS = (
    b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
    + b"".join(b'<!ENTITY lol%d "%s">' % (i, (b"&lol%d;" % (i - 1) if i > 1 else b"&lol;") * 10) for i in range(1, 10))
    + b"]><ListBucketResult><Name>&lol9;</Name></ListBucketResult>"
)


class Hostile(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, mode: str, lifetime: float = 120.0) -> None:
        assert mode in MODES
        super().__init__(("127.0.0.1", 0), _Handler)
        self.mode, self.until = mode, time.monotonic() + lifetime
        self.requests: list[str] = []
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def waiting(self, seconds: float) -> bool:
        """Sleep up to `seconds`; False once the server is stopping or past its lifetime."""
        end = min(time.monotonic() + seconds, self.until)
        return not self.stopping.wait(max(0.0, end - time.monotonic())) and time.monotonic() < self.until


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Hostile

    def log_message(self, *_: object) -> None:  # quiet
        pass

    def _any(self) -> None:
        with self.server.lock:
            self.server.requests.append(f"{self.command} {self.path}")
        length = int(self.headers.get("Content-Length") or 0)
        with contextlib.suppress(OSError):
            while length > 0:  # read the body (an upload's part) so the client is not stuck sending it
                chunk = self.rfile.read(min(length, 1 << 20))
                if not chunk:
                    break
                length -= len(chunk)
        getattr(self, f"_{self.server.mode}")()

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any

    def _send(self, status: int, body: bytes, content_type: str = "application/xml") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _stall(self) -> None:
        """Read the request, never answer: the socket stays open."""
        self.server.waiting(3600)
        self.close_connection = True

    def _slow_body(self) -> None:
        """Headers at once, then the body one byte a second (a listing, an object, an error alike)."""
        self.send_response(200)
        self.send_header("Content-Length", "100000")
        self.send_header("ETag", '"0123"')
        self.end_headers()
        with contextlib.suppress(OSError):
            while self.server.waiting(1.0):
                self.wfile.write(b" ")
                self.wfile.flush()
        self.close_connection = True

    def _storm_503(self) -> None:
        self._send(503, b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>")

    def _listing(self, body: bytes) -> None:
        """A listing's answer for a GET of the bucket; 404 NoSuchKey for everything else."""
        if self.command == "GET" and ("list-type=2" in self.path or "uploads" in self.path):
            self._send(200, body)
        else:
            self._send(404, b"<Error><Code>NoSuchKey</Code></Error>")

    def _truncated_xml(self) -> None:
        self._listing(LISTING_HEAD + b"<IsTruncated>false</IsTruncated><Contents><Key>step-0000000000")

    def _oversized_xml(self) -> None:
        entry = b"<Contents><Key>p/x</Key><Size>1</Size><ETag>e</ETag></Contents>"
        self._listing(LISTING_HEAD + entry * ((17 << 20) // len(entry)) + b"</ListBucketResult>")

    def _paging_forever(self) -> None:
        page = b"<IsTruncated>true</IsTruncated><NextContinuationToken>again</NextContinuationToken>"
        self._listing(LISTING_HEAD + page + b"</ListBucketResult>")

    def _entities(self) -> None:
        self._listing(BILLION_LAUGHS)


@contextlib.contextmanager
def hostile(mode: str, lifetime: float = 120.0) -> Iterator[Hostile]:
    """A Hostile server running in the background for the block; stopped (every held connection let go) after."""
    server = Hostile(mode, lifetime)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stopping.set()
        server.shutdown()
        server.server_close()
        thread.join(10)
