"""Tasks that build the splits (retried once: a source may be read from a download)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task

from speedbench.data.qualitative import QualitativeParams, build_qualitative
from speedbench.data.throughput import ThroughputParams, build_throughput
from speedbench.provision.models import resolve_model
from speedbench.tokenize import PromptTokenizer


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
