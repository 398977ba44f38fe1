"""Read a Kineto trace file (`.json` or gzip) into typed events, streaming.

The `traceEvents` array is cut into ~8 MiB pieces at event boundaries (`}, {` between two
events); each piece is decoded by msgspec as a JSON array, so the JSON text is never held
whole. A candidate boundary that falls inside a string or a nested object makes its piece
invalid JSON, so a piece that decodes proves its cut was a real boundary; otherwise the
previous candidate is tried. A memory guard refuses a trace that would not fit before the
machine starts to swap.

Nothing from the file is evaluated or unpickled: it is only ever parsed as JSON.
(Decoding in two worker processes was tried: on this project's 2-vCPU machine both
workers ran at half speed, so the sequential path is the only one.)
"""

from __future__ import annotations

import gzip
import os
import re
from itertools import islice
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

import msgspec

from torchdoctor.machine.memory import available_memory_bytes
from torchdoctor.model.units import MIB, format_bytes
from torchdoctor.model.untrusted import open_untrusted
from torchdoctor.errors import InputError
from torchdoctor.trace.events import (
    HEAD_DECODER,
    DeviceProperties,
    DistributedInfo,
    TraceEvents,
    TraceHead,
    events_from_json,
)

CHUNK_BYTES = 8 << 20
HEAD_LIMIT = 64 << 20  # metadata before `traceEvents` is a few KiB; past this it is no trace
TAIL_WINDOW = MIB  # the array end and the keys after it lie in the last few KiB
BOUNDARY_WINDOW = 256 << 10
FIRST_PIECE_BYTES = 64 << 10
BOUNDARY_TRIES = 16
# Peak memory per kept event: the decoded struct with its floats, ints and args (~350 bytes;
# kernel names are shared) plus the analyses' working lists; ~500 bytes measured on the 3M-
# event benchmark trace (benchmarks/results/trace_speed.json).
MEMORY_PER_EVENT = 500
GZIP_MAGIC = b"\x1f\x8b"

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_BYTE_POS = re.compile(r"\(byte (\d+)\)")


class TraceTooLarge(InputError):
    """The trace would need more memory than the budget: refuse before the machine swaps."""


@dataclass
class LoadedTrace:
    path: Path
    events: TraceEvents
    device_properties: list[DeviceProperties] = field(default_factory=list)
    distributed: DistributedInfo | None = None
    base_time_ns: int | None = None
    bytes_read: int = 0  # uncompressed JSON bytes
    compressed: bool = False
    has_device_properties_key: bool = False


def default_memory_budget() -> int:
    """Half of the memory this process may still take (machine/memory.py: what the machine has
    available, what its cgroup and its address-space limit allow), else 4 GiB."""
    left = available_memory_bytes()
    return left // 2 if left is not None else 4 << 30


def load_trace(path: Path, *, max_memory_bytes: int | None = None) -> LoadedTrace:
    """Parse one trace file. Raises InputError (one line: what is wrong and what to do)."""
    path = Path(path)
    budget = max_memory_bytes if max_memory_bytes is not None else default_memory_budget()
    with open_untrusted(path, "trace file") as fh:  # a FIFO, a device or a link to one is refused here
        size = os.fstat(fh.fileno()).st_size
        magic = fh.read(2)
    if size == 0:
        raise InputError(f"{path} is empty; re-export the trace (prof.export_chrome_trace)")
    compressed = magic == GZIP_MAGIC
    guard = _MemoryGuard(path, budget)
    if not compressed:
        guard.check_file_size(size)
    try:
        return _load_sequential(path, _Reader(path, compressed), guard)
    except RecursionError:  # msgspec stops at Python's recursion limit: no trace nests like that
        raise InputError(f"{path} nests JSON deeper than any Kineto trace (a damaged or hostile file); "
                         "re-export the trace") from None


class _MemoryGuard:
    def __init__(self, path: Path, budget: int):
        self.path, self.budget = path, budget

    def check_file_size(self, size: int) -> None:
        # ~300 bytes of JSON per Kineto event: a lower bound on the events the file holds
        self._check(size // 300, estimated=True)

    def check(self, events: TraceEvents) -> None:
        self._check(events.kept(), estimated=False)

    def _check(self, events: int, estimated: bool) -> None:
        need = events * MEMORY_PER_EVENT
        if need <= self.budget:
            return
        what = f"about {events:,} events" if estimated else f"{events:,} events so far"
        raise TraceTooLarge(
            f"{self.path} is too large for this machine's memory: {what} need about "
            f"{format_bytes(need)}, over the {format_bytes(self.budget)} budget (half of the "
            f"available memory); profile fewer steps (torch.profiler.schedule(active=2)) or "
            f"analyse one rank's file at a time"
        )


class _Reader:
    """Blocks of the uncompressed file; gzip errors become InputErrors."""

    def __init__(self, path: Path, compressed: bool):
        self.path, self.compressed = path, compressed
        self.raw = open_untrusted(path, "trace file")
        self.fh: BinaryIO = gzip.GzipFile(fileobj=self.raw, mode="rb") if compressed else self.raw
        self.offset = 0  # uncompressed bytes returned so far
        self.eof = False

    def read(self, n: int | None = None) -> bytes:
        try:
            data = self.fh.read(CHUNK_BYTES if n is None else n)  # looked up per call: tests shrink it
        except EOFError:
            raise InputError(f"{self.path} is truncated (the gzip stream ends early); copy the file again") from None
        except (gzip.BadGzipFile, zlib.error, OSError) as exc:
            raise InputError(f"{self.path} is not a readable gzip file ({exc}); re-export the trace") from None
        if not data:
            self.eof = True
        self.offset += len(data)
        return data

    def close(self) -> None:
        self.fh.close()
        self.raw.close()


def _events_start(path: Path, reader: _Reader) -> tuple[bytearray, int, bool, TraceHead]:
    """Read until the start of the events array. Returns (buffer, index of the first byte
    after `[`, object_format, head metadata)."""
    buf = bytearray(reader.read())
    stripped = buf.lstrip()
    if stripped[:3] == b"\xef\xbb\xbf":  # UTF-8 byte order mark
        stripped = stripped[3:].lstrip()
    if not stripped:
        raise InputError(f"{path} is empty; re-export the trace (prof.export_chrome_trace)")
    first = stripped[:1]
    if first == b"[":
        return buf, buf.index(b"[") + 1, False, TraceHead()
    if first != b"{":
        raise InputError(f"{path} is not JSON (it starts with {bytes(stripped[:16])!r}); pass a Kineto trace (.json or .json.gz)")
    while True:
        m = _EVENTS_KEY.search(buf)
        if m is not None:
            break
        if reader.eof or len(buf) > HEAD_LIMIT:
            _not_a_trace(path, bytes(buf) if reader.eof else None)
        buf += reader.read()
    try:
        head = HEAD_DECODER.decode(bytes(buf[: m.end()]) + b"]}")
    except msgspec.DecodeError as exc:
        raise InputError(f"{path} is not valid JSON before traceEvents ({exc}); re-export the trace") from None
    except msgspec.ValidationError as exc:
        raise InputError(f"{path} has unexpected trace metadata ({exc}); is it a Kineto trace?") from None
    return buf, m.end(), True, head


def _not_a_trace(path: Path, whole: bytes | None) -> None:
    if whole is not None:
        try:
            msgspec.json.decode(whole)
        except msgspec.DecodeError as exc:
            raise InputError(f"{path} is not valid JSON ({exc}); re-export the trace") from None
    raise InputError(
        f"{path} is JSON but not a Chrome/Kineto trace (no \"traceEvents\"); pass the file "
        f"written by torch.profiler (prof.export_chrome_trace or tensorboard_trace_handler)"
    )


def _tail_candidates(rest: bytes | bytearray, object_format: bool) -> Iterator[tuple[int, TraceHead]]:
    """Where the events array may end in `rest`, last first: (index of a `]`, metadata after
    it) for each `]` whose remainder is a valid end of the document. The caller confirms a
    candidate by decoding the events before it."""
    p, low = len(rest), max(0, len(rest) - TAIL_WINDOW)
    for _ in range(64):
        p = rest.rfind(b"]", low, p)
        if p < 0:
            return
        before = bytes(rest[max(0, p - 64): p]).rstrip()
        if object_format and before and not before.endswith((b"}", b"[", b",")):
            continue  # events end with an object (or the array is empty)
        after = bytes(rest[p + 1:]).strip()
        if not object_format:
            if not after:
                yield p, TraceHead()
            continue
        if after == b"}":
            yield p, TraceHead()
        elif after.startswith(b","):
            try:
                yield p, HEAD_DECODER.decode(b"{" + after[1:])
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue


def _decode_error(path: Path, exc: Exception, base_offset: int) -> InputError:
    text = str(exc)
    if isinstance(exc, msgspec.ValidationError):
        return InputError(f"{path} has events of an unexpected shape ({text}); is it a Kineto trace?")
    m = _BYTE_POS.search(text)
    where = f" near byte {base_offset + int(m.group(1)):,}" if m else ""
    reason = _BYTE_POS.sub("", text).strip()
    return InputError(f"{path} is not valid JSON{where} ({reason}); the file may be damaged: re-export it")


def _decode_in_place(buf: bytearray, opener: int, closer: int) -> TraceEvents:
    """Decode the events between buf[opener] and buf[closer] without copying: both bytes
    are separators (`[`, `,` or white space) that are swapped for `[` and `]` meanwhile."""
    saved = buf[opener], buf[closer]
    buf[opener], buf[closer] = 0x5B, 0x5D  # "[" and "]"
    try:
        # The slice is released here too, not only the view: a decode error keeps its frames (and
        # so the slice) alive in the caller's `last_error`, and an exported slice would forbid the
        # next `buf += block` (BufferError) when a fake boundary failed near a chunk's end.
        with memoryview(buf) as view, view[opener: closer + 1] as piece:
            return events_from_json(piece)
    finally:
        buf[opener], buf[closer] = saved


def stream_trace(path: Path, sink: Callable[[TraceEvents], None]) -> LoadedTrace:
    """Decode the trace chunk by chunk, handing each chunk's events to `sink` and keeping none:
    memory stays at one chunk (~8 MiB of JSON) whatever the file's size. The LoadedTrace that
    comes back has the metadata and the event count, and no events."""
    path = Path(path)
    with open_untrusted(path, "trace file") as fh:
        compressed = fh.read(2) == GZIP_MAGIC
    return _load_sequential(path, _Reader(path, compressed), _MemoryGuard(path, 1 << 62), sink=sink)


def uncompressed_size(path: Path) -> int:
    """The JSON's size: the file's, or for gzip the size its trailer records (modulo 4 GiB: a
    gzip file over that says less; the guard still stops it once decoded)."""
    with open_untrusted(path, "trace file") as fh:  # a FIFO is refused here, not waited on
        size = os.fstat(fh.fileno()).st_size
        if fh.read(2) != GZIP_MAGIC or size < 18:
            return size
        fh.seek(-4, 2)
        return max(size, int.from_bytes(fh.read(4), "little"))


def fits_in_memory(path: Path, max_memory_bytes: int | None = None) -> bool:
    """Whether the trace's events, estimated from its size, fit the memory budget."""
    budget = max_memory_bytes if max_memory_bytes is not None else default_memory_budget()
    return uncompressed_size(Path(path)) // 300 * MEMORY_PER_EVENT <= budget


class _Counting(TraceEvents):
    """What a streamed load keeps: the counts, not the events."""

    def __init__(self, sink: Callable[[TraceEvents], None]) -> None:
        super().__init__()
        self.sink = sink

    def merge(self, chunk: TraceEvents) -> None:
        self.events += chunk.events
        self.skipped_no_time += chunk.skipped_no_time
        self.sink(chunk)


def _load_sequential(path: Path, reader: _Reader, guard: _MemoryGuard,
                     sink: Callable[[TraceEvents], None] | None = None) -> LoadedTrace:
    try:
        buf, pos, object_format, head = _events_start(path, reader)
        opener = pos - 1  # the `[`: the byte before the first undecoded event
        out = TraceEvents() if sink is None else _Counting(sink)
        consumed = reader.offset - len(buf)  # file offset of buf[0]
        # The metadata at the start of a trace has no `cat` and needs the slower generic
        # decode: cut a small first piece around it, so the rest decodes typed.
        opener = _decode_complete_pieces(path, buf, opener, consumed, out, guard, first=True)
        while not reader.eof:
            block = reader.read()
            if not block:
                break
            buf += block
            opener = _decode_complete_pieces(path, buf, opener, consumed, out, guard)
            if opener:  # drop what was decoded; keep the buffer small
                del buf[:opener]
                consumed += opener
                opener = 0
        tail_head, last_error = None, None
        for end, candidate_head in _tail_candidates(buf[opener + 1:], object_format):
            closer = opener + 1 + end
            if bytes(buf[opener + 1: closer]).strip():
                # a trailing comma before `]` is tolerated, as browsers' trace viewers do
                last_comma = buf.rfind(b",", opener + 1, closer)
                if last_comma > 0 and not bytes(buf[last_comma + 1: closer]).strip():
                    closer = last_comma
                try:
                    chunk = _decode_last(buf, opener, closer)
                except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                    last_error = exc
                    continue
                out.merge(chunk)
                guard.check(out)
            tail_head = candidate_head
            break
        if tail_head is None:
            if last_error is not None:
                raise _decode_error(path, last_error, consumed + opener)
            raise InputError(
                f"{path} is truncated: it ends inside traceEvents after {out.events:,} events "
                f"(the closing ']' is missing); copy or export the file again"
            )
        return _loaded(path, reader, out, head, tail_head)
    finally:
        reader.close()


def _decode_complete_pieces(path: Path, buf: bytearray, opener: int, consumed: int,
                            out: TraceEvents, guard: _MemoryGuard, first: bool = False) -> int:
    """Decode the events after buf[opener] up to the last boundary (with `first`, up to the
    first boundary past FIRST_PIECE_BYTES); returns the new opener."""
    if first:
        candidates = list(islice(_BOUNDARY.finditer(buf, opener + 1 + FIRST_PIECE_BYTES), BOUNDARY_TRIES))
    else:
        candidates = list(_BOUNDARY.finditer(buf, max(opener + 1, len(buf) - BOUNDARY_WINDOW)))
        candidates = candidates[::-1][:BOUNDARY_TRIES]
    last_error: Exception | None = None
    for m in candidates:
        try:
            chunk = _decode_in_place(buf, opener, m.start() + 1)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            last_error = exc
            continue
        out.merge(chunk)
        guard.check(out)
        return m.end() - 2  # the separator byte before the next event's `{`
    if last_error is not None and len(buf) - opener > 4 * CHUNK_BYTES:
        # no candidate decodes even with plenty of data: the JSON itself is broken
        raise _decode_error(path, last_error, consumed + opener)
    return opener  # no boundary yet (one event longer than the window): read on


def _decode_last(buf: bytearray, opener: int, closer: int) -> TraceEvents:
    """The events between buf[opener] and buf[closer] (the array's end). The trace's closing
    instants have no `cat`: decode the few events after the last boundary on their own (a
    wrong end candidate fails there, cheaply), then the bulk typed."""
    last = None
    for last in _BOUNDARY.finditer(buf, max(opener + 1, closer - BOUNDARY_WINDOW), closer):
        pass
    if last is None:
        return _decode_in_place(buf, opener, closer)
    tail = _decode_in_place(buf, last.end() - 2, closer)
    bulk = _decode_in_place(buf, opener, last.start() + 1)
    bulk.merge(tail)
    return bulk


def _loaded(path: Path, reader: _Reader, out: TraceEvents, head: TraceHead, tail: TraceHead | None) -> LoadedTrace:
    tail = tail or TraceHead()
    props = head.deviceProperties if head.deviceProperties is not None else tail.deviceProperties
    return LoadedTrace(
        path=path,
        events=out,
        device_properties=list(props or []),
        distributed=head.distributedInfo or tail.distributedInfo,
        base_time_ns=head.baseTimeNanoseconds or tail.baseTimeNanoseconds,
        bytes_read=reader.offset,
        compressed=reader.compressed,
        has_device_properties_key=props is not None,
    )
