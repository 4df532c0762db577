"""Engine core binding: CPU lists, OpenMP settings, the client's cores, contention, kernel caps.

The client keeps off the engine's cores, and contention counts only processes on them.
"""

from __future__ import annotations

import os

import pytest

from speedbench.config import EngineConfig
from speedbench.engines.running import engine_environment
from speedbench.figures import Competitor
from speedbench.hostcheck import contention
from speedbench.hostcheck.contention import HostSnapshot, ProcSample
from speedbench.hostcheck.cpu import (
    ENGINE_CPUS_ENV,
    cpu_info,
    format_cpu_list,
    keep_off,
    kernel_caps,
    openmp_binding_env,
    parse_cpu_list,
)
from speedbench.provenance import SweepProvenance
from speedbench.report.text import host_line
from speedbench.sweep_summary import SweepSummary


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("0", (0,)), ("0-3,8", (0, 1, 2, 3, 8)), ("5,1-2", (1, 2, 5)), (" 2 , 2", (2,))],
)
def test_cpu_lists_parse_like_taskset(text, cpus):
    assert parse_cpu_list(text) == cpus


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("a", "not a CPU list"),
        ("1-", "not a CPU list"),
        ("", "not a CPU list"),
        ("3-1", "backwards"),
    ],
)
def test_bad_cpu_lists_are_named(text, problem):
    with pytest.raises(ValueError, match=problem):
        parse_cpu_list(text)


def test_cpu_lists_format_shortest():
    assert format_cpu_list({0, 1, 2, 5}) == "0-2,5"
    assert format_cpu_list((7,)) == "7"
    assert format_cpu_list(frozenset({0, 2, 3, 4, 7, 8})) == "0,2-4,7-8"


def test_engine_cores_come_from_the_host_unless_the_config_names_them(monkeypatch):
    monkeypatch.delenv(ENGINE_CPUS_ENV, raising=False)
    assert EngineConfig(model="m").cpus is None
    assert EngineConfig(model="m").cpu_ids == ()
    monkeypatch.setenv(ENGINE_CPUS_ENV, "3,1-2")
    assert EngineConfig(model="m").cpus == "1-3"
    assert EngineConfig(model="m", cpus="0").cpu_ids == (0,)
    with pytest.raises(ValueError, match="not a CPU list: 'x'"):
        EngineConfig(model="m", cpus="x")


@pytest.mark.parametrize(
    ("fields", "cores"),
    [
        ({}, frozenset({1, 2})),
        ({"launcher": "docker"}, frozenset({1, 2})),
        ({"launcher": "docker", "docker_host": "unix:///var/run/docker.sock"}, frozenset({1, 2})),
        ({"launcher": "docker", "docker_host": "ssh://gpu-7"}, frozenset()),
        ({"launcher": "docker", "docker_host": "tcp://10.0.0.7:2376"}, frozenset()),
        ({"launcher": "external"}, frozenset()),
        ({"cpus": None}, frozenset()),
    ],
)
def test_engine_cores_count_on_this_host_only_where_the_engine_runs_here(
    monkeypatch, fields, cores
):
    from speedbench.run.level import engine_cores_here

    monkeypatch.delenv("DOCKER_HOST", raising=False)
    engine = EngineConfig(model="m", **{"cpus": "1-2", **fields})
    assert engine_cores_here(engine) == cores


def test_openmp_binding_is_one_bound_thread_per_core():
    assert openmp_binding_env((2, 3)) == {
        "OMP_NUM_THREADS": "2",
        "OMP_PLACES": "{2,3}",
        "OMP_PROC_BIND": "true",
    }


def test_the_client_keeps_off_the_engine_cores_and_comes_back():
    mine = frozenset(os.sched_getaffinity(0))
    engine = frozenset({min(mine)})
    with keep_off(engine) as client:
        assert frozenset(os.sched_getaffinity(0)) == client
        # With one core only there is nowhere else to go: the client shares it.
        assert client == ((mine - engine) or mine)
    assert frozenset(os.sched_getaffinity(0)) == mine
    with keep_off(frozenset()) as unbound:
        assert unbound == mine


def test_contention_counts_only_processes_allowed_on_the_engine_cores(monkeypatch):
    def sample(pid, name, cpu_s):
        return ProcSample(pid, name, cpu_s, ppid=1, pgid=pid)

    before = HostSnapshot(0.0, {10: sample(10, "hog-a", 0.0), 11: sample(11, "hog-b", 0.0)}, 0.0)
    after = HostSnapshot(10.0, {10: sample(10, "hog-a", 9.0), 11: sample(11, "hog-b", 4.0)}, 13.0)
    allowed = {10: frozenset({0}), 11: frozenset({1})}
    monkeypatch.setattr(contention, "allowed_cpus", allowed.get)
    monkeypatch.setattr(contention, "other_engines", lambda procs, ours, cores=None: [])

    def ours(pid):
        return False

    on_core_1 = contention.compare(before, after, ours, 0.10, frozenset({1}))
    assert on_core_1.cores == 1
    assert on_core_1.competitors == [Competitor(name="hog-b", pid=11, cpu_s=4.0)]
    assert on_core_1.others_fraction == pytest.approx(0.4)
    assert on_core_1.flagged
    whole = contention.compare(before, after, ours, 0.10)
    assert whole.others_cpu_s == pytest.approx(13.0)
    assert [c.name for c in whole.competitors] == ["hog-a", "hog-b"]


@pytest.mark.parametrize(
    ("cmdline", "engine"),
    [
        (b"/e/bin/python\0-m\0vllm.entrypoints.openai.api_server\0--port\0800", True),
        (b"VLLM::EngineCore\0", True),
        (b"/usr/bin/vllm\0serve\0Qwen/Qwen2.5-7B", True),
        (b"python3\0-m\0sglang.launch_server\0--model-path\0/m", True),
        (b"/opt/llama/bin/llama-server\0-m\0/m.gguf", True),
        (b"python\0-m\0pytest\0tests/integration/engines/test_vllm_qwen.py", False),
        (b"timeout\01200\0python\0-m\0pytest\0test_vllm_exact.py", False),
    ],
)
def test_engine_processes_are_told_by_their_server_not_by_a_mention(cmdline, engine):
    assert contention.is_engine_cmdline(cmdline) is engine


AVX2_CPUINFO = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse4_2 avx avx2 fma\n"


def test_kernel_caps_in_the_engine_environment_are_recorded_and_described():
    env = {"ONEDNN_MAX_CPU_ISA": "AVX", "ATEN_CPU_CAPABILITY": "", "PATH": "/bin"}
    info = cpu_info(AVX2_CPUINFO, engine_env=env)
    assert info.kernel_family == "avx2"
    assert info.kernel_caps == {"ONEDNN_MAX_CPU_ISA": "AVX"}
    assert info.describe() == (
        "AMD EPYC, 1 cores, AVX-512 no, native bf16 no, AMX no "
        "(kernels: avx2, ONEDNN_MAX_CPU_ISA=AVX)"
    )
    assert cpu_info(AVX2_CPUINFO).kernel_caps == {}


def test_a_local_engine_inherits_the_shell_and_a_container_does_not(monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "SSE41")
    local = EngineConfig(model="m", launcher="local", env={"ATEN_CPU_CAPABILITY": "default"})
    docker = EngineConfig(model="m", launcher="docker", env={"ATEN_CPU_CAPABILITY": "default"})
    assert kernel_caps(engine_environment(local)) == {
        "ONEDNN_MAX_CPU_ISA": "SSE41",
        "ATEN_CPU_CAPABILITY": "default",
    }
    assert kernel_caps(engine_environment(docker)) == {"ATEN_CPU_CAPABILITY": "default"}


def test_the_report_names_a_kernel_cap_beside_the_cpu():
    cpu = cpu_info(AVX2_CPUINFO, engine_env={"ONEDNN_MAX_CPU_ISA": "AVX"})
    summary = SweepSummary(levels=[], provenance=SweepProvenance(host_cpu=cpu, dtype="float32"))
    assert host_line({"qualitative": summary}) == (
        "1 cores, kernels avx2 (ONEDNN_MAX_CPU_ISA=AVX), AVX-512 no, bf16 emulated, AMX no, "
        "dtype float32"
    )


def test_processes_that_end_within_the_level_count_as_others(monkeypatch):
    monkeypatch.setattr(contention, "other_engines", lambda procs, ours, cores=None: [])
    monkeypatch.setattr(contention.os, "sched_getaffinity", lambda pid: {0, 1})

    def sample(pid, name, cpu_s, children_s=0.0):
        return ProcSample(pid, name, cpu_s, ppid=0, pgid=pid, children_cpu_s=children_s)

    before = HostSnapshot(0.0, {1: sample(1, "init", 0.0), 50: sample(50, "client", 0.0)}, 0, 0)
    after = HostSnapshot(
        10.0, {1: sample(1, "init", 0.1, 3.0), 50: sample(50, "client", 2.0, 1.5)}, 0.0, 8.0
    )
    host = contention.compare(before, after, lambda pid: pid == 50)
    # Ours: the client's 2.0 s and its ended workers' 1.5 s. Others: init's own 0.1 s, the
    # 3.0 s of a detached process it reaped, and 8.0 - (0.1 + 3.0 + 2.0 + 1.5) = 1.4 s of
    # host process time nobody has waited for yet.
    assert host.ours_cpu_s == pytest.approx(3.5)
    ended = host.competitors[0]
    assert (ended.name, ended.pid, ended.cpu_s) == (contention.ENDED, 0, pytest.approx(4.4))
    assert host.others_cpu_s == pytest.approx(4.5)
    assert host.others_fraction == pytest.approx(4.5 / 20) and host.flagged
    assert "processes that ended during the level (4.4 s)" in (host.warning or "")
