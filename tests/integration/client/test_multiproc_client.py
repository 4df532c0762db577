"""The multi-process client: exact in-flight budget, nothing lost when a worker dies."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time

import httpx
import pytest

from speedbench.client.loadgen import auto_workers, slot_counts
from speedbench.client.measure import run_load
from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines import get_engine
from speedbench.workload import LoadSettings, WorkItem

pytestmark = pytest.mark.integration


def test_slots_sum_to_the_batch_size():
    assert slot_counts(5, 2) == [3, 2]
    assert slot_counts(1024, 3) == [342, 341, 341]
    assert slot_counts(2, 4) == [1, 1]


def test_auto_workers_leave_a_core_free():
    assert auto_workers(64, cores=16) == 1
    assert auto_workers(1024, cores=16) == 4
    assert auto_workers(1024, cores=2) == 1
    assert auto_workers(4096, cores=8) == 7


def drive(url, n_items, batch_size, workers, max_tokens=20, parts=None):
    port = int(url.rsplit(":", 1)[1])
    items = [WorkItem(f"p{i}", prompt_ids=(1000 + i, 5)) for i in range(n_items)]
    settings = LoadSettings(
        batch_size=batch_size, max_tokens=max_tokens, show_progress=False, workers=workers
    )
    httpx.post(url + "/reset")
    from speedbench.client.multiproc import run_multiprocess

    engine, spec, adapter = EngineConfig(model="m", port=port), SpecConfig(), get_engine("vllm")
    if workers > 1:
        result = run_multiprocess(
            engine, spec, adapter, items, settings, None, None, workers, parts
        )
    else:
        result = run_load(engine, spec, adapter, items, settings)
    return result, httpx.get(url + "/stats").json()


@pytest.mark.parametrize(("batch_size", "workers"), [(5, 2), (64, 2), (7, 3)])
def test_exactly_n_in_flight_across_workers(paced_server, batch_size, workers):
    # 80 tokens at 4 a step, a step per 10 ms: each request stays open ~200 ms, long enough for
    # all N first requests to overlap even when both cores are busy with other tests' engines
    # (at 20 tokens a loaded 2-core host once peaked at 63 of 64).
    result, stats = drive(paced_server, batch_size * 6, batch_size, workers, max_tokens=80)
    assert len(result.records) == batch_size * 6 and all(r.ok for r in result.records)
    assert stats["max_active"] == batch_size  # never more than N open streams ...
    arrivals = {int(k): v for k, v in stats["active_at_arrival"].items()}
    # ... and N again after the ramp-up, when finished streams' slots send their next requests.
    # (Not "most arrivals see N": with the server and two workers on two busy cores, a refill
    # can land while another finished slot is still between requests.)
    assert arrivals.get(batch_size, 0) > 1
    assert result.extras["client"].workers == workers


def test_results_equal_the_single_process_client(paced_server):
    one, _ = drive(paced_server, 24, 4, workers=1)
    two, _ = drive(paced_server, 24, 4, workers=2)

    def key(result):
        return sorted((r.prompt_id, r.chunk_tokens, r.output_token_ids) for r in result.records)

    assert key(one) == key(two)


def test_no_record_is_lost_when_a_worker_dies(paced_server, tmp_path):
    killed = []

    def kill_a_worker():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not killed:
            part = tmp_path / "worker1.jsonl"
            if part.exists() and part.read_text().count("\n") >= 3:
                for child in multiprocessing.active_children():
                    if child.name == "speedbench-client-1":
                        os.kill(child.pid, signal.SIGKILL)
                        killed.append(child.pid)
            time.sleep(0.02)

    thread = threading.Thread(target=kill_a_worker)
    thread.start()
    # 40 requests of 7-20 SD steps at 10 ms over 4 slots: the run lasts about 1.5 s.
    result, _ = drive(paced_server, 40, 4, workers=2, max_tokens=40, parts=tmp_path)
    thread.join()
    assert killed
    assert len(result.records) == 40
    assert len({r.prompt_id for r in result.records}) == 40
    died = [r for r in result.records if not r.ok]
    assert died and {r.error_kind for r in died} == {"client_died"}
    assert all("worker 1 exit code -9" in r.error for r in died)
    assert len(died) <= 2  # at most the dead worker's slots were in flight
    finished_by_dead_worker = (tmp_path / "worker1.jsonl").read_text().count("\n")
    assert finished_by_dead_worker >= 3
    assert sum(r.ok for r in result.records) == 40 - len(died)
    assert result.extras["client_died"] == ["worker 1 exit code -9"]


def test_client_report_merges_workers_and_warns_exactly():
    from speedbench.client.selfmeasure import WorkerMonitor, client_report
    from speedbench.figures import DelayFigures

    busy = WorkerMonitor(lag_ns=[1_000_000] * 99 + [9_000_000], cpu_s=0.95, wall_s=1.0)
    idle = WorkerMonitor(lag_ns=[0] * 100, delays_ns=[2_000_000, 4_000_000], cpu_s=0.2, wall_s=1.0)
    report = client_report([busy, idle])
    assert report.workers == 2
    assert report.cpu_fraction == [0.95, 0.2]
    assert report.loop_lag is not None
    assert report.loop_lag.count == 200 and report.loop_lag.max_ms == 9.0
    assert report.chunk_delay == DelayFigures(count=2, p50_ms=3.0, p99_ms=3.98, max_ms=4.0)
    assert report.warning == (
        "the client may have limited this result: a client worker used 95% of a core (add workers)"
    )
    assert client_report([idle]).warning is None
