"""JSON (de)serialization for the small typed records that travel between stages.

Every interface between the orchestrator, the workers, the rules and the experience store is a
dataclass deriving from `JsonRecord`; Celery messages and files on disk carry `to_json()` output.
"""
from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any, TypeVar

T = TypeVar("T", bound="JsonRecord")


def _decode(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        return _decode(options[0], value) if len(options) == 1 else value
    if origin in (list, tuple):
        (item_tp, *_) = typing.get_args(tp) or (Any,)
        return [_decode(item_tp, v) for v in value]
    if origin is dict:
        _, val_tp = typing.get_args(tp) or (Any, Any)
        return {k: _decode(val_tp, v) for k, v in value.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return tp.from_dict(value)
    return value


_SCALARS = {bool: (bool,), int: (int,), float: (int, float), str: (str,)}


def _type_errors(tp: Any, value: Any, where: str) -> list[str]:
    """Where decoded JSON `value` is not of type `tp`, one line each."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(tp):
            return []
        tries = [_type_errors(option, value, where) for option in typing.get_args(tp) if option is not type(None)]
        return [] if any(not t for t in tries) else tries[0]
    if origin in (list, tuple):
        if not isinstance(value, list):
            return [f"{where}: expected a list, not {value!r}"]
        (item_tp, *_) = typing.get_args(tp) or (Any,)
        return [e for i, v in enumerate(value) for e in _type_errors(item_tp, v, f"{where}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: expected an object, not {value!r}"]
        _, val_tp = typing.get_args(tp) or (Any, Any)
        return [e for k, v in value.items() for e in _type_errors(val_tp, v, f"{where}.{k}")]
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            return [f"{where}: expected an object with fields {[f.name for f in dataclasses.fields(tp)]}, not {value!r}"]
        hints, fields = typing.get_type_hints(tp), dataclasses.fields(tp)
        missing = [f.name for f in fields if f.name not in value
                   and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        errors = [f"{where}: missing field {name!r}" for name in missing]
        errors += [f"{where}: unknown field {name!r}" for name in value if name not in hints]
        return errors + [e for k, v in value.items() if k in hints for e in _type_errors(hints[k], v, f"{where}.{k}")]
    if tp in _SCALARS and (isinstance(value, bool) != (tp is bool) or not isinstance(value, _SCALARS[tp])):
        return [f"{where}: expected {tp.__name__}, not {value!r}"]
    return []


class JsonRecord:
    """Mixin for dataclasses: `to_dict`/`from_dict` and `to_json`/`from_json`, nested records included."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[arg-type]

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    @classmethod
    def from_dict(cls: type[T], data: dict[str, Any]) -> T:
        hints = typing.get_type_hints(cls)
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown fields {sorted(unknown)}")
        return cls(**{k: _decode(hints[k], v) for k, v in data.items()})

    @classmethod
    def from_json(cls: type[T], text: str) -> T:
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_user_json(cls: type[T], text: str) -> T:
        """from_json for a file people wrote: ValueError naming each field whose value has the wrong type."""
        data = json.loads(text)
        errors = _type_errors(cls, data, cls.__name__)
        if errors:
            raise ValueError("; ".join(errors))
        return cls.from_dict(data)
