"""A sweep whose SD config cannot start keeps going and reports the failure (the CLI path).

``speedbench sweep`` runs the same runner as the Prefect flow (tests/integration/
test_fault_tolerance.py covers a killed engine, Ctrl-C and resume through the flow).
"""

from __future__ import annotations

import json

import pytest

from speedbench.cli import main
from speedbench.engines.local import free_port
from speedbench.sweep_summary import SweepSummary

pytestmark = pytest.mark.integration


def test_failed_config_is_reported_and_the_sweep_continues(tiny_pair, tmp_path, capsys):
    target, _ = tiny_pair
    prompts = tmp_path / "hello.jsonl"
    prompts.write_text(json.dumps({"question_id": "p0", "category": "mixed", "turns": ["Hi."]}))
    args = ["sweep", "--model", str(target), "--draft-model", str(tmp_path / "no-draft")]
    args += ["--methods", "none", "draft_model", "--draft-lengths", "2", "--batch-sizes", "1"]
    args += ["--prompt-file", str(prompts), "--output-len", "8", "--dtype", "float32"]
    args += ["--port", str(free_port()), "--out-dir", str(tmp_path / "out"), "--name", "fail"]
    code = main(args)
    err = capsys.readouterr().err
    assert code == 3, err
    assert "FAILED draft_model-k2: engine exited with code" in err
    summary = SweepSummary.read(tmp_path / "out" / "fail" / "summary.json")
    (failure,) = summary.failures
    assert failure.config == "draft_model-k2"
    assert failure.error.startswith("engine exited with code")
    assert "no-draft" in failure.error
    assert summary.status == "failed"
    # The baseline ran first and was measured; the prompt file's split is named after it.
    assert [(r.config, r.split, r.batch_size, r.error_rate) for r in summary.levels] == [
        ("none", "hello", 1, 0.0)
    ]
    assert (tmp_path / "out" / "fail" / "none" / "hello" / "bs1" / "records.parquet").exists()
