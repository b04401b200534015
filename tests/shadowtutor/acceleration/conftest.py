"""One torch thread for these tests: small frames gain nothing from more, and on a busy
machine OpenMP's threads wait for each other."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
