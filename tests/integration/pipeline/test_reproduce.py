"""`dvc repro` of the small CI preset, in a scratch worktree, reproduces the committed acceptance.

This is the project's published-number guarantee at small scale: greedy acceptance (AL per
category, conditional AR per position) from a fresh pipeline run equals results/reference/ci
exactly on a CPU of the reference's kernel family. On another family float32 kernels sum in
another order, so only the statistical verdict is promised there
(src/speedbench/pipeline/verify.py).
Speedups get their own verdicts (pipeline/verify_speedup.py), printed beside acceptance's; they
do not decide the exit code.
"""

from __future__ import annotations

import subprocess

import pytest

from speedbench import REPO_ROOT
from speedbench.config import EngineConfig
from speedbench.engines.running import engine_environment
from speedbench.hostcheck.cpu import cpu_info
from speedbench.provenance import SweepProvenance

# Whole jobs, about 4 minutes of a core each: `make test-e2e` (in .ci/run), not make test.
pytestmark = [pytest.mark.integration, pytest.mark.e2e]
ROOT = REPO_ROOT
REFERENCE = ROOT / "results" / "reference" / "ci"


def exactness_promised_here() -> bool:
    """Whether this host runs the reference's kernels (its family, no kernel caps)."""
    ref = SweepProvenance.read(REFERENCE / "qualitative" / "provenance.json")
    assert ref is not None and ref.host_cpu is not None
    local = EngineConfig(model="m", launcher="local")
    here = cpu_info(engine_env=engine_environment(local))
    return (ref.host_cpu.kernel_family, ref.host_cpu.kernel_caps) == (
        here.kernel_family,
        here.kernel_caps,
    )


def test_ci_preset_reproduces_the_committed_acceptance_exactly():
    proc = subprocess.run(
        [str(ROOT / "scripts" / "reproduce.sh"), "presets/ci.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=2400,
    )
    tail = proc.stdout[-4000:] + proc.stderr[-4000:]
    assert proc.returncode == 0, tail
    if exactness_promised_here():
        assert "acceptance matches the reference exactly (qualitative, throughput)" in proc.stdout
    else:
        assert "verdict: reproduced" in proc.stdout or "verdict: exact" in proc.stdout, tail
    assert "speedups: " in proc.stdout, tail
