from __future__ import annotations

import threading
import time

import pytest

from edge_agent.pending import Pending


def test_resolved_from_another_thread_wakes_the_waiter() -> None:
    pending: Pending[int] = Pending()
    assert not pending.done() and not pending.wait(0.01)
    threading.Timer(0.05, pending.resolve, args=(7,)).start()
    assert pending.wait(5)
    assert pending.result() == 7 and pending.resolved_at >= pending.submitted_at


def test_only_the_first_answer_counts() -> None:
    pending: Pending[int] = Pending()
    assert pending.resolve(1)
    assert not pending.resolve(None)
    assert pending.result() == 1


def test_failed_is_done_with_none_at_once() -> None:
    started = time.monotonic()
    pending = Pending.failed()
    assert pending.wait(10) and pending.result() is None
    assert time.monotonic() - started < 0.1


def test_result_before_the_answer_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="before the reply"):
        Pending().result()
