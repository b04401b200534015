"""Real processes for the end-to-end tests: the product's own launcher (shadowtutor_lab.demo.processes)."""

from shadowtutor_lab.demo.processes import (
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
