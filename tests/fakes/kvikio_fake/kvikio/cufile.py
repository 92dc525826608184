"""FAKE kvikio.CuFile: real pread/pwrite on host memory, futures that report the bytes moved."""

import os


class _Future:
    def __init__(self, moved):
        self._moved = moved

    def get(self):
        return self._moved

    def done(self):
        return True


def _view(buf, size):
    """A writable byte view of a CPU tensor or buffer."""
    array = buf.numpy() if hasattr(buf, "numpy") else buf
    return memoryview(array).cast("B")[:size]


class CuFile:
    def __init__(self, path, flags="r"):
        mode = os.O_RDONLY if flags == "r" else os.O_RDWR | os.O_CREAT | (os.O_TRUNC if flags == "w" else 0)
        self._fd = os.open(path, mode, 0o644)

    def pread(self, buf, size=None, file_offset=0, task_size=None):
        view = _view(buf, size if size is not None else buf.nbytes)
        got = os.preadv(self._fd, [view], file_offset)
        return _Future(max(0, got - int(os.environ.get("FAKE_KVIKIO_SHORT", "0"))))

    def pwrite(self, buf, size=None, file_offset=0, task_size=None):
        view = _view(buf, size if size is not None else buf.nbytes)
        return _Future(os.pwrite(self._fd, view, file_offset) - int(os.environ.get("FAKE_KVIKIO_SHORT", "0")))

    def close(self):
        os.close(self._fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
