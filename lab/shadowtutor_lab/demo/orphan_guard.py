"""``python -m shadowtutor_lab.demo.orphan_guard PARENT_PID -- COMMAND...``: run COMMAND, ended with its parent.

On Linux it asks the kernel (``prctl(PR_SET_PDEATHSIG, SIGTERM)``) to send SIGTERM to this
process when the thread that started it exits, for whatever reason (SIGKILL included), then
replaces itself with COMMAND (same pid; the request survives ``exec``). If the parent is already
gone (it died before the request was made), it exits at once. Elsewhere it only runs COMMAND.

A wrapper rather than ``subprocess.Popen(preexec_fn=...)``: ``preexec_fn`` runs Python in the
forked child of a possibly multi-threaded parent, which can deadlock on a lock another thread
held at the fork; this wrapper is a fresh, single-threaded interpreter.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def guarded(parent_pid: int, command: list[str]) -> list[str]:
    """The argument list that runs ``command`` under this guard for the process ``parent_pid``."""
    return [sys.executable, "-m", __name__, str(parent_pid), "--", *command]


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(f"usage: python -m {__name__} PARENT_PID -- COMMAND...", file=sys.stderr)
        return 2
    parent_pid, command = int(argv[0]), argv[2:]
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            print(f"orphan_guard: prctl failed: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
            return 1
        if os.getppid() != parent_pid:  # the parent died before the request: do not start an orphan
            return 1
    os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
