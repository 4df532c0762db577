"""The ``build_splits`` flow: the qualitative and throughput splits, from params or the UI form."""

from __future__ import annotations

from typing import Any

from prefect import flow

from speedbench.data.qualitative import QualitativeParams
from speedbench.data.throughput import ThroughputParams
from tasks.splits import build_qualitative_split, build_throughput_split


@flow(name="build_splits", log_prints=True)
def build_splits(
    qualitative: QualitativeParams | None = None,
    throughput: ThroughputParams | None = None,
    data_dir: str = "data",
) -> dict[str, Any]:
    """Build both splits into ``data_dir`` (defaults: the embedded run's params)."""
    report = build_qualitative_split(qualitative or QualitativeParams(), f"{data_dir}/qualitative")
    lengths = build_throughput_split(throughput or ThroughputParams(), f"{data_dir}/throughput")
    print(f"qualitative: {report['rows']} prompts; throughput buckets: {list(lengths['buckets'])}")
    return {"qualitative_rows": report["rows"], "throughput": lengths["buckets"]}
