"""``initorch trace merge``: the ranks' trace files as one, a process per rank, one time line;
and ``{rank}``/``{local_rank}`` in ``--report``/``--trace`` paths."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from initorch import InitorchError, RankInfo
from initorch.cli.run import per_rank_path
from initorch.reporting.trace_merge import merge_traces


def trace(rank: int, started_at: str | None, spans: list[tuple[str, float, float]]) -> dict:
    """A trace as 'initorch run --trace' writes it (times in microseconds)."""
    events = [{"name": "process_name", "ph": "M", "pid": rank, "tid": 0,
               "args": {"name": f"initorch rank {rank} (base + cpu)"}}]
    events += [{"name": name, "cat": "initorch.step", "ph": "X", "ts": ts, "dur": dur,
                "pid": rank, "tid": 7, "args": {}} for name, ts, dur in spans]
    other = {"fingerprint": "f" * 64, "rank": rank}
    if started_at is not None:
        other["started_at"] = started_at
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def write_traces(tmp_path: Path, *traces: dict) -> list[str]:
    paths = []
    for number, data in enumerate(traces):
        path = tmp_path / f"trace-{number}.json"
        path.write_text(json.dumps(data))
        paths.append(str(path))
    return paths


def spans_of(merged: dict) -> dict[tuple[int, str], float]:
    return {(e["pid"], e["name"]): e["ts"] for e in merged["traceEvents"] if e["ph"] == "X"}


def test_ranks_become_processes_on_the_earliest_ranks_time_line(tmp_path):
    paths = write_traces(
        tmp_path,
        trace(1, "2026-11-30T10:00:01.500000+00:00", [("import_backend", 0, 2e6)]),
        trace(0, "2026-11-30T10:00:00+00:00", [("import_backend", 0, 3e6),
                                              ("rendezvous", 3e6, 1e3)]))
    merged = merge_traces(paths)
    assert spans_of(merged) == {(0, "import_backend"): 0, (0, "rendezvous"): 3e6,
                                (1, "import_backend"): 1.5e6}  # rank 1 started 1.5 s later
    order = [e["args"]["sort_index"] for e in merged["traceEvents"]
             if e["name"] == "process_sort_index"]
    assert order == [0, 1]
    assert merged["otherData"]["ranks"] == [0, 1]
    assert merged["otherData"]["aligned_on"] == "started_at"


def test_traces_without_a_start_time_are_merged_unaligned(tmp_path):
    paths = write_traces(tmp_path, trace(0, None, [("a", 5, 1)]), trace(1, None, [("a", 7, 1)]))
    merged = merge_traces(paths)
    assert spans_of(merged) == {(0, "a"): 5, (1, "a"): 7}
    assert merged["otherData"]["aligned_on"] == "none"


@pytest.mark.parametrize(("contents", "fragment"), [
    ("{not json", "not JSON"),
    ('{"events": []}', "not a Chrome trace (no traceEvents list)"),
    ('{"traceEvents": [{"pid": 1}, {"pid": 2}]}', "cannot tell which rank wrote it"),
    # issue 19: these gave exit 70, and a merged file that is not JSON
    ("[" * 100_000 + "]" * 100_000, "its JSON nests deeper than Python can read"),
    ('{"traceEvents": [{"pid": 0, "ts": NaN}]}', "NaN is not a JSON number"),
    ('{"traceEvents": [{"pid": 0, "dur": -Infinity}]}', "-Infinity is not a JSON number"),
])
def test_files_that_are_no_rank_trace_are_named(tmp_path, contents, fragment):
    path = tmp_path / "bad.json"
    path.write_text(contents)
    with pytest.raises(InitorchError, match=re.escape(fragment)) as caught:
        merge_traces([str(path)])
    assert "bad.json" in str(caught.value) and caught.value.exit_code == 2


def test_what_is_no_regular_file_is_refused_at_once_like_every_input(tmp_path):
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)  # reading it would block until a writer came
    for path, fragment in ((str(fifo), "not a regular file (a FIFO)"),
                           ("/dev/zero", "not a regular file"),
                           (str(tmp_path), "not a regular file"),
                           (str(tmp_path / "missing.json"), "No such file or directory")):
        with pytest.raises(InitorchError, match=re.escape(fragment)) as caught:
            merge_traces([path])
        assert "cannot read it" in str(caught.value) and caught.value.exit_code == 2


def test_two_files_of_one_rank_are_refused(tmp_path):
    paths = write_traces(tmp_path, trace(0, None, []), trace(0, None, []))
    with pytest.raises(InitorchError, match="are both rank 0"):
        merge_traces(paths)


def test_the_command_writes_the_merged_file(tmp_path, run_cli):
    paths = write_traces(tmp_path, trace(0, None, [("a", 0, 1)]), trace(1, None, [("a", 0, 1)]))
    out = tmp_path / "all.json"
    code, stdout, err = run_cli("trace", "merge", *paths, "-o", str(out))
    assert (code, stdout) == (0, "")
    assert err.startswith("initorch: merged 2 rank(s) into ")
    assert json.loads(out.read_text())["otherData"]["ranks"] == [0, 1]
    code, _, err = run_cli("trace", "merge", *paths, "-o", str(tmp_path / "no" / "x.json"))
    assert code == 2 and "the folder does not exist" in err


# -- per-rank paths ----------------------------------------------------------------------------

def test_rank_placeholders_are_filled_in(tmp_path):
    rank = RankInfo(3, 1, 4, 2)
    assert per_rank_path("--report", str(tmp_path / "run-{rank}-{local_rank}.json"), rank) == \
        str(tmp_path / "run-3-1.json")
    assert per_rank_path("--trace", None, rank) is None
    alone = RankInfo()
    assert per_rank_path("--trace", str(tmp_path / "t.json"), alone) == str(tmp_path / "t.json")


@pytest.mark.parametrize(("name", "fragment"), [
    ("run.json", "every one of the 4 ranks would write this file"),
    ("run-{node}.json", "unknown placeholder {node}"),
    # judged on the paths the placeholders make, not their spelling (issue 19)
    ("out/{rank}/../run.json", "every one of the 4 ranks would write this file"),
    ("{local_rank}/../{rank}/../run.json", "every one of the 4 ranks would write this file"),
])
def test_paths_every_rank_would_share_or_cannot_fill_are_refused(tmp_path, name, fragment):
    with pytest.raises(InitorchError, match=fragment) as caught:
        per_rank_path("--report", str(tmp_path / name), RankInfo(3, 1, 4, 2))
    assert caught.value.exit_code == 2


def test_launch_problems_on_the_command_line_exit_2_before_anything_runs(run_cli):
    code, out, err = run_cli("run", "-p", "cpu", "--nnodes", "2", "--node-rank", "2")
    assert (code, out) == (2, "")
    assert err == ("initorch: error: --node-rank 2 is outside --nnodes 2 (node ranks count "
                   "from 0)\n")
    code, _, err = run_cli("run", "-p", "cpu", "--dist-init-addr", "nowhere")
    assert code == 2 and "--dist-init-addr: 'nowhere' is not HOST:PORT" in err
