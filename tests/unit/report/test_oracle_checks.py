"""The report's table of measured SD levels against the oracle: one row per baseline and level."""

from __future__ import annotations

from speedbench.oracle.predict import OracleCheck, OracleK, OracleLevel
from speedbench.report.oracle import check_table


def level(batch_size: int, predicted: float) -> OracleLevel:
    check = OracleCheck(config="ngram-k3", batch_size=4, compared=6, identical=5,
                        output_differs=1, steps_differ=0, predicted_al=predicted,
                        measured_al=2.128)  # fmt: skip
    at_k3 = OracleK(k=3, views={}, per_category={}, drafted_fraction=0.74,
                    checks=[check])  # fmt: skip
    return OracleLevel(drafter="ngram", split="throughput_1k", batch_size=batch_size,
                       baseline="/b", requests=6, questions=6, seconds=0.0, tokens=1,
                       by_k=[at_k3])  # fmt: skip


def test_each_row_names_the_oracle_baseline_it_was_checked_against():
    head, rule, *rows = check_table([level(1, 2.128), level(4, 2.1)])
    assert head.startswith("| oracle baseline | measured level | load |")
    assert rule.count("---") == head.count("|") - 1
    assert rows == [
        "| throughput_1k bs1 | ngram-k3 | bs4 | 6 | 5 | 1 | 0 | 2.128 | 2.128 | - |",
        "| throughput_1k bs4 | ngram-k3 | bs4 | 6 | 5 | 1 | 0 | 2.100 | 2.128 | - |",
    ]
