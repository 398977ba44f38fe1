"""Plain-data (de)serialization for the dataclasses passed between pipeline stages.

Everything a run or report stores is a tree of dataclasses, lists, dicts and scalars, so
one pair of functions covers it. Reading is strict: a value of the wrong shape raises
`SchemaError` naming the field, never an arbitrary exception and never executing input.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class SchemaError(ValueError):
    """A stored document does not have the shape its schema describes."""


def to_plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, float) and (obj != obj or obj in (float("inf"), float("-inf"))):
        return None  # NaN and infinities are not valid JSON
    return obj


def from_plain(cls: type[T], data: Any, where: str = "$") -> T:
    return _convert(cls, data, where)


def _convert(tp: Any, data: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return data
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if data is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(option, data, where)
            except SchemaError as exc:
                errors.append(str(exc))
        raise SchemaError(errors[0] if errors else f"{where}: unexpected null")
    if origin is list:
        (item_tp,) = typing.get_args(tp) or (Any,)
        if not isinstance(data, list):
            raise SchemaError(f"{where}: expected a list, got {type(data).__name__}")
        return [_convert(item_tp, v, f"{where}[{i}]") for i, v in enumerate(data)]
    if origin is tuple:  # fixed length only (written as a JSON list)
        item_tps = typing.get_args(tp)
        if not isinstance(data, list) or len(data) != len(item_tps):
            raise SchemaError(f"{where}: expected a list of {len(item_tps)} items")
        return tuple(_convert(t, v, f"{where}[{i}]") for i, (t, v) in enumerate(zip(item_tps, data)))
    if origin is dict:
        _, val_tp = typing.get_args(tp) or (str, Any)
        if not isinstance(data, dict):
            raise SchemaError(f"{where}: expected an object, got {type(data).__name__}")
        return {str(k): _convert(val_tp, v, f"{where}.{k}") for k, v in data.items()}
    if dataclasses.is_dataclass(tp):
        if not isinstance(data, dict):
            raise SchemaError(f"{where}: expected an object, got {type(data).__name__}")
        hints = typing.get_type_hints(tp)
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name in data:
                kwargs[f.name] = _convert(hints[f.name], data[f.name], f"{where}.{f.name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise SchemaError(f"{where}: missing field '{f.name}'")
        return tp(**kwargs)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(data)
        except ValueError:
            raise SchemaError(f"{where}: {data!r} is not one of {[m.value for m in tp]}") from None
    if tp is float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise SchemaError(f"{where}: expected a number, got {type(data).__name__}")
        return float(data)
    if tp in (int, str, bool):
        if not isinstance(data, tp) or (tp is int and isinstance(data, bool)):
            raise SchemaError(f"{where}: expected {tp.__name__}, got {type(data).__name__}")
        return data
    raise SchemaError(f"{where}: unsupported type {tp!r}")


def write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(to_plain(obj), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def read_json(path: Path, cls: type[T], expected_schema: int, oldest: int | None = None) -> T:
    """Load `path` as `cls`; every failure becomes a `SchemaError` with a fix hint."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SchemaError(f"{path} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SchemaError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise SchemaError(f"{path} is not a torchdoctor document (top level is not an object)")
    version = data.get("schema_version")
    readable = range(oldest if oldest is not None else expected_schema, expected_schema + 1)
    if not isinstance(version, int) or version not in readable:
        raise SchemaError(
            f"{path} has schema_version {version!r}; this torchdoctor reads "
            f"{readable.start}..{expected_schema}: re-run with a matching torchdoctor version"
        )
    try:
        return from_plain(cls, data)
    except SchemaError as exc:
        raise SchemaError(f"{path} is malformed: {exc}") from None
