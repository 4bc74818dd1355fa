"""initorch.reporting.stderr_events: in JSON mode, whatever reaches fd 2 becomes an event."""

from __future__ import annotations

import os
import sys
import warnings

from initorch.reporting.stderr_events import StderrEvents
from tests.support.runs import captured_records, restored_initorch_logger

GLOG = (b"W1130 18:33:29.710994 13256 topology.cpp:201] No RDMA devices found\n"
        b"I1130 18:33:29.711047 13256 transfer_engine_impl.cpp:274] Found 0 HCAs.\n"
        b"E1130 18:33:29.711081 13256 transfer_metadata.cpp:1098] Local segment descriptor "
        b"not found\n")


def test_native_lines_warnings_and_python_prints_become_events(capfd):
    before = os.fstat(2)
    showwarning = warnings.showwarning
    with restored_initorch_logger() as logger, captured_records() as records:
        logger.handlers[:] = [records]  # only this test's handler sees the events
        logger.propagate = False
        with StderrEvents() as capture:
            write_to_stderr()
    # fd 2 and the warning hook are back as they were
    after = os.fstat(2)
    assert (after.st_dev, after.st_ino) == (before.st_dev, before.st_ino)
    assert warnings.showwarning is showwarning

    native = records.events("native_output")
    assert [(r.levelname, r.text) for r in native] == [
        ("WARNING", "No RDMA devices found"),
        ("INFO", "Found 0 HCAs."),
        ("ERROR", "Local segment descriptor not found"),
        ("WARNING", "WARNING: Logging before InitGoogleLogging() is written to STDERR"),
        ("WARNING", "a Python print to stderr"),
    ]
    assert (native[0].source, native[0].native_thread, native[0].native_time) == (
        "topology.cpp:201", 13256, "1130 18:33:29.710994")
    assert not hasattr(native[3], "source")
    [warned] = records.events("python_warning")
    assert (warned.category, warned.text, warned.source) == ("UserWarning", "probe",
                                                             "/x/y.py:7")
    # a line that already is a JSON object goes through untouched, to the real stderr
    passed = capfd.readouterr().err.splitlines()
    assert '{"event": "from_a_child", "level": "info"}' in passed
    assert not [line for line in passed if "No RDMA" in line or "Python print" in line]
    capture.stream.write("")  # the events' stream outlives the capture


def write_to_stderr() -> None:
    """What a run in JSON mode meets: glog lines, plain native lines, a JSON line from a
    child process, a Python print and a warning."""
    showwarning = warnings.showwarning
    os.write(2, GLOG)
    os.write(2, b"WARNING: Logging before InitGoogleLogging() is written to STDERR\n\n")
    os.write(2, b'{"event": "from_a_child", "level": "info"}\n')
    print("a Python print to stderr", file=sys.__stderr__, flush=True)
    with warnings.catch_warnings():  # whatever filters earlier tests left behind
        warnings.simplefilter("always")
        warnings.warn_explicit("probe", UserWarning, "/x/y.py", 7)
    assert warnings.showwarning is showwarning  # the capture's hook, restored by the block


def test_the_log_can_be_rebound_to_the_run(capfd):
    from initorch.reporting.logs import get_logger

    with captured_records() as records, StderrEvents() as capture:
        capture.log = get_logger(profile="p", rank=3)
        os.write(2, b"plain text\n")
    [event] = records.events("native_output")
    assert (event.profile, event.rank, event.text) == ("p", 3, "plain text")
