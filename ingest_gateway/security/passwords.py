"""The password file of HTTP Basic authentication (``authentication.password.file``).

Format: UTF-8 text, one user a line::

    # comments and blank lines are kept as they are
    alice:$argon2id$v=19$m=65536,t=3,p=4$<salt, base64>$<hash, base64>

A name is 1 to 128 characters of ``A-Z a-z 0-9 . _ - @ +``, starting with a letter or
a digit (never ``:``, which RFC 7617 reserves, nor spaces or controls); it is the
user of the principal ``User:<name>``. The hash is argon2id (argon2-cffi's
``PasswordHasher`` defaults, salted per user, ~50 ms to check on purpose), so a
stolen file gives up no password cheaply. Nothing else is in the file.

Writes (:func:`add`, :func:`remove`) are invisible until complete: the new text is
written to a temporary file beside it (mode 0600), fsynced and renamed over the
old one, under an exclusive lock on ``<file>.lock`` so two writers do not lose each
other's change. A gateway reading it sees the old file or the new one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
from collections.abc import Iterator

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from conf.errors import ConfigError

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+\-]{0,127}")
#: the setting a malformed file is reported under
KEY = "authentication.password.file"
_HASHER = PasswordHasher()


def validate_name(name: str) -> str:
    """``name`` if it is a valid user name (module doc), else ValueError saying why."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(f"a user name is 1 to 128 of A-Z a-z 0-9 . _ - @ +, starting with "
                         f"a letter or digit, not {str(name)[:200]!r}")
    return name


def hash_password(password: str) -> str:
    """A new salted argon2id hash of ``password``; ValueError for an empty one."""
    if not password:
        raise ValueError("a password cannot be empty")
    return _HASHER.hash(password)


def verify(hashed: str, password: str) -> bool:
    """Whether ``password`` matches ``hashed`` (~50 ms); False for a malformed hash."""
    try:
        return _HASHER.verify(hashed, password)
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False


def parse(text: str, path: str = "") -> dict[str, str]:
    """name -> hash of a password file's text. Raises ConfigError naming the file and
    the line number (never the line: it holds a hash) of a malformed line or a name
    given twice."""
    users: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, hashed = line.partition(":")
        if not sep or not NAME.fullmatch(name) or not hashed.startswith("$argon2"):
            raise ConfigError(KEY, path, f"line {number} is not name:$argon2id$... "
                                         "(write it with sparklog passwords add)")
        if name in users:
            raise ConfigError(KEY, path, f"line {number} names {name!r} again")
        users[name] = hashed
    return users


def read(path: str) -> dict[str, str]:
    """name -> hash from the file at ``path``. Raises ConfigError as :func:`parse`,
    OSError if it cannot be read (FileNotFoundError if it does not exist)."""
    with open(path, encoding="utf-8", errors="strict") as f:
        try:
            return parse(f.read(), path)
        except UnicodeDecodeError:
            raise ConfigError(KEY, path, "not UTF-8 text") from None


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    """An exclusive lock on ``<path>.lock`` (writers of one file take turns)."""
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return []
    parse(text, path)  # never rewrite a file we do not understand
    return text.splitlines()


def _replace(path: str, lines: list[str]) -> None:
    """Write ``lines`` as the file at ``path`` in one atomic step (module doc)."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".passwords-", dir=folder)  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def add(path: str, name: str, password: str) -> bool:
    """Set ``name``'s password (a new salted hash); True if the user is new, False if
    the password was replaced. Raises ValueError for a bad name or an empty password,
    ConfigError for a malformed existing file, OSError if it cannot be written."""
    validate_name(name)
    entry = f"{name}:{hash_password(password)}"
    with _locked(path):
        lines = _lines(path)
        for i, line in enumerate(lines):
            if line.strip().partition(":")[0] == name and not line.lstrip().startswith("#"):
                lines[i] = entry
                _replace(path, lines)
                return False
        _replace(path, [*lines, entry])
        return True


def remove(path: str, name: str) -> bool:
    """Remove ``name``; False if it was not there (the file is then left alone).
    Raises ConfigError for a malformed file, OSError if it cannot be written."""
    with _locked(path):
        lines = _lines(path)
        kept = [line for line in lines if line.lstrip().startswith("#")
                or line.strip().partition(":")[0] != name]
        if len(kept) == len(lines):
            return False
        _replace(path, kept)
        return True
