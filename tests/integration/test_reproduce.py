"""`dvc repro` of the small CI preset, in a scratch worktree, reproduces the committed acceptance.

This is the project's published-number guarantee at small scale: greedy acceptance (AL per
category, conditional AR per position) from a fresh pipeline run equals results/reference/ci
exactly. Throughput is hardware-bound and only printed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


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
    assert "acceptance matches the reference exactly (qualitative, throughput)" in proc.stdout, tail
