"""JSON Schema validation whose regular expressions run in linear time (Google's RE2).

``jsonschema`` applies a schema's ``pattern``, ``patternProperties`` (and, through them,
``additionalProperties``) with Python's backtracking ``re``: a schema registered by one
client (``{"pattern": "^(a+)+$"}``) and a value sent by another (40 ``a`` and a ``!``)
would hold a gateway thread, and the GIL, for minutes. :func:`linear_validator` gives
the validator class of a schema with those three keywords re-implemented over RE2
(``google-re2``, already the gateway's for KIP-848 subscription patterns), as the same
keywords of ``jsonschema`` otherwise behave. A pattern RE2 cannot run (backreferences,
lookaround: ECMA-262 features with no linear-time algorithm) raises
:class:`UnsupportedPattern` when the validator meets it.
"""

from __future__ import annotations

import functools
from typing import Any

import re2
from jsonschema import ValidationError, validators


class UnsupportedPattern(ValueError):
    """A schema's regular expression that RE2 cannot run (the message names it)."""


_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a client's bad pattern is answered, not logged by RE2


@functools.lru_cache(maxsize=1024)
def _compiled(pattern: str) -> Any:
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as e:
        raise UnsupportedPattern(f"the pattern {pattern[:80]!r} cannot be run in linear time "
                                 f"(RE2: {e}); backreferences and lookaround are not "
                                 "supported") from None


def _search(pattern: str, text: str) -> bool:
    return _compiled(pattern).search(text) is not None


def _pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Any:
    if validator.is_type(instance, "string") and not _search(patrn, instance):
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Any:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for k, v in instance.items():
            if _search(pattern, k):
                yield from validator.descend(v, subschema, path=k, schema_path=pattern)


def _extras(instance: Any, schema: Any) -> list[str]:
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    return [p for p in instance
            if p not in properties and not any(_search(x, p) for x in patterns)]


def _additional_properties(validator: Any, ap: Any, instance: Any, schema: Any) -> Any:
    if not validator.is_type(instance, "object"):
        return
    extras = _extras(instance, schema)
    if validator.is_type(ap, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], ap, path=extra)
    elif not ap and extras:
        yield ValidationError("Additional properties are not allowed ("
                              + ", ".join(repr(e) for e in sorted(extras)[:20])
                              + (" was" if len(extras) == 1 else " were") + " unexpected)")


_LINEAR = {"pattern": _pattern, "patternProperties": _pattern_properties,
           "additionalProperties": _additional_properties}


@functools.lru_cache(maxsize=16)
def linear_validator(cls: Any) -> Any:
    """``cls`` (a ``jsonschema`` validator class) with RE2 for its regular expressions."""
    return validators.extend(cls, _LINEAR)
