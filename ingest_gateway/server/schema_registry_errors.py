"""The Schema Registry's refusals, in Confluent's terms: an HTTP status and an
``error_code`` (40401 subject not found, 40402 version not found, 40403 schema not
found, 409 incompatible, 42201 invalid schema, 42202 invalid version, 42203 invalid
compatibility level, 42204 invalid mode, 42205 operation not permitted, 42206 reference
exists, 42208 invalid subject, ...), and the checks of a request's subject and version."""

from __future__ import annotations

import re
from collections.abc import Callable

from conf.errors import SparklogError

#: longest subject name accepted (Confluent has none; this keeps the one subjects
#: document from carrying a pasted file)
MAX_SUBJECT = 1000
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class RegistryError(SparklogError):
    """A refusal in Confluent's terms: ``status`` (HTTP) and ``error_code``."""

    code = "schema_registry"
    status = 500
    error_code = 50001

    def __init__(self, message: str, *, status: int | None = None, error_code: int | None = None):
        super().__init__(message)
        if status is not None:
            self.status = status
        if error_code is not None:
            self.error_code = error_code


def _error(status: int, error_code: int) -> Callable[[str], RegistryError]:
    return lambda message: RegistryError(message, status=status, error_code=error_code)


subject_not_found = lambda s: _error(404, 40401)(f"Subject '{s}' not found.")  # noqa: E731
version_not_found = lambda v: _error(404, 40402)(f"Version {v} not found.")  # noqa: E731
schema_not_found = _error(404, 40403)
subject_soft_deleted = _error(404, 40404)
subject_not_soft_deleted = _error(404, 40405)
version_soft_deleted = _error(404, 40406)
version_not_soft_deleted = _error(404, 40407)
no_subject_level = _error(404, 40408)
incompatible = _error(409, 409)
invalid_schema = _error(422, 42201)
invalid_version = _error(422, 42202)
invalid_level = _error(422, 42203)
invalid_mode = _error(422, 42204)
operation_not_permitted = _error(422, 42205)
reference_exists = _error(422, 42206)
invalid_subject = _error(422, 42208)
unprocessable = _error(422, 422)


def check_subject(subject: str) -> str:
    """``subject`` if acceptable, else raises 42208."""
    if not subject or len(subject) > MAX_SUBJECT or _CONTROL.search(subject):
        raise invalid_subject(f"Invalid subject {subject[:60]!r}: 1 to {MAX_SUBJECT} "
                              "characters, no control characters")
    return subject


def parse_version(version: str | int) -> int:
    """A version as a number; ``latest`` and -1 are -1. Raises 42202."""
    if version == "latest":
        return -1
    try:
        number = int(version)
    except (TypeError, ValueError):
        number = 0
    if number == -1 or 1 <= number <= 2**31 - 1:
        return number
    raise invalid_version("The specified version '" + str(version)[:40] + "' is not a valid "
                          "version id. Allowed values are between [1, 2^31-1] and the string "
                          "\"latest\"")
