"""Structured logging: structlog on top of the stdlib ``initorch`` logger.

Library code only calls :func:`get_logger` and binds fields (profile, rank,
step).  Events go to the stdlib logger named ``initorch`` with their fields as
record attributes, so a host server's ``logging`` configuration captures them
with no initorch-specific setup.  Only the CLI calls :func:`configure_logging`,
which renders the same events for people (console) or machines (JSON lines).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import MutableMapping
from types import FrameType
from typing import Any, Literal, TextIO

import structlog

LOGGER_NAME = "initorch"
LogFormat = Literal["console", "json"]
_HANDLER_MARK = "_initorch_cli_handler"


# Attributes every LogRecord has; an event field with one of these names would make
# stdlib logging raise ("Attempt to overwrite 'module' in LogRecord").
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message", "asctime"}


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


def get_logger(**fields: Any) -> Any:
    """A structlog logger writing to the stdlib ``initorch`` logger, with ``fields`` bound.

    This wraps a stdlib logger per call instead of configuring structlog
    globally, so embedding initorch never changes the host's structlog setup.
    """
    return structlog.wrap_logger(
        logging.getLogger(LOGGER_NAME),
        wrapper_class=structlog.stdlib.BoundLogger,
        processors=[structlog.stdlib.filter_by_level, _protect_record_attributes,
                    _point_at_caller, structlog.stdlib.render_to_log_kwargs],
    ).bind(**fields)


def configure_logging(fmt: LogFormat = "console", stream: TextIO | None = None,
                      level: int = logging.INFO) -> logging.Handler:
    """Attach one handler rendering initorch events to ``stream`` (stderr by default).

    Console output is coloured only on a TTY.  Calling it again replaces the
    previous CLI handler instead of duplicating lines.
    """
    stream = stream or sys.stderr
    renderer: Any
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer(sort_keys=False)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=stream.isatty(), sort_keys=False)
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.ExtraAdder(),
            structlog.processors.TimeStamper(fmt="iso", utc=True),
        ],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    setattr(handler, _HANDLER_MARK, True)
    logger = logging.getLogger(LOGGER_NAME)
    for old in [h for h in logger.handlers if getattr(h, _HANDLER_MARK, False)]:
        logger.removeHandler(old)
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    return handler
