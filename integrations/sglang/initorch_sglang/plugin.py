"""The SGLang plugin (entry point ``sglang.srt.plugins`` -> ``initorch``).

SGLang calls it in the launcher and again in every rank before the rank's
``Scheduler`` is built (``srt/plugins/__init__.py:103-141``,
``managers/scheduler.py:6323``).  Without ``INITORCH_SGLANG`` it returns at once and
SGLang starts exactly as without initorch.  With it:

- on an SGLang release the audit does not prove (``version.py``), verify mode switches
  itself off with one warning line and drive mode refuses the launch in one line;
- in the launcher, drive mode picks where the ranks will meet (they inherit it);
- in a process the launcher spawned, it first ties the process to the launcher, as SGLang
  does only after the plugins (:func:`_follow_the_launcher`);
- in a rank, it hooks the ``Scheduler.__init__`` that frames SGLang's start-up; when the
  session begins there, it hooks SGLang's start-up calls (verify and drive), and in drive
  mode ``init_parallel_runtime`` and the deadline helper its engine init runs in, all in
  one pass over SGLang's modules, and checks that every hook took (SGLang makes those
  calls only inside the constructor, and a process without one, the detokenizer, pays
  for no pass at all);
- in a rank, it wraps the vendor calls that need the device context when their modules
  load (:func:`initorch.kit.install_vendor_hooks`), so that they are recorded where they
  are made;
- with ``INITORCH_SGLANG_TIMELINE=DIR``, in every process it loads in (the launcher, the
  ranks, the detokenizer), it records that process's start-up timeline
  (:mod:`initorch_sglang.timeline`), from the kernel's start of the process on.

SGLang only logs an exception from a plugin (``plugins/__init__.py:79-84``), so each
refusal here is a ``SystemExit`` with its message: the launch stops, naming the cause.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from typing import TYPE_CHECKING

# Only what deciding "off" needs: an SGLang that did not ask imports nothing more (no
# module of initorch's core: the release gate below imports it, once a launch asked).
from initorch_sglang.options import (
    RENDEZVOUS_ENV,
    TIMELINE_ENV,
    Options,
    OptionsError,
    read_options,
)

if TYPE_CHECKING:
    from initorch.kit import Hook
    from initorch_sglang.layouts import Layout
    from initorch_sglang.timeline import LaunchRecording

__all__ = ["load", "session_hooks"]


def load() -> None:
    """Entry point of the SGLang plugin."""
    entered = time.time()  # the start-up timeline's end of SGLang's imports
    started = time.perf_counter()
    try:
        options = read_options()
    except OptionsError as error:
        raise SystemExit(str(error)) from None
    if not options.active:
        return
    from initorch_sglang.version import UnknownSGLangError, accept_installed_sglang

    try:
        if not accept_installed_sglang(options.mode,
                                       launcher=multiprocessing.parent_process() is None):
            return
    except UnknownSGLangError as error:
        raise SystemExit(str(error)) from None
    recording = None
    if os.environ.get(TIMELINE_ENV):  # the launch asked for a timeline
        from initorch_sglang.timeline import start_recording

        recording = start_recording(entered)
    try:
        _load(options, started, recording)
    finally:
        if recording is not None:
            recording.plugin_loaded(entered)


def _load(options: Options, started: float, recording: LaunchRecording | None) -> None:
    """The plugin's work in the launcher or in a spawned process (``recording``: this
    process's start-up timeline, when asked for)."""
    if multiprocessing.parent_process() is None:  # the launcher: ranks come later
        from initorch_sglang.selection import validate_launch_settings

        try:  # refused here in one line, not in every rank after its imports
            validate_launch_settings(options)
        except OptionsError as error:
            raise SystemExit(str(error)) from None
        if options.mode == "drive" and RENDEZVOUS_ENV not in os.environ:
            from initorch.steps import free_port

            os.environ[RENDEZVOUS_ENV] = f"127.0.0.1:{free_port('127.0.0.1')}"
        if recording is not None:
            with recording.recorder.accounted():
                _apply(recording.hooks())
        return
    _follow_the_launcher()
    from initorch.kit import COST, MOONCAKE_CALLS, install_vendor_hooks, observe_vendor
    from initorch_sglang.calls import installed_layout
    from initorch_sglang.verify import scheduler_hook

    layout = installed_layout()  # every upstream name below is the layout's
    install_vendor_hooks(observe_vendor, MOONCAKE_CALLS)
    framing = scheduler_hook(options, session_hooks(options, layout))
    hooks: dict[str, Hook] = {}
    if recording is not None:  # its phases, and the constructor framed as one
        hooks |= recording.hooks()
        framing = recording.frame_scheduler(framing)
    hooks[layout.scheduler_init] = (framing, "around")
    COST.add("plugin load", time.perf_counter() - started)  # "hooks" has the rest
    _apply(hooks)


def session_hooks(options: Options, layout: Layout) -> dict[str, Hook]:
    """The hooks a rank's session applies when it begins: the observers of SGLang's
    start-up calls and, in drive mode, the replacement of ``init_parallel_runtime`` and
    the device binding of the deadline helper's thread (every name the ``layout``'s)."""
    from initorch_sglang.verify import observer_hooks

    hooks = observer_hooks()
    if options.mode == "drive" and layout.parallel_runtime is not None:
        from initorch_sglang.drive import bind_deadline_thread, drive_parallel_runtime

        hooks[layout.parallel_runtime] = (drive_parallel_runtime, "replace")
        if layout.deadline_helper is not None:  # SGLang's engine init thread (0.5.20 on)
            hooks[layout.deadline_helper] = (bind_deadline_thread, "around")
    return hooks


def _apply(hooks: dict[str, Hook]) -> None:
    """Apply ``hooks`` on SGLang's functions; a target that is missing stops the launch."""
    from initorch.kit import HookError, apply_hooks
    from initorch_sglang.engine import SGLANG

    try:
        apply_hooks(hooks, SGLANG)
    except HookError as error:
        raise SystemExit(str(error)) from None


def _follow_the_launcher() -> None:
    """Die with the launcher from here on; stop now if it is already gone.

    SGLang ties a rank to the launcher (``PR_SET_PDEATHSIG``, ``kill_itself_when_parent_died``,
    ``utils/common.py:3432``) only in ``configure_scheduler_process``
    (``managers/scheduler.py:6269``), after ``load_plugins`` (``:6323``): without this, the
    plugin's own load would run in a rank that outlives a launcher killed meanwhile (a
    SIGTERM during start-up has no handler in the launcher).  The kernel does not send
    the signal for a parent that died before the ``prctl``, so an orphan (its launcher
    killed while it imported SGLang) stops here instead of starting up under the hooks.
    The same setting SGLang makes a moment later; a no-op off Linux.
    """
    parent = multiprocessing.parent_process()
    if parent is None or not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent.pid:
        raise SystemExit(f"initorch-sglang: the SGLang launcher (pid {parent.pid}) is gone; "
                         f"process {os.getpid()} stops before its start-up")
