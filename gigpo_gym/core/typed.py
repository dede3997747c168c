"""The one type checker of the package's dataclasses: configs, leaderboard specs, algorithm settings.

``check_fields(obj)`` checks every field of a dataclass instance against its annotation
(``bool``, ``int``, ``float`` (finite), ``str``, ``Literal[...]``, ``list[X]``,
``dict[K, V]``, ``X | None``, ``Any``, nested dataclasses) and normalises numbers
(numpy scalars, an int where a float is wanted); a dataclass calls it first thing in
its ``__post_init__``, so a wrong value fails where the object is made, however it is
made.  ``from_mapping(cls, data)`` builds a dataclass from plain mappings (YAML, JSON):
an unknown key is refused with its closest match, nested mappings become the nested
dataclasses, and any error comes back with the key path in front.

Errors: ``FieldTypeError`` (a ``TypeError``) for a value of the wrong type,
``FieldError`` (a ``ValueError``) for a wrong value; messages start with the field's name.

>>> from dataclasses import dataclass
>>> from typing import Literal
>>> @dataclass
... class Point:
...     x: int
...     unit: Literal["m", "km"] = "m"
...     def __post_init__(self):
...         check_fields(self)
>>> from_mapping(Point, {"x": 1})
Point(x=1, unit='m')
>>> from_mapping(Point, {"x": 1, "unit": "kms"}, prefix="point.")
Traceback (most recent call last):
...
gigpo_gym.core.typed.FieldError: point.unit must be one of ['m', 'km'], got 'kms' (did you mean 'km'?)
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from typing import Any, Literal

import numpy as np


class FieldError(ValueError):
    """A field's value is wrong (out of range, not one of the choices, an unknown key)."""


class FieldTypeError(TypeError):
    """A field's value has the wrong type."""


def check_fields(obj: Any, prefix: str = "") -> None:
    """Check (and normalise in place) every field of the dataclass instance ``obj``; see the module docstring."""
    try:
        hints = typing.get_type_hints(type(obj))
    except (NameError, TypeError):  # an annotation that cannot be resolved: check the plain ones only
        plain = {"float": float, "int": int, "bool": bool, "str": str}
        hints = {f.name: plain.get(f.type, Any) if isinstance(f.type, str) else f.type for f in dataclasses.fields(obj)}
    for f in dataclasses.fields(obj):
        if not f.init:
            continue
        value = getattr(obj, f.name)
        checked = check_value(value, hints.get(f.name, Any), prefix + f.name)
        if checked is not value:
            object.__setattr__(obj, f.name, checked)  # frozen dataclasses too


def check_value(value: Any, hint: Any, where: str) -> Any:
    """``value`` as the annotation ``hint`` wants it; an error naming ``where`` if it is not one."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or hint is None:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors: list[Exception] = []
        for option in args:
            if option is not type(None):
                try:
                    return check_value(value, option, where)
                except (FieldError, FieldTypeError) as e:
                    errors.append(e)
        raise errors[0] if errors else FieldTypeError(f"{where}: bad value {value!r}")
    if origin is Literal:
        if value not in args:
            close = difflib.get_close_matches(str(value), [str(a) for a in args], n=1)
            hint_text = f" (did you mean {close[0]!r}?)" if close else ""
            raise FieldError(f"{where} must be one of {list(args)}, got {value!r}{hint_text}")
        return value
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, hint):
            raise FieldTypeError(f"{where} must be a {hint.__name__} (a mapping of its keys), got {value!r}")
        return value
    if hint is bool:
        if not isinstance(value, (bool, np.bool_)):
            raise FieldTypeError(f"{where} must be a bool, got {value!r}")
        return bool(value)
    if hint is int:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise FieldTypeError(f"{where} must be an integer, got {value!r}")
        return int(value)
    if hint is float:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise FieldTypeError(f"{where} must be a number, got {value!r}")
        if not math.isfinite(value):
            raise FieldError(f"{where} must be finite, got {value!r}")
        return value if type(value) is float else float(value)
    if hint is str:
        if not isinstance(value, str):
            raise FieldTypeError(f"{where} must be a string, got {value!r}")
        return value
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise FieldTypeError(f"{where} must be a mapping, got {value!r}")
        if len(args) == 2:
            return {check_value(k, args[0], f"{where} key"): check_value(v, args[1], f"{where}[{k!r}]")
                    for k, v in value.items()}
        return value
    if origin in (list, tuple) or hint in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise FieldTypeError(f"{where} must be a list, got {value!r}")
        item = args[0] if args else Any
        items = [check_value(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
        wanted = tuple if (origin or hint) is tuple else list
        return value if type(value) is wanted and all(a is b for a, b in zip(items, value)) else wanted(items)
    return value


def from_mapping(cls: type, data: Any, prefix: str = "", what: str = "key") -> Any:
    """A ``cls`` built from the mapping ``data`` (see the module docstring); any error is a ``FieldError``.

    ``prefix`` is the key path of ``data`` ("optim.") put in front of every key an error
    names; ``what`` names a key in the unknown-key error ("config key", "spec key").
    """
    if not isinstance(data, dict):
        raise FieldError(f"{prefix.rstrip('.') or 'it'} must be a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.init]
    names = [f.name for f in fields]
    for key in data:
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f" (did you mean '{prefix}{close[0]}'?)" if close else ""
            raise FieldError(f"unknown {what} '{prefix}{key}'{hint}; {prefix or 'top level'} keys: {names}")
    for f in fields:
        if f.name not in data and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise FieldError(f"the {what} '{prefix}{f.name}' is missing")
    kwargs = {}
    for key, value in data.items():
        section = _dataclass_of(hints[key])
        kwargs[key] = from_mapping(section, value, f"{prefix}{key}.", what) if section and isinstance(value, dict) else value
    try:  # (nested sections were built above: their errors carry their own key path)
        return cls(**kwargs)
    except (ValueError, TypeError) as e:  # the class's own rule: its message starts with the field it is about
        raise FieldError(f"{prefix}{e}") from None


def _dataclass_of(hint: Any) -> type | None:
    """The dataclass a field holds (``X`` or ``X | None``), else None."""
    if dataclasses.is_dataclass(hint):
        return hint
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        found = [a for a in typing.get_args(hint) if dataclasses.is_dataclass(a)]
        return found[0] if len(found) == 1 else None
    return None
