"""The root of sparklog's error hierarchy.

Every error sparklog raises on purpose derives from :class:`SparklogError`, so a
caller can catch "anything sparklog refused" in one clause, and each subclass
carries the facts of the failure as attributes (the message reads like a
sentence with the numbers in it). Storage errors live in ``log_layout.errors``;
this module sits at the bottom of the dependency graph so ``conf`` can raise
too.
"""

from __future__ import annotations


class SparklogError(Exception):
    """Base class of every error sparklog raises deliberately."""

    #: machine-readable code, used by the gateway's error responses
    code: str = "sparklog_error"


class ConfigError(SparklogError, ValueError):
    """A configuration value is missing, unknown or out of range.

    Attributes: ``key`` (the config key), ``value`` (as given), ``reason``.
    """

    code = "invalid_config"

    def __init__(self, key: str, value: object, reason: str):
        self.key, self.value, self.reason = key, value, reason
        super().__init__(f"invalid value {value!r} for {key}: {reason}")
