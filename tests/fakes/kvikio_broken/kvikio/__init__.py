"""FAKE broken kvikio, for tests only: raises at import as kvikio 26.x does when its dlopen of libcufile
fails (libkvikio.load_library), an OSError rather than an ImportError."""

raise OSError("libcufile.so.0: cannot open shared object file: No such file or directory")
