"""A rank's session without a running SGLang: planning that only observes, and the
account of initorch's own time in the process."""

from __future__ import annotations

import logging

import pytest

from initorch.errors import ProfileError
from initorch.kit import Cost, process_age
from initorch_sglang.options import Options
from initorch_sglang.selection import Selection
from initorch_sglang.verify import plan_for
from tests.sglang.helpers import sglang_registry

# A value SGLang never reads and initorch refuses: the plan cannot be made.
UNPLANNABLE = Selection(("sglang",), "cpu", (("parallel.tp_size", "two"),))


def test_verify_reports_a_plan_problem_and_lets_sglang_start(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="initorch_sglang"):
        assert plan_for(UNPLANNABLE, sglang_registry(), Options(mode="verify")) is None
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert lines[0].startswith("initorch-sglang: verify is off for this rank, no plan for "
                               "this launch (initorch plan --device cpu -p sglang --set "
                               "parallel.tp_size=two)")


def test_drive_cannot_run_without_its_plan() -> None:
    with pytest.raises(ProfileError):
        plan_for(UNPLANNABLE, sglang_registry(), Options(mode="drive"))


def test_the_cost_is_a_share_of_the_process_time_to_up() -> None:
    cost = Cost()
    cost.add("plugin load", 0.1)
    cost.add("recording", 0.05)
    cost.add("recording", 0.05)
    account = cost.to_dict(20.0)
    assert account == {"phases_s": {"plugin load": 0.1, "recording": 0.1}, "total_s": 0.2,
                       "process_up_s": 20.0, "share": 0.01}
    assert cost.line(20.0).startswith("initorch's own time in this process: 0.200 s of 20.0 s "
                                      "from process start to up (1.00%;")
    assert cost.to_dict(None)["share"] is None


def test_the_process_age_counts_from_the_process_start() -> None:
    age = process_age()
    assert age is not None and age > 0


def test_the_rank_comes_from_the_constructors_arguments_where_it_takes_them() -> None:
    from types import SimpleNamespace

    from initorch_sglang.verify import world_rank

    def scheduler_init(self, server_args, port_args, gpu_id, tp_rank, moe_ep_rank,  # type: ignore[no-untyped-def]
                       pp_rank, dp_rank):
        """Scheduler.__init__ as SGLang 0.5.19 declares it."""

    args = SimpleNamespace(tp_size=2)
    assert world_rank(scheduler_init, object(), args, None, 1, 1, 0, 1, None) == 3
    assert world_rank(scheduler_init, object(), args, None, 0, tp_rank=0, moe_ep_rank=0,
                      pp_rank=0, dp_rank=None) == 0
