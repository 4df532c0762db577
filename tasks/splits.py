"""Tasks that build the splits and provision models (retried: their first step is a download)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task

from speedbench.data.qualitative import QualitativeParams, build_qualitative
from speedbench.data.throughput import ThroughputParams, build_throughput
from speedbench.provision.models import resolve_dtype, resolve_model
from speedbench.tokenize import PromptTokenizer


@task(retries=2, retry_delay_seconds=10)
def provision_model(name: str, dtype: str = "auto") -> str:
    """A packaged model converted once and cached (or a path / hub id passed through)."""
    return resolve_model(name, dtype=resolve_dtype(dtype))


@task(retries=1, retry_delay_seconds=5)
def build_qualitative_split(params: QualitativeParams, out_dir: str) -> dict[str, Any]:
    """The qualitative split and its diversity report."""
    return build_qualitative(params, out_dir, progress=False)


@task(retries=1, retry_delay_seconds=5)
def build_throughput_split(params: ThroughputParams, out_dir: str) -> dict[str, Any]:
    """The throughput buckets, the random control and the length report."""
    tokenizer = PromptTokenizer.from_pretrained(resolve_model(params.tokenizer))
    return build_throughput(
        params,
        out_dir,
        tokenizer,
        progress=False,
        report_path=Path(out_dir).parent / "throughput_report.json",
    )
