"""The timeline's picture in a real browser (Debian's headless ``chromium``; ``.ci/run``
installs it): a screenshot, and the phases' layout read from the page's geometry."""

from __future__ import annotations

import html
import itertools
import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from initorch.execution.run import Run
from initorch.reporting.run_timeline import run_timeline
from initorch.reporting.timeline import MIN_GAP_S, NOT_MEASURED, Phase, Process, Timeline, merge
from initorch.reporting.timeline_plot import timeline_html
from tests.support.runs import DIAGNOSES, plan_of, with_teardown
from tests.support.synthetic import define

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium "
                                "(apt-get install -y chromium; .ci/run installs it)")

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--window-size=1900,1000"]

MEASURE = """
<script>
const svg = document.getElementById('timeline');
const box = svg.getBoundingClientRect();
const bars = [...document.querySelectorAll('rect.phase')].map(rect => {
  const b = rect.getBoundingClientRect(), label = rect.nextElementSibling;
  const l = label.getBoundingClientRect();
  return {process: rect.dataset.process, name: rect.dataset.name, kind: rect.dataset.kind,
          start: +rect.dataset.start, end: +rect.dataset.end, x: b.left - box.left,
          w: b.width, top: b.top - box.top, bottom: b.bottom - box.top,
          label: label.textContent, label_x: l.left - box.left,
          label_mid: (l.top + l.bottom) / 2 - box.top};
});
const ready = document.querySelector('line.ready').getBoundingClientRect();
const out = document.createElement('pre');
out.id = 'geometry';
out.textContent = JSON.stringify({bars, width: box.width, scale: +svg.dataset.scale,
                                  left: +svg.dataset.left, ready_x: ready.left - box.left});
document.body.appendChild(out);
</script>
"""


def real_and_launch_timeline() -> Timeline:
    """This process's real run (two steps, a teardown), and beside it a simulated
    two-process launch with a stretch that no phase covers."""
    plan = plan_of([with_teardown(define("engine", lambda ctx: __import__("time").sleep(0.05)),
                                  lambda ctx, out: None),
                    define("pool", requires=["engine"])])
    run = Run(plan, diagnoses=DIAGNOSES)
    run.start()
    run.teardown()
    own = run_timeline(run.report, {}, pid=1, argv=["pytest"], start=None)
    t0 = own.origin
    launch = Timeline([Process(2, "simulated launcher"), Process(3, "simulated rank 0")], [
        Phase("imports", 2, "main", t0, t0 + 0.3), Phase("spawn ranks", 2, "main", t0 + 0.3,
                                                         t0 + 0.35),
        Phase("imports", 3, "main", t0 + 0.4, t0 + 0.9),
        Phase("load weights", 3, "main", t0 + 1.2, t0 + 1.6, kind="engine")])
    return merge([own, launch])


def geometry(page: Path) -> dict:
    measured = page.with_name("measured.html")
    measured.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    done = subprocess.run([CHROMIUM, *FLAGS, "--dump-dom", measured.as_uri()],
                          capture_output=True, text=True, timeout=120, check=True)
    found = re.search(r'<pre id="geometry">(.*?)</pre>', done.stdout, re.DOTALL)
    assert found, done.stdout[-2000:]
    return json.loads(html.unescape(found.group(1)))


def assert_launch_drawn(page: Path, timeline: Timeline, names: set[str]) -> None:
    """A real launch's picture (``page``, of ``timeline``) in headless chromium, through
    the page's geometry: every phase a bar where its times say, labelled with its name,
    ``names`` among them, and the ready line at the ready moment (the engines' real
    launch tests; skipped without chromium)."""
    if CHROMIUM is None:
        pytest.skip("needs Debian's chromium (apt-get install -y chromium)")
    seen = geometry(page)
    bars, scale, left = seen["bars"], seen["scale"], seen["left"]
    filled = timeline.with_gaps()
    assert len(bars) == len(filled.phases)
    for bar in bars:
        assert bar["x"] == pytest.approx(left + bar["start"] * scale, abs=1.0), bar
        assert bar["label"].startswith(bar["name"])
    assert {bar["name"] for bar in bars} >= names
    assert seen["ready_x"] == pytest.approx(left + (filled.ready_at() - filled.origin) * scale,
                                            abs=2.0)


def test_the_picture_in_chromium(tmp_path):
    timeline = real_and_launch_timeline()
    page = tmp_path / "timeline.html"
    page.write_text(timeline_html(timeline))
    shot = tmp_path / "timeline.png"
    subprocess.run([CHROMIUM, *FLAGS, f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", png[16:24]) == (1900, 1000)

    seen = geometry(page)
    bars, scale, left = seen["bars"], seen["scale"], seen["left"]
    filled = timeline.with_gaps()
    assert len(bars) == len(filled.phases)
    for bar in bars:  # each bar where its times say, its label beside it on its row
        assert bar["x"] == pytest.approx(left + bar["start"] * scale, abs=1.0), bar
        assert bar["w"] == pytest.approx((bar["end"] - bar["start"]) * scale, abs=1.0), bar
        assert bar["label"].startswith(bar["name"])
        assert bar["label_x"] >= bar["x"] + bar["w"]
        assert bar["top"] <= bar["label_mid"] <= bar["bottom"]
    rows = sorted(bars, key=lambda bar: bar["top"])
    for upper, lower in itertools.pairwise(rows):  # one row per phase
        assert lower["top"] >= upper["bottom"]
    for pid in {bar["process"] for bar in bars}:  # no gap in any process's life
        own = sorted((b for b in bars if b["process"] == pid), key=lambda b: b["x"])
        reach = own[0]["x"] + own[0]["w"]
        for bar in own[1:]:
            assert bar["x"] <= reach + MIN_GAP_S * scale + 1.0, (pid, bar)
            reach = max(reach, bar["x"] + bar["w"])
    [unseen] = [bar for bar in bars if bar["kind"] == NOT_MEASURED and bar["process"] == "3"]
    assert (round(unseen["start"], 3), round(unseen["end"], 3)) == (0.9, 1.2)
    assert unseen["label"].startswith(NOT_MEASURED)
    assert seen["ready_x"] == pytest.approx(left + (filled.ready_at() - filled.origin) * scale,
                                            abs=2.0)
