"""tc shaping: the commands, and (as root) that a timed transfer really runs at the shaped rate each way."""

from __future__ import annotations

import pytest

from shadowtutor_lab.netbench.netns import NamespaceLink, Side
from shadowtutor_lab.netbench.probe import measure_link
from shadowtutor_lab.netbench.shaping import LinkShape, apply_shape, describe_shaping

SIDE = Side("ns-a", "st-edge", "10.201.0.2")


def test_tbf_alone_with_a_small_bucket() -> None:
    shape = LinkShape(8.0)
    assert shape.burst_bytes == 4096  # 4 ms at 8 Mbps is 4000 B: the floor applies
    assert LinkShape(90.0).burst_bytes == 45_000  # 4 ms at 90 Mbps
    assert shape.qdisc_commands(SIDE) == [
        ["tc", "-n", "ns-a", "qdisc", "add", "dev", "st-edge", "root", "handle", "1:",
         "tbf", "rate", "8mbit", "burst", "4096", "latency", "100ms"],
    ]


def test_added_delay_puts_netem_in_front_of_the_bucket() -> None:
    commands = LinkShape(12.5, latency_ms=50, delay_ms=20).qdisc_commands(SIDE)
    assert commands[0][7:] == ["root", "handle", "1:", "netem", "delay", "20ms"]
    assert commands[1][7:] == ["parent", "1:", "handle", "10:", "tbf", "rate", "12.5mbit", "burst", "6250",
                               "latency", "50ms"]


@pytest.mark.parametrize("bad", [dict(mbps=0), dict(mbps=8, latency_ms=0), dict(mbps=8, delay_ms=-1)])
def test_bad_shapes_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        LinkShape(**bad)


@pytest.mark.usefixtures("netns")
def test_a_timed_transfer_runs_at_the_shaped_rate_both_ways() -> None:
    with NamespaceLink() as link:
        for mbps in (8.0, 40.0):
            apply_shape(link, LinkShape(mbps))
            assert f"rate {mbps:g}Mbit" in describe_shaping(link)["edge"]
            check = measure_link(link.server.namespace, link.server.address, link.edge.namespace, mbps, 0.6)
            # TCP goodput: under the rate by the headers (~5 %) and slow start, never above it
            for measured in (check.up_mbps, check.down_mbps):
                assert 0.8 * mbps <= measured <= 1.01 * mbps, check
