"""FAKE kvikio, for tests only (this machine has no GPU and no kvikio): the few calls gdsbench makes, with
kvikio 26.x's names and semantics, doing real POSIX I/O into host (CPU tensor / buffer) memory.

CuFile.pread/pwrite return a future whose get() is the bytes moved, as kvikio's IOFuture does;
$FAKE_KVIKIO_SHORT makes every transfer move that many bytes fewer (a short transfer kvikio can report).
kvikio.defaults keeps num_threads (starting from $KVIKIO_NTHREADS, else 1, as kvikio does) and compat_mode.
"""

from . import cufile_driver, defaults  # noqa: F401
from .cufile import CuFile  # noqa: F401

__version__ = "26.10.0+FAKE"
