"""Reading the server's compute time from its /metrics text."""

from __future__ import annotations

from shadowtutor_lab.demo.server_time import ServerTime, parse_server_time

METRICS = """# HELP shadowtutor_server_teacher_latency_seconds Time from queueing ...
# TYPE shadowtutor_server_teacher_latency_seconds histogram
shadowtutor_server_teacher_latency_seconds_bucket{le="0.005"} 1.0
shadowtutor_server_teacher_latency_seconds_count 12.0
shadowtutor_server_teacher_latency_seconds_sum 1.5
shadowtutor_server_distill_latency_seconds_count 3.0
shadowtutor_server_distill_latency_seconds_sum 6.25
"""


def test_the_sums_and_counts_are_read_and_subtract_per_run() -> None:
    after = parse_server_time(METRICS)
    assert after == ServerTime(1.5, 12, 6.25, 3)
    assert after - ServerTime(0.5, 2, 0.25, 1) == ServerTime(1.0, 10, 6.0, 2)


def test_a_fresh_server_has_no_samples_and_reads_as_zero() -> None:
    assert parse_server_time("# nothing yet\n") == ServerTime()
