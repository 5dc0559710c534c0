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
