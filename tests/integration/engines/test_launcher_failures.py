"""An engine that cannot start: a one-line error quoting its log, and no process left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from speedbench.config import SpecConfig
from speedbench.engines.base import EngineError
from speedbench.engines.local import free_port, launch_local
from speedbench.engines.vllm import cpu_vllm_engine

pytestmark = pytest.mark.integration


def processes_with(fragment: str) -> list[int]:
    """PIDs whose command line contains ``fragment``."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if fragment in cmdline:
            pids.append(int(proc.name))
    return pids


def test_engine_that_fails_to_start_reports_its_log_and_leaves_nothing(tmp_path):
    port = free_port()
    missing = tmp_path / "no-such-model"
    engine = cpu_vllm_engine(str(missing), port=port, env={"HF_HUB_OFFLINE": "1"})
    log = tmp_path / "engine.log"
    with (
        pytest.raises(EngineError) as info,
        launch_local(engine, SpecConfig(), log, warmup=False),
    ):
        pytest.fail("the engine should not have become healthy")
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("engine exited with code ")
    assert "no-such-model" in msg  # the log tail names what was wrong
    assert log.read_text().startswith("$ ")
    assert processes_with(f"--port {port}") == []


def test_timeout_kills_the_process_group(tmp_path):
    # A "server" that never answers health checks: the launcher must give up and kill it.
    port = free_port()
    engine = cpu_vllm_engine("unused", port=port, startup_timeout_s=3)
    # A stand-in engine environment whose `vllm` (what `vllm serve` runs) is a shell script:
    # the shell keeps the launcher's arguments (incl. --port) in its command line; its child
    # sleep is marked by its unique duration. Both must die with the process group.
    (tmp_path / "python").write_text("")
    fake_vllm = tmp_path / "vllm"
    fake_vllm.write_text(f"#!/bin/sh\nsleep 1{port}\n")
    fake_vllm.chmod(0o755)
    engine = engine.model_copy(update={"python": str(tmp_path / "python")})
    with (
        pytest.raises(
            EngineError, match=r"engine not healthy at http://127\.0\.0\.1:\d+ after 3 s"
        ),
        launch_local(engine, SpecConfig(), tmp_path / "e.log", warmup=False),
    ):
        pass
    assert processes_with(f"--port {port}") == []
    assert processes_with(f"sleep 1{port}") == []


def test_missing_engine_environment_is_named(tmp_path):
    engine = cpu_vllm_engine("m", python=str(tmp_path / "nope" / "python"))
    with (
        pytest.raises(EngineError, match=r"engine interpreter not found: .*nope/python"),
        launch_local(engine, SpecConfig(), tmp_path / "e.log"),
    ):
        pass
