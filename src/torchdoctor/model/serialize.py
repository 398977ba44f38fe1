"""(De)serialization of the dataclasses passed between pipeline stages, through msgspec.

Everything a run or report stores is a tree of dataclasses, lists, dicts and scalars. Writing:
msgspec encodes it (NaN and infinities become null, so the file stays valid JSON). Reading
treats the file as untrusted (model/untrusted.py): a regular file of bounded size, decoded
without recursing into Python (a nesting deeper than Python's limit is refused, not a
crash), every string, list and nesting level bounded, then converted into the typed model
with the field's path in every error (`$.steps[3].start`) and the model's constraints on
values (a negative duration is refused). A value of the wrong shape raises `SchemaError`
naming the file and the field, never an arbitrary exception, and never executes input.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePath
from typing import Any, Callable, TypeVar

import msgspec

from torchdoctor.errors import InputError
from torchdoctor.model.untrusted import MAX_DEPTH, MAX_LIST_ITEMS, MAX_STRING_CHARS, read_untrusted

T = TypeVar("T")


class SchemaError(ValueError):
    """A stored document does not have the shape its schema describes."""


def _encode_other(obj: Any) -> Any:
    """What msgspec does not encode by itself: subclasses of the scalars (torch.__version__ is a
    str, numpy's float64 a float), paths."""
    for base in (bool, int, float, str):
        if isinstance(obj, base):
            return base(obj)
    if isinstance(obj, PurePath):
        return str(obj)
    raise TypeError(f"cannot store a {type(obj).__name__} in a torchdoctor document")


_ENCODER = msgspec.json.Encoder(enc_hook=_encode_other)
_DECODER = msgspec.json.Decoder()


def dumps(obj: Any) -> str:
    """The one JSON text of a stored or printed document: indented, NaN and infinities as null."""
    return msgspec.json.format(_ENCODER.encode(obj), indent=2).decode("utf-8") + "\n"


def to_plain(obj: Any) -> Any:
    """Dicts, lists and scalars, as the JSON file holds them."""
    return _DECODER.decode(_ENCODER.encode(obj))


def from_plain(cls: type[T], data: Any) -> T:
    """`data` (dicts, lists, scalars) as `cls`; SchemaError naming the field otherwise."""
    try:
        return msgspec.convert(data, cls)
    except msgspec.ValidationError as exc:
        raise SchemaError(_where_first(str(exc))) from None


def write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(dumps(obj), encoding="utf-8")
    tmp.replace(path)


def read_json(path: Path, cls: type[T], expected_schema: int, oldest: int | None = None,
              check: Callable[[T], str | None] | None = None) -> T:
    """Load `path` as `cls`; every failure becomes a one-line error naming the file and the
    field (SchemaError; InputError for what is not a regular file or too large). `check`
    returns what is wrong with a loaded document that the types cannot say (None: nothing)."""
    data = decode_untrusted(path)
    if not isinstance(data, dict):
        raise SchemaError(f"{path} is not a torchdoctor document (top level is not an object)")
    version = data.get("schema_version")
    readable = range(oldest if oldest is not None else expected_schema, expected_schema + 1)
    if not isinstance(version, int) or isinstance(version, bool) or version not in readable:
        shown = repr(version) if isinstance(version, (int, float, type(None))) else f"of type {type(version).__name__}"
        raise SchemaError(
            f"{path} has schema_version {shown}; this torchdoctor reads "
            f"{readable.start}..{expected_schema}: re-run with a matching torchdoctor version"
        )
    try:
        document = from_plain(cls, data)
    except SchemaError as exc:
        raise SchemaError(f"{path} is malformed: {exc}") from None
    problem = check(document) if check is not None else None
    if problem:
        raise SchemaError(f"{path} is malformed: {problem}")
    return document


def decode_untrusted(path: Path) -> Any:
    """A bounded JSON file's content as dicts, lists and scalars, every bound checked."""
    try:
        raw = read_untrusted(path)
    except InputError as exc:  # missing, not a regular file, too large: one kind of error for the callers
        raise SchemaError(str(exc)) from None
    try:
        data = _DECODER.decode(raw)
    except RecursionError:
        raise SchemaError(f"{path} is nested deeper than a torchdoctor document can be ({MAX_DEPTH} levels)") from None
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:  # "Number out of range": 1e999
        raise SchemaError(f"{path} is not valid JSON ({_where_first(str(exc))}{_near(raw, str(exc))})") from None
    problem = bounds_problem(data)
    if problem:
        raise SchemaError(f"{path} is not a torchdoctor document: {problem}")
    return data


def bounds_problem(data: Any) -> str | None:
    """What makes decoded JSON larger than any torchdoctor document (None: nothing): a string
    over MAX_STRING_CHARS, a list over MAX_LIST_ITEMS, nesting over MAX_DEPTH. Iterative, so a
    deep document cannot exhaust the stack."""
    stack: list[tuple[Any, str, int]] = [(data, "$", 0)]
    while stack:
        value, where, depth = stack.pop()
        if isinstance(value, str):
            if len(value) > MAX_STRING_CHARS:
                return f"{where} is a string of {len(value):,} characters (at most {MAX_STRING_CHARS:,})"
        elif isinstance(value, dict):
            if depth >= MAX_DEPTH:
                return f"{where} is nested {depth} levels deep (at most {MAX_DEPTH})"
            if len(value) > MAX_LIST_ITEMS:
                return f"{where} has {len(value):,} keys (at most {MAX_LIST_ITEMS:,})"
            for key, item in value.items():
                if len(key) > MAX_STRING_CHARS:
                    return f"{where} has a key of {len(key):,} characters"
                if isinstance(item, (str, dict, list)):
                    stack.append((item, f"{where}.{_short(key)}", depth + 1))
        elif isinstance(value, list):
            if depth >= MAX_DEPTH:
                return f"{where} is nested {depth} levels deep (at most {MAX_DEPTH})"
            if len(value) > MAX_LIST_ITEMS:
                return f"{where} has {len(value):,} items (at most {MAX_LIST_ITEMS:,})"
            stack.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value)
                         if isinstance(item, (str, dict, list)))
    return None


_BYTE = re.compile(r"\(byte (\d+)\)")
_KEY_BEFORE = re.compile(rb'"([^"\\]{1,80})"\s*:[^"]*$')


def _near(raw: bytes, message: str) -> str:
    """Where a syntax error is, for a reader: the key it follows, and what a NaN or an infinity is."""
    m = _BYTE.search(message)
    if m is None:
        return ""
    at = int(m.group(1))
    token = raw[at:at + 9]
    what = "; NaN and Infinity are not JSON numbers" if token.lstrip(b"-").startswith((b"NaN", b"Infinity")) else ""
    key = _KEY_BEFORE.search(raw[max(0, at - 200):at])
    return (f", at the value of \"{key.group(1).decode('utf-8', 'replace')}\"" if key else "") + what


def _short(key: str) -> str:
    return key if len(key) <= 40 else key[:37] + "..."


def _where_first(message: str) -> str:
    """msgspec's "Expected `float`, got `str` - at `$.steps[3].end`" as "$.steps[3].end: expected
    `float`, got `str`": the field first, as every other message of ours names it."""
    text, sep, where = message.rpartition(" - at ")
    if not sep:
        return message
    where = where.strip("`")
    return f"{where}: {text[:1].lower()}{text[1:]}"
