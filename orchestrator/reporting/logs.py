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
import traceback
from collections.abc import Mapping
from types import FrameType
from typing import Any, Literal, TextIO

import structlog

from initorch.printable import printable, printable_json

LOGGER_NAME = "initorch"
LogFormat = Literal["console", "json"]
_HANDLER_MARK = "_initorch_cli_handler"


# Attributes every LogRecord has; an event field with one of these names would make
# stdlib logging raise ("Attempt to overwrite 'module' in LogRecord").
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message", "asctime"}


_BARE_WORD = re.compile(r"[^\s\"'=\\]+")
# Texts repeat from event to event (profile, step names, events' own values): each is
# checked once.  Bounded, so that unique texts (paths, messages) cannot grow it.
_RENDERED: dict[str, str] = {}
_RENDERED_MAX = 4096


def _render_text(value: str) -> str:
    if _BARE_WORD.fullmatch(value) and value.isprintable():
        return value
    return printable_json(json.dumps(value, ensure_ascii=False))


def _text(value: str) -> str:
    rendered = _RENDERED.get(value)
    if rendered is None:
        rendered = _render_text(value)
        if len(_RENDERED) >= _RENDERED_MAX:
            _RENDERED.clear()
        _RENDERED[value] = rendered
    return rendered


def logfmt_value(value: object) -> str:
    """One value as ``key=value`` shows it: plain words bare, other text JSON-quoted
    (so that an event stays on one line), anything else as its ``repr``; control
    characters as escapes either way (a value cannot forge terminal output)."""
    if type(value) is str:
        return _text(value)
    return _render_text(value) if isinstance(value, str) else printable(repr(value))


def logfmt(fields: Mapping[str, Any]) -> str:
    return " ".join([f"{key}={_text(value) if type(value) is str else logfmt_value(value)}"
                     for key, value in fields.items()])


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


_STRUCTLOG_DIR = os.path.dirname(structlog.__file__)
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR, "exception": logging.ERROR, "critical": logging.CRITICAL}


class EventLogger(structlog.stdlib.BoundLogger):
    """structlog's stdlib bound logger (``bind``, ``info``, ``exception``, the stdlib
    pass-through attributes) that turns each event into one stdlib record itself.

    An event below the stdlib logger's level costs one level check: nothing is
    copied, no processor runs.  Otherwise the record is made through the logger's
    ``makeRecord`` (so a host's record factory applies), with the code that logged
    as its source (found once: the stdlib would walk the stack a second time), and
    handed to the logger's filters and handlers (``Logger.handle``).  A run logs two
    events per step, so this is most of what the CLI's console logging costs.
    """

    def _proxy_to_logger(self, method_name: str, event: str | None = None,
                         *event_args: str, **event_kw: Any) -> None:
        logger: logging.Logger = self._logger
        level = _LEVELS.get(method_name, logging.INFO)
        if not logger.isEnabledFor(level):
            return
        if event_args:
            event_kw["positional_args"] = event_args
        exc_info = event_kw.pop("exc_info", None)
        stack_info = event_kw.pop("stack_info", False)
        event_kw.pop("stacklevel", None)  # the source is always the code that logged
        fields = {**self._context, **event_kw} if self._context else event_kw
        clashing = [key for key in fields if key in _RECORD_ATTRIBUTES]
        for key in clashing:  # stdlib refuses to overwrite them: module -> module_
            fields[f"{key}_"] = fields.pop(key)
        name = str(event)
        frame = _caller()
        stack = None
        if stack_info:
            stack = "Stack (most recent call last):\n" + "".join(
                traceback.format_stack(frame)).rstrip("\n")
        if exc_info:
            if isinstance(exc_info, BaseException):
                exc_info = (type(exc_info), exc_info, exc_info.__traceback__)
            elif not isinstance(exc_info, tuple):
                exc_info = sys.exc_info()
        path, line, function = ((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
                                if frame is not None else ("(unknown file)", 0, "(unknown)"))
        record = logger.makeRecord(logger.name, level, path, line, EventMessage(name, fields),
                                   (), exc_info or None, function, {**fields, "event": name},
                                   stack)
        logger.handle(record)


def _caller() -> FrameType | None:
    """The frame of the code that logged: the first one past structlog's methods."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_STRUCTLOG_DIR):
        frame = frame.f_back
    return frame


def get_logger(**fields: Any) -> Any:
    """A structlog logger writing to the stdlib ``initorch`` logger, with ``fields`` bound.

    This wraps a stdlib logger per call instead of configuring structlog
    globally, so embedding initorch never changes the host's structlog setup.
    """
    return EventLogger(logging.getLogger(LOGGER_NAME), processors=(), context={}
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
