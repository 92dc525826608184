"""Lossless, bit-exact codecs for one chunk of a tensor's bytes at a time: the checkpoint's compression layer.

    from ckptio import codec
    c = codec.get("blosc", threads=2)                        # or "none", "zstd", "blosc-fast", "zipnn"
    blob = c.encode(t.view(torch.uint8).numpy(), t.element_size())
    ... write blob; record c.descriptor, len(blob), t.nbytes and the element size beside it ...
    codec.from_descriptor(descriptor).decode_into(blob, out, itemsize)   # out: writable, exactly nbytes
    n = codec.copy_parts(codec.encode_parts(c, data, itemsize), staging, c.descriptor)  # blob without a join

Every chunk decodes on its own (loads stay parallel across chunks and threads), codecs keep no state between
calls and may be shared by threads, and their C libraries release the GIL while they work. Anything that cannot
be decoded to exactly what the caller expects raises `CodecError` (a `ValueError`): never wrong bytes; a level
or thread count a codec cannot take, `OptionError`. Both are CheckpointErrors.
Libraries load lazily: `zstd` needs zstandard, `blosc`/`blosc-fast` python-blosc2, `zipnn` (opt-in) zipnn.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from types import ModuleType
from typing import cast

from .base import Buffer, Codec, CodecError, CodecUnavailable, copy_parts, encode_parts

# (level, threads) -> codec; (descriptor, threads) -> codec
Factory = Callable[[int | None, int | None], Codec]
Parser = Callable[[str, int | None], Codec]

_FACTORIES: dict[str, Factory] = {}
_PARSERS: dict[str, Parser] = {}
_LIBRARIES: dict[str, str] = {}  # codec name -> the importable library it needs ("" for none)


def register(name: str, factory: Factory, fmt: str, parser: Parser, library: str = "") -> None:
    """Add a codec: `factory` makes it by name, `parser` rebuilds it from a descriptor starting ``fmt/``."""
    _FACTORIES[name] = factory
    _PARSERS.setdefault(fmt, parser)
    _LIBRARIES[name] = library


def names() -> list[str]:
    """The registered codecs whose library is installed here."""
    return sorted(name for name, library in _LIBRARIES.items() if not library or _installed(library))


def get(name: str, *, level: int | None = None, threads: int | None = None) -> Codec:
    """A codec by name; `level` its compression level (codec default if None), `threads` per call (default 1)."""
    factory = _FACTORIES.get(name)
    if factory is None:
        raise CodecError(f"unknown codec {name!r}; known: {', '.join(sorted(_FACTORIES))}")
    return factory(level, threads)


def from_descriptor(descriptor: str, *, threads: int | None = None) -> Codec:
    """Rebuild the writer's codec from its recorded descriptor; CodecError if unknown or malformed."""
    parser = _PARSERS.get(descriptor.split("/", 1)[0])
    if parser is None:
        raise CodecError(f"unknown codec descriptor {descriptor!r}; known formats: {', '.join(sorted(_PARSERS))}")
    try:
        return parser(descriptor, threads)
    except CodecUnavailable as exc:
        raise CodecUnavailable(f"cannot decode descriptor {descriptor!r}: {exc}") from exc
    except CodecError:
        raise
    except ValueError as exc:
        raise CodecError(f"bad codec descriptor {descriptor!r}: {exc}") from exc


def _installed(library: str) -> bool:
    """Whether a library can be imported, without importing it (zipnn drags in torch)."""
    return importlib.util.find_spec(library) is not None


def _module(module: str, library: str) -> ModuleType:
    """Import one of the codec modules on first use; CodecUnavailable names what to install."""
    if library and not _installed(library):
        raise CodecUnavailable(f"codec module {module!r} needs {library!r}: pip install {library}")
    return importlib.import_module(f"{__name__}.{module}")


def _lazy_factory(module: str, library: str, attr: str) -> Factory:
    """A factory that imports its module (and library) only when a codec is asked for."""

    def make(level: int | None, threads: int | None) -> Codec:
        """Build the codec with the module's factory function `attr`."""
        return cast(Factory, getattr(_module(module, library), attr))(level, threads)

    return make


def _lazy_parser(module: str, library: str) -> Parser:
    """A descriptor parser that imports its module only when a descriptor of its format is read."""

    def parse(descriptor: str, threads: int | None) -> Codec:
        """Rebuild the codec with the module's `from_descriptor`."""
        return cast(Parser, _module(module, library).from_descriptor)(descriptor, threads)

    return parse


# name, module and its factory function, descriptor format, library needed
for _name, _mod, _attr, _fmt, _lib in (
    ("none", "none", "create", "none", ""),
    ("zstd", "zstd", "create", "zstd", "zstandard"),
    ("blosc", "blosc", "create", "blosc2", "blosc2"),
    ("blosc-fast", "blosc", "create_fast", "blosc2", "blosc2"),
    ("zipnn", "zipnn", "create", "zipnn", "zipnn"),
):
    register(_name, _lazy_factory(_mod, _lib, _attr), _fmt, _lazy_parser(_mod, _lib), _lib)

__all__ = [
    "Buffer",
    "Codec",
    "CodecError",
    "CodecUnavailable",
    "Factory",
    "Parser",
    "copy_parts",
    "encode_parts",
    "from_descriptor",
    "get",
    "names",
    "register",
]
