"""Structured logging: structlog on top of the stdlib ``initorch`` logger.

Library code only calls :func:`get_logger` and binds fields (profile, rank,
step).  Each event becomes one stdlib record on the logger named ``initorch``,
so that a host server's ``logging`` configuration captures it with no
initorch-specific setup:

* ``record.getMessage()`` is ``event key=value ...`` (logfmt), so even
  ``logging.basicConfig(format="%(message)s")`` shows every field;
* every field is also a record attribute (``record.step``, ``record.rank``),
  and ``record.event`` is the bare event name, for structured handlers.

Only the CLI calls :func:`configure_logging`, whose handler renders the same
events for people (console) or machines (JSON lines) straight from the
record's :class:`EventMessage`: one record and one rendering per event.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from collections.abc import Mapping, MutableMapping
from types import FrameType
from typing import Any, Literal, TextIO

import structlog

from initorch.printable import printable, printable_json

LOGGER_NAME = "initorch"
LogFormat = Literal["console", "json"]
_HANDLER_MARK = "_initorch_cli_handler"
_STDLIB_KWARGS = ("exc_info", "stack_info", "stacklevel")


# Attributes every LogRecord has; an event field with one of these names would make
# stdlib logging raise ("Attempt to overwrite 'module' in LogRecord").
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message", "asctime"}


_BARE_WORD = re.compile(r"[^\s\"'=\\]+")


def logfmt_value(value: object) -> str:
    """One value as ``key=value`` shows it: plain words bare, other text JSON-quoted
    (so that an event stays on one line), anything else as its ``repr``; control
    characters as escapes either way (a value cannot forge terminal output)."""
    if isinstance(value, str):
        return value if _BARE_WORD.fullmatch(value) and value.isprintable() \
            else printable_json(json.dumps(value, ensure_ascii=False))
    return printable(repr(value))


def logfmt(fields: Mapping[str, Any]) -> str:
    return " ".join(f"{key}={logfmt_value(value)}" for key, value in fields.items())


class EventMessage:
    """The ``msg`` of an initorch record: an event name and its fields.

    ``str()`` renders ``event key=value ...`` (once, on first use), which is what
    ``record.getMessage()`` returns to a host's plain formatter.
    """

    __slots__ = ("_text", "event", "fields")

    def __init__(self, event: str, fields: Mapping[str, Any]) -> None:
        self.event = event
        self.fields = fields
        self._text: str | None = None

    def __str__(self) -> str:
        if self._text is None:
            self._text = f"{self.event} {logfmt(self.fields)}" if self.fields else self.event
        return self._text

    def __repr__(self) -> str:
        return f"EventMessage({self.event!r}, {dict(self.fields)!r})"


def _protect_record_attributes(logger: Any, method: str, event: MutableMapping[str, Any]
                               ) -> MutableMapping[str, Any]:
    """Rename fields that collide with LogRecord attributes (``module`` -> ``module_``)."""
    for key in [k for k in event if k in _RECORD_ATTRIBUTES and k != "event"]:
        event[f"{key}_"] = event.pop(key)
    return event


_STRUCTLOG_DIR = os.path.dirname(structlog.__file__)


def _point_at_caller(logger: Any, method: str, event: MutableMapping[str, Any]
                     ) -> MutableMapping[str, Any]:
    """Make stdlib record the code that logged, not structlog's internals, as the
    source (``%(filename)s:%(lineno)d`` in a host's format)."""
    frame: FrameType | None = sys._getframe(1)
    depth, proxy_depth = 0, -1
    while frame is not None:
        if proxy_depth < 0:
            if frame.f_code.co_name == "_proxy_to_logger":
                proxy_depth = depth  # this frame calls logging.Logger.<method>
        elif not frame.f_code.co_filename.startswith(_STRUCTLOG_DIR):
            event["stacklevel"] = depth - proxy_depth + 1
            break
        frame, depth = frame.f_back, depth + 1
    return event


def _to_record(logger: Any, method: str, event: MutableMapping[str, Any]) -> dict[str, Any]:
    """The arguments of ``logging.Logger.<method>``: an :class:`EventMessage` as the
    message, the fields (and the bare event name) as record attributes."""
    kwargs = {key: event.pop(key) for key in _STDLIB_KWARGS if key in event}
    name = str(event.pop("event"))
    fields = dict(event)
    return {"msg": EventMessage(name, fields), "extra": {**fields, "event": name}, **kwargs}


def get_logger(**fields: Any) -> Any:
    """A structlog logger writing to the stdlib ``initorch`` logger, with ``fields`` bound.

    This wraps a stdlib logger per call instead of configuring structlog
    globally, so embedding initorch never changes the host's structlog setup.
    """
    return structlog.wrap_logger(
        logging.getLogger(LOGGER_NAME),
        wrapper_class=structlog.stdlib.BoundLogger,
        processors=[structlog.stdlib.filter_by_level, _protect_record_attributes,
                    _point_at_caller, _to_record],
    ).bind(**fields)


# -- the CLI's handler --------------------------------------------------------------------------

_COLOURS = {"debug": "\x1b[34m", "info": "\x1b[32m", "warning": "\x1b[33m",
            "error": "\x1b[31m", "critical": "\x1b[1;31m"}
_BOLD, _KEY, _RESET = "\x1b[1m", "\x1b[36m", "\x1b[0m"


class EventFormatter(logging.Formatter):
    """Renders an initorch record as one JSON object or one console line.

    It reads the event and fields from the record's :class:`EventMessage`
    (other records: their message, no fields), so the fields are neither
    scanned out of the record nor rendered twice.
    """

    def __init__(self, fmt: LogFormat, colours: bool = False) -> None:
        super().__init__()
        self._json = fmt == "json"
        self._colours = colours and not self._json
        self._second: tuple[int, str] = (-1, "")

    def timestamp(self, created: float) -> str:
        """ISO 8601 in UTC with microseconds; the date and time of day are formatted
        once per second (strftime is most of the cost of a console line)."""
        second = int(created)
        cached, prefix = self._second
        if cached != second:
            prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = (second, prefix)
        return f"{prefix}.{int((created - second) * 1e6):06d}Z"

    def format(self, record: logging.LogRecord) -> str:
        message = record.msg
        if isinstance(message, EventMessage):
            event, fields = message.event, message.fields
        else:
            event, fields = record.getMessage(), {}
        level = record.levelname.lower()
        timestamp = self.timestamp(record.created)
        error = self.formatException(record.exc_info) if record.exc_info else None
        if self._json:
            data = {"event": event, "level": level, "timestamp": timestamp, **fields}
            if error:
                data["exception"] = error
            return printable_json(json.dumps(data, ensure_ascii=False, default=str))
        line = self._console(timestamp, level, printable(event), fields)
        return f"{line}\n{printable(error, layout=True)}" if error else line

    def _console(self, timestamp: str, level: str, event: str, fields: Mapping[str, Any]
                 ) -> str:
        if not self._colours:
            tail = f" {logfmt(fields)}" if fields else ""
            return f"{timestamp} [{level:<9}] {event:<30}{tail}"
        pairs = " ".join(f"{_KEY}{key}{_RESET}={logfmt_value(value)}"
                         for key, value in fields.items())
        colour = _COLOURS.get(level, "")
        return (f"\x1b[2m{timestamp}{_RESET} [{colour}{level:<9}{_RESET}] "
                f"{_BOLD}{event:<30}{_RESET} {pairs}").rstrip()


def json_event(level: int, event: str, fields: Mapping[str, Any]) -> str:
    """One event as the CLI's JSON handler writes it, without a logger (for an
    error that ends the command, whether or not logging was configured yet)."""
    record = logging.LogRecord(LOGGER_NAME, level, "", 0, EventMessage(event, fields), None,
                               None)
    return EventFormatter("json").format(record)


def wants_colour(stream: TextIO) -> bool:
    """Colour only on a terminal, and never when ``NO_COLOR`` is set and not empty
    (https://no-color.org)."""
    return stream.isatty() and not os.environ.get("NO_COLOR")


def configure_logging(fmt: LogFormat = "console", stream: TextIO | None = None,
                      level: int = logging.INFO) -> logging.Handler:
    """Attach one handler rendering initorch events to ``stream`` (stderr by default).

    Console output is coloured only on a terminal without ``NO_COLOR``.  Calling
    it again replaces the previous CLI handler instead of duplicating lines.
    """
    stream = stream or sys.stderr
    handler = logging.StreamHandler(stream)
    handler.setFormatter(EventFormatter(fmt, colours=wants_colour(stream)))
    setattr(handler, _HANDLER_MARK, True)
    logger = logging.getLogger(LOGGER_NAME)
    for old in [h for h in logger.handlers if getattr(h, _HANDLER_MARK, False)]:
        logger.removeHandler(old)
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    return handler
