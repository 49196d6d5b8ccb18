"""How every ``sparklog`` command prints and asks: tables at any width, one size format,
ISO timestamps, plurals, times given on the command line, confirmation.

One place, so ``topics describe``, ``groups describe``, ``offsets`` and ``dump-log``
read the same: sizes as ``4.5 MiB`` (binary units, as ``ls -h`` and Kafka UI),
timestamps as ``2026-11-25T20:49:25.123Z`` (UTC, milliseconds), ``1 partition`` /
``2 partitions``.
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Iterable
from typing import TypeVar

from conf.errors import ConfigError, SparklogError

T = TypeVar("T")

#: a pipe has no width: text keeps its natural width there (rich would take 80
#: columns, or $COLUMNS, and wrap or squeeze it)
PIPE_WIDTH = 100_000
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


class NotConfirmed(SparklogError):
    """A destructive command was not confirmed (answered no, or no terminal to ask)."""

    code = "not_confirmed"

    def __init__(self, what: str, reason: str):
        self.what, self.reason = what, reason
        super().__init__(f"{what}: {reason}")


def console(*, stderr: bool = False):
    """A rich Console: the terminal's width on a terminal, unbounded when piped."""
    from rich.console import Console

    c = Console(stderr=stderr, highlight=False)
    if not c.is_terminal:
        c = Console(stderr=stderr, highlight=False, width=PIPE_WIDTH, soft_wrap=True)
    return c


def progress_console():
    """A rich Console on standard error for a spinner around Spark's start, writing to its
    own copy of file descriptor 2: while the JVM starts, ``pipeline.quiet`` points fd 2
    at a filtering pipe, and a Console on ``sys.stderr`` would then see no terminal and
    draw nothing. Falls back to ``sys.stderr`` when it has no descriptor."""
    import os

    from rich.console import Console

    try:
        sys.stderr.flush()
        own = os.fdopen(os.dup(sys.stderr.fileno()), "w", encoding="utf-8", errors="replace")
    except (OSError, ValueError, AttributeError):
        return Console(stderr=True, highlight=False)
    return Console(file=own, highlight=False)


class Table:
    """Columns of text aligned with two spaces, a header line of capitals, no borders and
    no trailing blanks, at whatever width the rows need (Kafka's tools print this way, so
    ``awk '{print $3}'`` works; rich would squeeze it to the terminal or to 80 columns).
    Numbers are right-aligned, columns named in ``left`` left-aligned."""

    def __init__(self, *columns: str, title: str | None = None, left: Iterable[str] = ()):
        self.columns, self.title, self.left = columns, title, set(left)
        self.rows: list[tuple[str, ...]] = []

    def add_row(self, *cells: object) -> None:
        self.rows.append(tuple("-" if c is None else str(c) for c in cells))

    def lines(self) -> list[str]:
        widths = [max(len(r[i]) for r in (self.columns, *self.rows))
                  for i in range(len(self.columns))]
        out = [self.title] if self.title else []
        for row in (self.columns, *self.rows):
            cells = [c.ljust(w) if name in self.left else c.rjust(w)
                     for c, w, name in zip(row, widths, self.columns)]
            out.append("  ".join(cells).rstrip())
        return out

    def print(self, file=None) -> None:
        """Write the table to ``file`` (stdout)."""
        (file or sys.stdout).write("\n".join(self.lines()) + "\n")


def table(*columns: str, title: str | None = None, left: Iterable[str] = ()) -> Table:
    """A :class:`Table` (``Table.print`` writes it)."""
    return Table(*columns, title=title, left=left)


def human_size(n: int | None) -> str:
    """``1536`` -> ``1.5 KiB``; bytes below 1 KiB as ``512 B``; None -> ``-``."""
    if n is None:
        return "-"
    size, unit = float(n), 0
    while abs(size) >= 1024 and unit < len(_UNITS) - 1:
        size, unit = size / 1024, unit + 1
    return f"{int(size)} B" if unit == 0 else f"{size:.1f} {_UNITS[unit]}"


def size(n: int | None, raw: bool = False) -> str:
    """``human_size``, or the exact byte count with ``raw`` (``--bytes``)."""
    return ("-" if n is None else str(n)) if raw else human_size(n)


def iso_ms(ms: int | None) -> str:
    """Milliseconds since the epoch as ISO 8601 in UTC (``...T20:49:25.123Z``); ``-`` for
    None or a negative time (Kafka's -1 = no timestamp)."""
    if ms is None or ms < 0:
        return "-"
    try:
        t = dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)
    except (OverflowError, ValueError, OSError):
        return str(ms)  # past year 9999: the number is all there is to show
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def plural(n: int, word: str, words: str | None = None) -> str:
    """``1 partition``, ``2 partitions`` (``words`` for an irregular plural)."""
    return f"{n:,} {word if n == 1 else words or word + 's'}"


def parse_time_ms(text: str, flag: str) -> int:
    """A time given on the command line as milliseconds since the epoch: a number of ms,
    or an ISO 8601 date-time (``2026-11-25T10:00:00``, ``...Z``, ``...+01:00``; one without
    a zone is UTC). Raises ConfigError naming ``flag`` for anything else or a time before
    1970."""
    text = text.strip()
    if text.isascii() and text.isdigit():
        return int(text)
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(flag, text, "expected milliseconds since the epoch or an ISO 8601 "
                                      "date-time such as 2026-11-25T10:00:00Z") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    ms = int(t.timestamp() * 1000)
    if ms < 0:
        raise ConfigError(flag, text, "is before 1970-01-01T00:00:00Z")
    return ms


def progress(items: Iterable[T], description: str, *, total: int | None = None) -> Iterable[T]:
    """``items``, with a rich progress bar on stderr while they are worked through, when
    stderr is a terminal (nothing is drawn into a pipe or a log)."""
    if not sys.stderr.isatty():
        return items
    from rich.progress import track

    return track(items, description=description, total=total, transient=True,
                 console=console(stderr=True))


def confirm(question: str, *, yes: bool) -> None:
    """Ask ``question [y/N]`` on the terminal before a destructive change; ``yes`` (the
    ``--yes`` flag) skips it. Raises NotConfirmed if the answer is not yes, or if stdin
    is not a terminal (a script must say ``--yes``, it cannot be asked)."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise NotConfirmed(question.rstrip("?"), "refused without a terminal to confirm on; "
                                                 "add --yes to do it")
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        raise NotConfirmed(question.rstrip("?"), "not confirmed, nothing changed")
