"""Reports, traces and the output streams never change a run's outcome.

Issue 10, points 10 (report/trace errors are checked first and, late, are a
warning that keeps the exit code), 11 (two outputs on one path, an output on an
input) and 12 (a closed or full stdout/stderr), plus ``initorch steps | head``.
Each case runs the installed console script as a user would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from initorch.errors import EXIT_INVALID_INPUT, EXIT_OK, EXIT_STEP_FAILED
from initorch.files import write_atomically
from tests.conftest import REPO
from tests.helpers_foundation import assert_single_error_line, run_initorch_in, write

SCRIPT = Path(sys.executable).parent / "initorch"

# A plugin whose steps remove the report's folder (so that the late write fails) and
# then succeed, fail or wait for a signal.
STEPS = """\
import shutil, sys, time
from initorch.plugin import setting, step

FOLDER = setting("t.folder", str, default="", description="the folder to remove")

@step("spoil", description="removes the folder the report goes to", settings=(FOLDER,))
def spoil(ctx):
    shutil.rmtree(ctx.setting("t.folder"))

@step("fail", description="fails", requires=["spoil"])
def fail(ctx):
    raise RuntimeError("the step broke")

@step("wait", description="waits for a signal", requires=["spoil"])
def wait(ctx):
    print("WAITING", file=sys.stderr, flush=True)
    time.sleep(60)

def register(registry):
    for definition in (spoil, fail, wait):
        registry.steps.add(definition)
"""


@pytest.fixture
def spoiler(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "spoiler.py").write_text(STEPS, encoding="utf-8")
    return site, {"PYTHONPATH": str(site), "INITORCH_PLUGINS": "spoiler"}


def profile(tmp_path: Path, *steps: str) -> Path:
    body = "".join(f"  {name}: {{}}\n" if name in ("spoil", *steps)
                   else f"  {name}: {{enabled: false, reason: not this test}}\n"
                   for name in ("spoil", "fail", "wait"))
    return write(tmp_path, "p.yaml", f"device:\n  type: cpu\nsteps:\n{body}")


# --- point 10: a report that cannot be written never replaces the outcome ------------------------

@pytest.mark.parametrize(("steps", "code"), [((), EXIT_OK), (("fail",), EXIT_STEP_FAILED)],
                         ids=["success", "failure"])
def test_a_late_report_failure_is_a_warning_keeping_the_exit_code(tmp_path, spoiler, steps,
                                                                  code):
    _, env = spoiler
    folder = tmp_path / "out"
    folder.mkdir()
    done = run_initorch_in(tmp_path, "run", "-p", str(profile(tmp_path, *steps)), "--set",
                           f"t.folder={folder}", "--report", str(folder / "r.json"), env=env)
    assert done.returncode == code, done.stderr
    lines = done.stderr.splitlines()
    [warning] = [line for line in lines if "--report" in line]
    assert warning.startswith("initorch: warning: --report") and "outcome stands" in warning
    if code == EXIT_OK:
        assert done.stdout.startswith("run: ok")
    else:
        assert lines[-1].startswith("initorch: step 'fail' failed")


def test_a_report_failure_after_sigterm_keeps_143(tmp_path, spoiler):
    _, env = spoiler
    folder = tmp_path / "out"
    folder.mkdir()
    proc = subprocess.Popen(
        [str(SCRIPT), "run", "-p", str(profile(tmp_path, "wait")), "--set",
         f"t.folder={folder}", "--report", str(folder / "r.json")],
        cwd=tmp_path, env={**os.environ, **env}, text=True, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)
    assert proc.stderr is not None
    for line in proc.stderr:
        if "WAITING" in line:
            break
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert "initorch: warning: --report" in err


@pytest.mark.parametrize("path", ["/dev/full", "/dev/null"])
def test_a_report_on_a_device_is_refused_before_anything_runs(tmp_path, spoiler, path):
    _, env = spoiler
    folder = tmp_path / "out"
    folder.mkdir()
    done = run_initorch_in(tmp_path, "run", "-p", str(profile(tmp_path, "fail")), "--set",
                           f"t.folder={folder}", "--report", path, env=env)
    assert done.returncode == EXIT_INVALID_INPUT
    assert folder.exists()  # spoil never ran
    assert_single_error_line(done.stderr, "--report", "a character device", located=False)


@pytest.mark.skipif(not os.path.isfile("/proc/version"), reason="needs Linux's /proc")
def test_a_report_on_a_file_that_cannot_be_replaced_is_refused_by_trying(tmp_path, spoiler):
    # /proc/version is a regular file, and root passes every permission check: only
    # trying to write beside it shows that the report could never land (issue 19).
    _, env = spoiler
    folder = tmp_path / "out"
    folder.mkdir()
    done = run_initorch_in(tmp_path, "run", "-p", str(profile(tmp_path, "fail")), "--set",
                           f"t.folder={folder}", "--report", "/proc/version", env=env)
    assert done.returncode == EXIT_INVALID_INPUT, done.stderr
    assert folder.exists()  # spoil never ran
    assert_single_error_line(done.stderr, "--report /proc/version: cannot be written: "
                             "creating a file beside it failed", located=False)


def test_a_report_is_replaced_atomically(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("old", encoding="utf-8")
    with pytest.raises(UnicodeEncodeError):
        write_atomically(target, "half \udc80 written")
    assert target.read_text(encoding="utf-8") == "old"
    assert os.listdir(tmp_path) == ["r.json"]  # no temporary file left behind
    write_atomically(target, "new")
    assert target.read_text(encoding="utf-8") == "new"


# --- point 11: outputs never overwrite each other or an input ------------------------------------

def test_report_and_trace_on_one_path_are_refused(run_cli, tmp_path):
    same = tmp_path / "out.json"
    code, _, err = run_cli("run", "-p", "cpu", "--executor", "dry-run", "--report", str(same),
                           "--trace", str(same))
    assert code == EXIT_INVALID_INPUT
    assert_single_error_line(err, "--trace", "also given to --report", located=False)
    assert not same.exists()


def test_an_output_through_a_symlink_to_the_other_is_refused(run_cli, tmp_path):
    (tmp_path / "link.json").symlink_to(tmp_path / "out.json")
    code, _, err = run_cli("run", "-p", "cpu", "--executor", "dry-run", "--report",
                           str(tmp_path / "out.json"), "--trace", str(tmp_path / "link.json"))
    assert code == EXIT_INVALID_INPUT
    assert "also given to --report" in err


@pytest.mark.parametrize("option", ["--report", "--trace"])
def test_an_output_on_an_input_profile_is_refused(run_cli, tmp_path, option):
    base = write(tmp_path, "base.yaml", "extends: cpu\n")
    top = write(tmp_path, "top.yaml", "extends: base.yaml\n")
    code, _, err = run_cli("run", "-p", str(top), "--executor", "dry-run", option, str(base))
    assert code == EXIT_INVALID_INPUT
    assert_single_error_line(err, option, "is an input of this command", located=False)
    assert base.read_text(encoding="utf-8") == "extends: cpu\n"


def test_plan_out_on_an_input_profile_is_refused(run_cli, tmp_path):
    top = write(tmp_path, "top.yaml", "extends: cpu\n")
    code, _, err = run_cli("plan", "-p", str(top), "--out", str(top))
    assert code == EXIT_INVALID_INPUT
    assert "is an input of this command" in err
    assert top.read_text(encoding="utf-8") == "extends: cpu\n"


# --- point 12: closed or full output streams never change the outcome ----------------------------

def test_steps_piped_into_head_exits_0_quietly():
    proc = subprocess.Popen([str(SCRIPT), "steps"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=REPO)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # as `| head -1` does
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == EXIT_OK, err
    assert err == b""


@pytest.mark.parametrize("command", [["steps"], ["plan", "-p", "cpu"], ["validate"]])
def test_stdout_on_a_full_disk_keeps_the_exit_code_and_warns(command):
    with open("/dev/full", "w") as full:
        done = subprocess.run([str(SCRIPT), *command], stdout=full, stderr=subprocess.PIPE,
                              text=True, cwd=REPO, timeout=60, check=False)
    assert done.returncode == EXIT_OK, done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr


@pytest.mark.parametrize(("fd", "redirect"), [(1, ">&-"), (2, "2>&-"), (1, ">/dev/full"),
                                              (2, "2>/dev/full")])
def test_a_dry_run_with_a_closed_or_full_stream_keeps_its_outcome(fd, redirect):
    done = subprocess.run(f"'{SCRIPT}' run -p cpu --executor dry-run {redirect}", shell=True,
                          capture_output=True, text=True, cwd=REPO, timeout=60, check=False)
    assert done.returncode == EXIT_OK, (fd, done.stdout, done.stderr)


def test_bad_input_with_stderr_closed_still_exits_2():
    done = subprocess.run(f"'{SCRIPT}' plan -p no-such-profile 2>&-", shell=True,
                          capture_output=True, text=True, cwd=REPO, timeout=60, check=False)
    assert done.returncode == EXIT_INVALID_INPUT


@pytest.mark.e2e
@pytest.mark.parametrize("log_format", ["console", "json"])
def test_a_real_run_with_stderr_on_a_full_disk_succeeds(tmp_path, log_format):
    # The engine step replays Mooncake's captured native lines onto stderr: ENOSPC
    # there must not fail the step (it did).
    report = tmp_path / "r.json"
    with open("/dev/full", "w") as full:
        done = subprocess.run([str(SCRIPT), "run", "-p", "cpu", "--log-format", log_format,
                               "--report", str(report)], stdout=subprocess.PIPE, stderr=full,
                              text=True, cwd=tmp_path, timeout=180, check=False)
    assert done.returncode == EXIT_OK
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["ok"], data["steps"]
    engine = [s for s in data["steps"] if s["step"] == "init_shared_mooncake_transfer_engine"]
    assert [s["status"] for s in engine] == ["succeeded"]


def test_a_closed_stderr_never_becomes_a_file_the_command_writes(tmp_path):
    # With fd 2 closed, the next file opened would get number 2 and catch every
    # native log line; the console points it at /dev/null first.
    code = textwrap.dedent(f"""
        import os, sys
        os.close(2)
        from initorch.console import install
        install()
        fd = os.open({str(tmp_path / 'f')!r}, os.O_WRONLY | os.O_CREAT)
        print(fd)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 2
