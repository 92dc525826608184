"""FAKE kvikio.cufile_driver: properties.is_gds_available from $FAKE_KVIKIO_GDS (unset: no driver, it raises)."""

import os


class _Properties:
    @property
    def is_gds_available(self):
        value = os.environ.get("FAKE_KVIKIO_GDS")
        if value is None:
            raise RuntimeError("cuFile driver not opened (FAKE)")
        return value == "1"


properties = _Properties()
