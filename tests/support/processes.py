"""Real processes for the end-to-end tests: the product's own launcher (shadowtutor.demo.processes)."""

from shadowtutor.demo.processes import (
    LOOPBACK,
    ManagedProcess,
    ProcessFailed,
    free_port,
    shadowtutor_command,
    start_process,
    wait_http_ok,
)

__all__ = [
    "LOOPBACK",
    "ManagedProcess",
    "ProcessFailed",
    "free_port",
    "shadowtutor_command",
    "start_process",
    "wait_http_ok",
]
