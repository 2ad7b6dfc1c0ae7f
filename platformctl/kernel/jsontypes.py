"""JSON as the stores keep it and the commands print it: one precise type for the edges where a typed record turns
into JSON (``to_dict``) and back (``from_dict``), and the few reads that narrow a value read back.

``JSONValue`` is what ``json.loads`` gives and what ``json.dumps`` writes from this project. Its containers are the
read-only ``Sequence`` and ``Mapping``, so that a record's ``list[str]`` or ``dict[str, dict[str, str]]`` is JSON as it
is, without a copy; a record built for writing is a ``JSONObject`` (a ``dict``, which its caller may add keys to), one
read back a ``JSONMapping``. The readers below narrow a value read back to what a record holds, reading it as the
records always have (``float(...)``, a missing key as its empty value): a store's JSON is this project's own, so a
value of another type is a bug, not a user's mistake, and raises as ``float`` and ``int`` do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

JSONScalar = str | int | float | bool | None
JSONValue = JSONScalar | Sequence["JSONValue"] | Mapping[str, "JSONValue"]
JSONMapping = Mapping[str, JSONValue]  # an object read back: a store's record, a ledger entry's inputs
JSONObject = dict[str, JSONValue]  # an object built: a record's ``to_dict``


def mapping(value: JSONValue) -> JSONMapping:
    """``value`` when it is an object, else an empty one (a key an older version did not write, or null)."""
    if isinstance(value, dict):  # what json.loads makes: asked first, as it is much quicker to ask than Mapping
        return value
    return value if isinstance(value, Mapping) else {}


def array(value: JSONValue) -> Sequence[JSONValue]:
    """The items of ``value`` when it is an array, else none."""
    if isinstance(value, list):  # what json.loads makes
        return value
    return value if isinstance(value, Sequence) and not isinstance(value, str) else ()


def strings(value: JSONValue) -> list[str]:
    """The items of an array of strings (none when it is not an array)."""
    return [str(item) for item in array(value)]


def optional_str(value: JSONValue) -> str | None:
    """A string, or None for null."""
    return None if value is None else value if isinstance(value, str) else str(value)


def number(value: JSONValue) -> float:
    """A number as the JSON holds it (JSON's ``5`` stays the int 5, ``5.0`` the float); a numeric string as a float."""
    if isinstance(value, int | float):
        return value
    if isinstance(value, str):
        return float(value)
    raise TypeError(f"not a number: {value!r}")


def optional_number(value: JSONValue) -> float | None:
    """A number as the JSON holds it, or None for null."""
    return None if value is None else number(value)


def to_float(value: JSONValue) -> float:
    """``float(value)``: a number, or a numeric string."""
    return float(number(value))


def optional_float(value: JSONValue) -> float | None:
    """``float(value)``, or None for null."""
    return None if value is None else to_float(value)


def to_int(value: JSONValue) -> int:
    """``int(value)``: a number (a float's whole part), or a string of digits."""
    if isinstance(value, str):
        return int(value)
    return int(number(value))
