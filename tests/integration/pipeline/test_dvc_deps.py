"""DVC re-runs the measure stages when the code that shapes their numbers changes.

A copy of the project's pipeline (dvc.yaml, params.yaml and the code it depends on) with
stand-in outputs is committed with the real DVC; then ``src/speedbench/tokenize.py`` is touched
and ``dvc repro --dry`` must list both measure stages.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from speedbench import REPO_ROOT

pytestmark = pytest.mark.integration
ROOT = REPO_ROOT
DVC = str(Path(sys.executable).with_name("dvc"))


def dvc(cwd: Path, *args: str) -> str:
    done = subprocess.run([DVC, *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pipeline")
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(ROOT / name, root / name)
    for tree in ("src", "flows", "tasks", "results/reference"):
        shutil.copytree(ROOT / tree, root / tree, ignore=shutil.ignore_patterns("*.egg-info"))
    stages = yaml.safe_load((root / "dvc.yaml").read_text())["stages"]
    for stage in stages.values():
        for out in stage.get("outs", []) + stage.get("metrics", []) + stage.get("plots", []):
            path = root / (out if isinstance(out, str) else next(iter(out)))
            if "." in path.name:  # a file
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("{}\n")
            else:
                path.mkdir(parents=True, exist_ok=True)
                (path / "stand-in.txt").write_text("x\n")
    dvc(root, "init", "--no-scm", "-q")
    dvc(root, "config", "core.analytics", "false")
    dvc(root, "commit", "-f", "-q")
    return root


def test_a_committed_pipeline_is_up_to_date(pipeline):
    assert "Data and pipelines are up to date" in dvc(pipeline, "status")


def test_touching_tokenization_re_runs_the_measure_stages(pipeline):
    tokenize = pipeline / "src" / "speedbench" / "tokenize.py"
    tokenize.write_text(tokenize.read_text() + "\n# changed\n")
    planned = dvc(pipeline, "repro", "--dry")
    for stage in ("build_throughput", "measure_qualitative", "measure_throughput"):
        assert f"Running stage '{stage}'" in planned, planned
    assert "Running stage 'build_qualitative'" not in planned  # it does not tokenize
