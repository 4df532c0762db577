"""Which MLflow runs a pool sweep gathers, on a real MLflow store (SQLite): no engine, no pool."""

from __future__ import annotations

import pytest

from speedbench.sweep_config import SweepConfig

pytestmark = pytest.mark.integration


@pytest.fixture
def store(tmp_path):
    from tasks.tracking import Tracker

    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "gather")
    earlier, now = tracker.start_parent("earlier", {}), tracker.start_parent("now", {})

    def level(parent: str, status: str = "FINISHED") -> str:
        return tracker.log_config(parent, "none s bs1", {}, "h1", {}, {}, status=status)

    runs = {"earlier": level(earlier), "now": level(now), "failed": level(now, "FAILED")}
    return tracker, now, runs


def form(**fields) -> SweepConfig:
    return SweepConfig(name="g", model="m", out_dir="out", **fields)


def test_after_dispatch_this_sweeps_own_run_wins_over_an_earlier_one(store):
    from flows.pool import GatherHooks

    tracker, now, runs = store
    for force in (False, True):
        hooks = GatherHooks(form(force=force), tracker, now, ended={})
        assert hooks.done == {"h1": runs["now"]}
        assert hooks.logged_failures == {"h1"}  # its worker said why: no second FAILED run


def test_before_dispatch_force_counts_every_level_as_missing(store):
    from flows.pool import GatherHooks

    tracker, now, runs = store
    assert GatherHooks(form(force=True), tracker, now).done == {}
    assert GatherHooks(form(), tracker, now).done["h1"] in (runs["earlier"], runs["now"])
