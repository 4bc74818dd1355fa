"""The start-up status file: what a run writes while it starts, atomically, and what
``initorch status --ready`` makes of it for a probe."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

from initorch.cli import main
from initorch.execution.run import Run
from initorch.reporting.status import (
    PROBE_EXIT_CODES,
    SCHEMA,
    StatusFile,
    read_status,
    verdict,
)
from tests.support.runs import DIAGNOSES, WAIT, plan_of, with_teardown
from tests.support.synthetic import define


def test_a_run_keeps_its_status_from_starting_to_stopped(tmp_path):
    path = str(tmp_path / "status-0.json")
    entered, release = threading.Event(), threading.Event()

    def loads_weights(ctx):
        entered.set()
        assert release.wait(WAIT)

    plan = plan_of([define("first"), with_teardown(
        define("load_weights", loads_weights, requires=["first"]), lambda ctx, out: None)])
    status = StatusFile(path, rank=0, steps_total=len(plan.steps), interval=0.05)
    run = Run(plan, diagnoses=DIAGNOSES, status=status)
    worker = threading.Thread(target=run.start)
    worker.start()
    try:
        assert entered.wait(WAIT)
        during = read_status(path)
        assert (during["schema"], during["state"], during["phase"]) == \
            (SCHEMA, "starting", "load_weights")
        assert (during["steps_done"], during["steps_total"]) == (1, 2)
        assert verdict(during).exit_code == PROBE_EXIT_CODES["not ready"]
        time.sleep(0.2)  # the writer rewrites it meanwhile: time in the phase grows
        later = read_status(path)
        assert later["in_phase_s"] > during["in_phase_s"]
        assert later["updated_at"] > during["updated_at"]
    finally:
        release.set()
        worker.join(WAIT)
    ready = read_status(path)
    assert (ready["state"], ready["phase"], ready["steps_done"]) == ("ready", None, 2)
    assert verdict(ready).outcome == "ready"
    run.teardown()
    status.close()
    assert read_status(path)["state"] == "stopped"


def test_a_reader_never_sees_half_a_file(tmp_path):
    path = str(tmp_path / "status.json")
    status = StatusFile(path, rank=3, steps_total=1000, interval=0.001)
    try:
        for number in range(300):
            status.step_started(f"step-{number}")
            data = json.loads((tmp_path / "status.json").read_text())  # never a ValueError
            assert data["rank"] == 3
            status.step_finished(f"step-{number}", succeeded=True)
    finally:
        status.close()


def test_a_stale_file_is_recognised(tmp_path):
    path = str(tmp_path / "status.json")
    status = StatusFile(path, rank=0, steps_total=1)
    status.close()
    data = read_status(path)
    assert verdict(data, now=data["updated_at"] + 60).outcome == "stale"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    said = verdict({**data, "pid": gone.pid})
    assert said.outcome == "stale" and f"process {gone.pid} is gone" in said.line


def test_the_probe_exit_codes(tmp_path, capsys):
    path = tmp_path / "status.json"
    status = StatusFile(str(path), rank=0, steps_total=1)
    try:
        assert main(["status", "--ready", str(path)]) == 1
        status.state("ready")
        assert main(["status", "--ready", str(path)]) == 0
        assert "rank 0: ready" in capsys.readouterr().out
        assert main(["status", "--ready", "--max-age", "0.000001", str(path)]) == 3
    finally:
        status.close()
    assert main(["status", "--ready", str(tmp_path / "missing.json")]) == 2
    (tmp_path / "other.json").write_text("{}")
    assert main(["status", str(tmp_path / "other.json")]) == 2
    assert "not an initorch status file" in capsys.readouterr().err
