from speedbench.records import RecordSink, RequestRecord, read_jsonl, read_parquet, write_parquet


def make(i, error=None):
    return RequestRecord(
        request_id=f"r{i}",
        prompt_id=f"p{i}",
        category="coding",
        k=3,
        batch_size=2,
        start_s=1.0,
        end_s=2.5,
        chunk_times_s=[1.1, 1.3],
        chunk_tokens=[1, 4],
        output_token_ids=[5, 6, 7, 8, 9],
        finish_reason="length",
        error=error,
    )


def test_parquet_round_trip(tmp_path):
    recs = [make(0), make(1, error="HTTP 500: boom")]
    back = read_parquet(write_parquet(recs, tmp_path / "r.parquet"))
    assert back == recs


def test_sink_is_durable_and_tolerates_truncated_tail(tmp_path):
    path = tmp_path / "r.jsonl"
    with RecordSink(path) as sink:
        sink.write(make(0))
        sink.write(make(1))
        # Visible on disk before close: a crash here loses nothing written.
        assert len(read_jsonl(path)) == 2
    with path.open("a") as fh:
        fh.write('{"request_id": "r2", "prom')  # crash mid-write
    assert [r.request_id for r in read_jsonl(path)] == ["r0", "r1"]


def test_open_loop_due_times_round_trip_and_old_files_still_read(tmp_path):
    import dataclasses

    import pandas as pd

    due = dataclasses.replace(make(2), scheduled_s=0.75)
    mixed = [make(0), due]  # a closed-loop record (None) beside an open-loop one
    assert read_parquet(write_parquet(mixed, tmp_path / "m.parquet")) == mixed
    assert read_parquet(write_parquet([due], tmp_path / "d.parquet")) == [due]
    # Records written before the field existed read with no due time.
    old = tmp_path / "old.parquet"
    pd.read_parquet(write_parquet([make(0)], old)).drop(columns="scheduled_s").to_parquet(old)
    assert read_parquet(old) == [make(0)]
