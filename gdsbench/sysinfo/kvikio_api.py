"""`python -m gdsbench.sysinfo.kvikio_api`: ask kvikio itself how it would do I/O here; print one JSON line.

Run in a child process by doctor (sysinfo.gpu.kvikio_probe), because importing kvikio 26.x dlopens
libcufile and may raise anything or crash. kvikio decides compat mode on its own rule (AUTO resolves to
compat only when libcufile cannot be opened, /run/udev is unreadable, or on WSL; then per file when the
O_DIRECT open or cuFileHandleRegister fails); it never consults nvidia-fs. cuFile's view is separate:
`kvikio.cufile_driver.properties.is_gds_available` is True when cuFile reports an nvidia-fs version.
"""

from __future__ import annotations

import json
import os
from typing import Any


def _mode_name(mode: Any) -> str:
    """A CompatMode value as its name (OFF, ON, AUTO); AUTO is truthy, so never test it with `if`."""
    return str(getattr(mode, "name", mode))


def import_problem() -> str | None:
    """Why kvikio cannot be imported here (26.x raises anything when its dlopen of libcufile fails), or None."""
    try:
        import kvikio  # noqa: F401
    except Exception as exc:
        return f"kvikio not importable: {type(exc).__name__}: {exc}"
    return None


def set_threads(threads: int) -> int:
    """Size kvikio's thread pool (ONE thread by default): 26.x defaults.set, older num_threads_reset;
    return the size kvikio reports back. (The checkpoint library, a leaf, keeps its own copy in io/gds.py.)"""
    import kvikio.defaults as kd

    if hasattr(kd, "set"):
        kd.set("num_threads", threads)
        return int(kd.get("num_threads"))
    kd.num_threads_reset(threads)
    return int(kd.get_num_threads())


def compat_preferred() -> bool:
    """Whether kvikio does its I/O in its own compat mode (POSIX through host memory, no cuFile)."""
    import kvikio.defaults as kd

    return bool(kd.is_compat_mode_preferred() if hasattr(kd, "is_compat_mode_preferred") else kd.compat_mode())


def kvikio_view() -> dict[str, Any]:
    """kvikio's version, compat_mode setting, is_compat_mode_preferred() and num_threads."""
    import kvikio
    import kvikio.defaults as kd

    getter = getattr(kd, "get", None)
    mode = getter("compat_mode") if getter else kd.compat_mode()
    threads = getter("num_threads") if getter else kd.get_num_threads()
    return {
        "version": getattr(kvikio, "__version__", None),
        "compat_mode_setting": _mode_name(mode),
        "compat_preferred": compat_preferred(),
        "num_threads": int(threads),
    }


def cufile_view() -> dict[str, Any]:
    """What cuFile's driver properties say through kvikio: is nvidia-fs (true GDS) available."""
    try:
        import kvikio.cufile_driver as cd

        return {"is_gds_available": bool(cd.properties.is_gds_available)}
    except Exception as exc:  # no driver, no libcufile: cuFile's view is unknown, not an error of the probe
        return {"is_gds_available": None, "cufile_reason": f"{type(exc).__name__}: {exc}"}


def probe() -> dict[str, Any]:
    """Both views, or why kvikio could not be asked."""
    try:
        kvikio = kvikio_view()
    except Exception as exc:  # kvikio 26.x dlopens libcufile at import: any exception is possible
        return {"importable": False, "reason": f"import kvikio failed: {type(exc).__name__}: {exc}"}
    env = {k: v for k, v in os.environ.items() if k.startswith("KVIKIO_")}
    return {"importable": True, "kvikio": kvikio, "cufile": cufile_view(), "env": env}


if __name__ == "__main__":
    print(json.dumps(probe()))
