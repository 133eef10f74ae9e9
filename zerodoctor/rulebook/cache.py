"""Rules: the checked rulebook kept between commands, so a command does not parse and check every rule again.

Loading the ~90 rule files (YAML, then every condition and template parsed and checked against the signal
catalogue) took about half of a one-line ``diagnose``'s start-up. A clean load is pickled into
``rules-<key>.pickle`` in the user's cache directory (``ZERODOCTOR_CACHE_DIR``, else
``$XDG_CACHE_HOME/zerodoctor``, else ``~/.cache/zerodoctor``) and read back by the next command whose key is the same.

The key is a hash of everything the checked rules depend on: the bytes of every file the loader reads, with
their paths, in the loader's order (so an edited rule, a plugin's rules or a ``--rules`` directory is a
different key: a stale entry is never read), the signal catalogue (each signal's ``repr``), the rulebook's
own source files, zerodoctor's, pydantic's and Python's versions. Only a clean load is kept: a rulebook with errors is
loaded and its errors said every time. A missing, corrupt, foreign or unreadable entry is a miss (the rules
are loaded and the entry written again); a cache directory that cannot be written only costs the time.
An entry is written to a temporary file and renamed, so a reader never sees half of one; the newest
``KEPT`` entries are kept. An entry names the catalogue's signals by name (they are the live ones after a
read), and is read by an unpickler that only builds the rulebook's own classes and paths.
"""

from __future__ import annotations

import gc
import hashlib
import io
import os
import pickle
import sys
import tempfile
from pathlib import Path
from typing import Any

from zerodoctor.signals.base import Signal
from zerodoctor.sources.readable import open_regular

KEPT = 16  # entries kept: one per rules set (a checkout, each ``--rules`` directory used); the oldest go
FORMAT = 1  # bump when an entry's layout changes (the key covers the rulebook's sources too)
_PACKAGE = "zerodoctor.rulebook."  # an entry may build the classes of these modules, and pathlib's


def cache_dir() -> Path:
    """Where entries live: ``ZERODOCTOR_CACHE_DIR``, else the XDG user cache directory's ``zerodoctor``."""
    explicit = os.environ.get("ZERODOCTOR_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "zerodoctor"


def key(files: list[Path], catalog: dict[str, Signal], limit: int) -> str | None:
    """The hash of what loading ``files`` (in the loader's order) depends on; None where one cannot be read
    as the loader reads it (the loader then says why, and nothing is kept)."""
    import pydantic

    from zerodoctor import __version__

    digest = hashlib.blake2b(digest_size=20)
    for part in (f"format {FORMAT}", __version__, sys.version, pydantic.VERSION, *map(repr, catalog.values())):
        digest.update(part.encode() + b"\0")
    try:
        for source in sorted(Path(__file__).parent.glob("*.py")):
            digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    except OSError:
        return None
    for path in files:
        try:
            with open_regular(path) as f:
                raw = f.read(limit + 1)
        except (OSError, ValueError):
            return None
        if len(raw) > limit:
            return None
        digest.update(str(path).encode() + b"\0" + len(raw).to_bytes(8, "little") + raw)
    return digest.hexdigest()


def read(entry_key: str, catalog: dict[str, Signal]) -> list[Any] | None:
    """The rules kept under ``entry_key``, their signals the catalogue's own; None on any miss."""
    collecting = gc.isenabled()
    gc.disable()  # a read makes ~20,000 objects, none garbage: the collector walked every module's for nothing
    try:
        with open(cache_dir() / f"rules-{entry_key}.pickle", "rb") as f:
            stored = _Unpickler(f, catalog).load()
    except Exception:  # noqa: BLE001 - a missing, corrupt or foreign entry is a miss, whatever the reason
        return None
    finally:
        if collecting:
            gc.enable()
    if not (isinstance(stored, tuple) and len(stored) == 3 and stored[:2] == (FORMAT, entry_key)
            and isinstance(stored[2], list)):
        return None
    return stored[2]


def write(entry_key: str, rules: list[Any]) -> None:
    """Keep ``rules`` under ``entry_key``, atomically; a directory that cannot take it is left as it is."""
    buffer = io.BytesIO()
    _Pickler(buffer).dump((FORMAT, entry_key, rules))
    try:
        directory = cache_dir()  # RuntimeError: no home directory to find it in
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".rules-", suffix=".tmp", delete=False) as tmp:
            try:
                tmp.write(buffer.getvalue())
                tmp.close()
                os.replace(tmp.name, directory / f"rules-{entry_key}.pickle")
            except BaseException:
                os.unlink(tmp.name)
                raise
        _prune(directory)
    except (OSError, RuntimeError):
        return


def _prune(directory: Path) -> None:
    """Remove all but the ``KEPT`` newest entries."""
    entries = []
    for path in directory.glob("rules-*.pickle"):
        try:
            entries.append((path.stat().st_mtime_ns, path))
        except OSError:
            continue
    for _, path in sorted(entries, reverse=True)[KEPT:]:
        path.unlink(missing_ok=True)


class _Pickler(pickle.Pickler):
    """Signals are written as their names: a read hands back the live catalogue's entries."""

    def persistent_id(self, obj: Any) -> Any:
        return ("signal", obj.name) if isinstance(obj, Signal) else None


class _Unpickler(pickle.Unpickler):
    """Builds only the rulebook's classes and paths; signals are the catalogue's."""

    def __init__(self, file: Any, catalog: dict[str, Signal]) -> None:
        super().__init__(file)
        self._catalog = catalog

    def persistent_load(self, pid: Any) -> Any:
        kind, name = pid
        if kind != "signal" or name not in self._catalog:
            raise pickle.UnpicklingError(f"unknown signal {name!r}")
        return self._catalog[name]

    def find_class(self, module: str, name: str) -> Any:
        # A class defined in one of those modules, by its own name: a dotted name would reach what a module
        # imported (``zerodoctor.rulebook.cache`` + ``os.system``), a function would be called by the entry.
        ours = module == "pathlib" or module.startswith(_PACKAGE)
        found = super().find_class(module, name) if ours and "." not in name else None
        if not (isinstance(found, type) and found.__module__ == module):
            raise pickle.UnpicklingError(f"{module}.{name} is not a class of a rulebook")
        return found
