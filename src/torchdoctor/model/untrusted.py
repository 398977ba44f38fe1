"""Files users pass around (run directories copied from a cluster, traces attached to an issue)
are untrusted: opened only as plain files, and bounded before anything parses them.

A FIFO would block the reader forever, a symbolic link to /dev/zero would feed it without end,
a device could be anything: whatever is not a regular file is refused, checked on the open file
itself (so the file cannot be swapped between the check and the read). Nothing read is ever
executed, unpickled or used to name another file to read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Annotated, BinaryIO

from msgspec import Meta

from torchdoctor.errors import InputError
from torchdoctor.model.units import MIB, format_bytes

# A record of a 10,000-step run is ~5 MiB: anything near this is not a torchdoctor document
MAX_DOCUMENT_BYTES = 64 * MIB
MAX_STRING_CHARS = 1 * MIB  # the longest text a record holds is a script's traceback
MAX_LIST_ITEMS = 1_000_000  # steps, samples, timeline points
MAX_DEPTH = 32  # a record nests ~8 deep

# What a measured value may be, checked as a document is read (serialize.read_json): a duration,
# a time since the run started or a count is never negative (JSON itself has no NaN or infinity)
Seconds = Annotated[float, Meta(ge=0)]
Count = Annotated[int, Meta(ge=0)]


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def open_untrusted(path: Path, what: str = "file") -> BinaryIO:
    """`path` opened for reading, or a one-line InputError: missing, unreadable, or not a
    regular file. Opening never blocks (O_NONBLOCK: a FIFO without a writer)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise InputError(f"{path} does not exist") from None
    except IsADirectoryError:
        raise InputError(f"{path} is a directory, not a {what}") from None
    except OSError as exc:
        raise InputError(f"cannot read {path} ({exc.strerror}); check the path and its permissions") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            link = " (through a symbolic link)" if os.path.islink(path) else ""
            raise InputError(f"{path} is {_kind(mode)}{link}, not a {what}; pass the {what} itself")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_untrusted(path: Path, max_bytes: int = MAX_DOCUMENT_BYTES, what: str = "torchdoctor document") -> bytes:
    """The whole of a regular file no larger than `max_bytes` (checked before reading, and
    while reading: a file that grows meanwhile is cut off and refused)."""
    with open_untrusted(path, what) as fh:
        size = os.fstat(fh.fileno()).st_size
        data = fh.read(max_bytes + 1) if size <= max_bytes else b""
    if size > max_bytes or len(data) > max_bytes:
        raise InputError(f"{path} is {format_bytes(max(size, len(data)))}, more than the {format_bytes(max_bytes)} a "
                         f"{what} can be: it is not one, or it is damaged")
    return data
