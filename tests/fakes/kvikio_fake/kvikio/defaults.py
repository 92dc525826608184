"""FAKE kvikio.defaults: get/set of num_threads and compat_mode, is_compat_mode_preferred (26.x API)."""

import enum
import os


class CompatMode(enum.IntEnum):
    """kvikio's CompatMode values."""

    OFF = 0
    ON = 1
    AUTO = 2


_settings = {
    "num_threads": int(os.environ.get("KVIKIO_NTHREADS", "1")),
    "compat_mode": CompatMode[os.environ.get("KVIKIO_COMPAT_MODE", "AUTO").upper()],
}


def get(name):
    """A setting's value."""
    return _settings[name]


def set(name, value):
    """Change a setting."""
    _settings[name] = value


def is_compat_mode_preferred():
    """$FAKE_KVIKIO_PREFERRED=1 plays a host where kvikio chose compat mode (no libcufile, no /run/udev)."""
    return _settings["compat_mode"] == CompatMode.ON or os.environ.get("FAKE_KVIKIO_PREFERRED") == "1"
