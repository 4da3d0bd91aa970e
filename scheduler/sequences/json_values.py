"""Dataclass values (a sequence's request, its sampling parameters, its events) to JSON values and back, from
their fields' type hints, so a field added to SamplingParams crosses processes without a change here.

JSON has no tuples and only string object keys: decoding rebuilds tuples, and dict keys of their declared type
(a logit bias keyed by token id). Anything that does not fit its field's type, and any field the dataclass does
not have (a newer gateway's parameter this worker would silently ignore), raises ValueError naming it.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, Union

_SCALARS = (bool, int, float, str)


def to_json(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if value is None or isinstance(value, _SCALARS):
        return value
    raise TypeError(f"{type(value).__name__} has no JSON form here")


def from_json(kind: Any, value: Any, where: str = "value") -> Any:
    """`value` (parsed JSON) as the type `kind`; ValueError naming `where` when it does not fit."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for option in (a for a in args if a is not type(None)):
            try:
                return from_json(option, value, where)
            except ValueError:
                continue
        raise ValueError(f"{where}: {value!r:.60} is none of {kind}")
    if dataclasses.is_dataclass(kind):
        return _dataclass(kind, value, where)
    if origin is tuple:
        _expect(value, list, where)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_json(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
        if len(args) != len(value):
            raise ValueError(f"{where}: {len(value)} items where {len(args)} are expected")
        return tuple(from_json(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True)))
    if origin is list:
        _expect(value, list, where)
        return [from_json(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        _expect(value, dict, where)
        return {_key(args[0], k, where): from_json(args[1], v, f"{where}[{k}]") for k, v in value.items()}
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind in _SCALARS:
        if type(value) is not kind:
            raise ValueError(f"{where}: {value!r:.60} is not a {kind.__name__}")
        return value
    raise ValueError(f"{where}: no JSON form for {kind}")


@functools.cache
def _fields_of(kind: type) -> tuple[dict[str, Any], frozenset[str]]:
    """A dataclass's resolved type hints and the names its constructor takes. Resolving the hints evaluates the
    annotations' strings (`from __future__ import annotations`): once per class, not per value, since a gateway
    decodes a token's event per token of every stream it relays."""
    return typing.get_type_hints(kind), frozenset(f.name for f in dataclasses.fields(kind) if f.init)


def _dataclass(kind: type, value: Any, where: str) -> Any:
    _expect(value, dict, where)
    hints, names = _fields_of(kind)
    unknown = sorted(set(value) - names)
    if unknown:
        raise ValueError(f"{where}: {kind.__name__} has no field {unknown[0]!r}")
    fields = {n: from_json(hints[n], v, f"{where}.{n}") for n, v in value.items()}
    try:
        return kind(**fields)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: {e}") from None


def _key(kind: Any, key: str, where: str) -> Any:
    if kind is int:
        try:
            return int(key)
        except ValueError:
            raise ValueError(f"{where}: key {key!r:.40} is not an int") from None
    return from_json(kind, key, where)


def _expect(value: Any, kind: type, where: str) -> None:
    if not isinstance(value, kind):
        raise ValueError(f"{where}: {value!r:.60} is not a JSON {'array' if kind is list else 'object'}")
