"""Sources: a path → a byte stream of its log lines (gzip and UTF-16/32 decoded), or why there is none.

Only regular files are opened, and never blocking: a FIFO named ``rank-0.jsonl`` would hold
``open()`` until someone writes into it, and everything queued behind it (every other run of a
``watch``, its signal handling) with it. The type is checked before opening and again on the
opened descriptor, so a file swapped for a FIFO in between is refused too.

A compressed or BOM-marked file is decoded transparently, recognised by its first bytes (not
its name: a ``console.log`` may be gzip). Offsets are then positions in the decoded UTF-8
stream, which is what the store commits; seeking back means decoding again from the start.
Anything else that is not text says so, rather than read as a log with no events in it.
"""

from __future__ import annotations

import codecs
import errno
import io
import os
import resource
import stat
import zlib
from collections import OrderedDict
from pathlib import Path
from typing import BinaryIO, Protocol

from zerodoctor.sources.flight_recorder import PICKLE_PROTOCOL_2
from zerodoctor.sources.tensorboard_events import looks_like_tfevents

HEAD_BYTES = 4096
CHUNK = 64 * 1024
_BOMS = (  # longest first: UTF-32-LE's BOM starts with UTF-16-LE's
    (codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_OTHER_FORMATS = (  # magic bytes of what people hand over instead of a log
    (b"BZh", "bzip2-compressed: decompress it first"), (b"\xfd7zXZ\x00", "xz-compressed: decompress it first"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed: decompress it first"), (b"PK\x03\x04", "a zip archive: extract it first"),
    (b"\x7fELF", "an executable"), (b"SQLite format 3\x00", "an SQLite database"),
)
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


class UnreadableFile(OSError):
    """A path that is no log zerodoctor can read; the message names it and says why."""


def check_regular(path: Path | str) -> os.stat_result:
    """``stat`` of ``path`` when it is a regular file (through symlinks); else UnreadableFile."""
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnreadableFile(f"{path}: a symlink loop (too many levels of symbolic links)") from None
        raise
    if not stat.S_ISREG(st.st_mode):
        raise UnreadableFile(f"{path}: not a regular file ({_kind(st.st_mode)}), not read")
    return st


def open_regular(path: Path | str) -> BinaryIO:
    """Open ``path`` for reading if it is a regular file, without ever blocking."""
    check_regular(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnreadableFile(f"{path}: a symlink loop (too many levels of symbolic links)") from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):  # replaced between the stat and the open
        os.close(fd)
        raise UnreadableFile(f"{path}: not a regular file ({_kind(mode)}), not read")
    return os.fdopen(fd, "rb")


def open_log(path: Path | str) -> tuple[BinaryIO, str | None]:
    """The lines of ``path`` as bytes, and how they were decoded (``"gzip"``, ``"utf-16-le"``, …; None: as is).

    Raises UnreadableFile for a non-regular file and for content that is not text.
    """
    raw = open_regular(path)
    try:
        head = os.pread(raw.fileno(), HEAD_BYTES, 0)
        encoding = _encoding(head)
        stream: BinaryIO = raw if encoding is None else io.BufferedReader(_Decoded(raw, encoding, path), CHUNK)
        decoded = head if encoding is None else stream.read(HEAD_BYTES)
        stream.seek(0)
        if why := _not_text(head, decoded):
            raise UnreadableFile(f"{path}: not a log zerodoctor can read ({why})")
    except BaseException:
        raw.close()
        raise
    return stream, encoding


def _encoding(head: bytes) -> str | None:
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    return next((name for bom, name in _BOMS if head.startswith(bom)), None)


def _not_text(head: bytes, decoded: bytes) -> str | None:
    if head.startswith(PICKLE_PROTOCOL_2):  # a binary input: a flight recorder dump, read without classes
        return None
    if looks_like_tfevents(head):  # a binary input: TensorBoard's event file, read by TensorBoard's reader
        return None
    for magic, what in _OTHER_FORMATS:
        if head.startswith(magic):
            return what
    at = decoded.find(b"\0")
    return None if at < 0 else f"binary data: a NUL byte at offset {at}"


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a file")


def pread(stream: BinaryIO, size: int, offset: int) -> bytes:
    """``size`` bytes of a stream from ``open_log`` from ``offset`` on, leaving its position where it is.

    A decoded stream's offsets are decoded ones: it is read from a second decoder, which
    decodes again from the start (what a fingerprint's head or a refused batch costs, rarely).
    """
    if isinstance(getattr(stream, "raw", None), _Decoded):
        again = io.BufferedReader(stream.raw.restarted(), CHUNK)  # read() here loops to ``size`` or the end
        again.seek(offset)
        return again.read(size)
    return os.pread(stream.fileno(), size, offset)


class _Decoded(io.RawIOBase):
    """A gzip (any number of members) or UTF-16/32 file read as UTF-8 bytes; seekable by decoding again.

    It reads with ``pread`` at its own position, so two of them over one descriptor never
    disturb each other (``restarted``). Only the one ``open_log`` made closes the file.
    """

    def __init__(self, raw: BinaryIO, encoding: str, path: Path | str, *, owns: bool = True) -> None:
        self._raw, self._encoding, self._path, self._owns = raw, encoding, path, owns
        self._rewind()

    def restarted(self) -> _Decoded:
        return _Decoded(self._raw, self._encoding, self._path, owns=False)

    def _rewind(self) -> None:
        self._pos, self._pending = 0, b""
        if self._encoding == "gzip":
            self._raw_pos, self._gunzip = 0, zlib.decompressobj(wbits=31)
        else:
            self._raw_pos = next(len(bom) for bom, name in _BOMS if name == self._encoding)
            self._text = codecs.getincrementaldecoder(self._encoding)("replace")

    def _more(self) -> bytes:
        chunk = os.pread(self._raw.fileno(), CHUNK, self._raw_pos)
        self._raw_pos += len(chunk)
        if self._encoding != "gzip":
            # Never final: half a character at the end is completed by the writer's next bytes.
            return self._text.decode(chunk).encode("utf-8")
        out = b""
        while chunk:
            try:
                out += self._gunzip.decompress(chunk)
            except zlib.error as exc:
                raise UnreadableFile(f"{self._path}: corrupt gzip data ({exc})") from None
            chunk = self._gunzip.unused_data
            if self._gunzip.eof:  # another member follows (``cat a.gz b.gz``)
                self._gunzip = zlib.decompressobj(wbits=31)
            else:
                chunk = b""
        # A truncated member (still being written) simply ends here: its rest is read once it exists.
        return out

    def readinto(self, buffer) -> int:  # noqa: ANN001 - a writable buffer
        while not self._pending:
            at_end = self._raw_pos >= os.fstat(self._raw.fileno()).st_size
            data = self._more()
            if not data and at_end:
                return 0
            self._pending = data
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        self._pos += n
        return n

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self._pos
        elif whence != io.SEEK_SET:
            raise io.UnsupportedOperation("a decoded stream has no known end to seek from")
        if offset < self._pos:
            self._rewind()
        while self._pos < offset:
            if not self.read(min(CHUNK, offset - self._pos)):
                break
        return self._pos

    def fileno(self) -> int:
        return self._raw.fileno()

    def close(self) -> None:
        if self._owns and not self.closed:
            self._raw.close()
        super().close()


class Closable(Protocol):
    def close(self) -> None: ...


class OpenFiles:
    """The readers holding an open handle (``watch``'s tails, a store-less ``diagnose``'s files), least recently
    read first; past ``limit`` the oldest closes its own and opens it again when next read, so 10,000 rank files
    cost no more descriptors than a quarter of ``ulimit -n``.

    Within that quarter every file stays open: a file closed between passes is opened again at the next, its
    head read and checked again, which at 4,096 rank files (a cap of 512 here before) was a tenth of each pass.
    """

    def __init__(self, limit: int | None = None) -> None:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        # A quarter of this process's descriptors (the training job's processes have their own): the store's
        # connections, watchdog and the exporter's sockets need some of the rest.
        self.limit = limit or max(8, (soft if soft != resource.RLIM_INFINITY else 4096) // 4)
        self._tails: OrderedDict[Closable, None] = OrderedDict()

    def used(self, tail: Closable) -> None:
        self._tails[tail] = None
        self._tails.move_to_end(tail)
        while len(self._tails) > self.limit:
            oldest, _ = self._tails.popitem(last=False)
            oldest.close()

    def dropped(self, tail: Closable) -> None:
        self._tails.pop(tail, None)


OPEN_FILES = OpenFiles()
