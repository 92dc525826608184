"""`python -m gdsbench.sysinfo.kvikio_probe`: ask kvikio itself how it would do I/O here; print one JSON line.

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
        "compat_preferred": bool(kd.is_compat_mode_preferred()),
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
