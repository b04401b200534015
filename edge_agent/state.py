"""The edge's own student between runs: the last weights it held, kept on disk, or the packaged one.

An edge that starts while its server is unreachable labels with this student until the server
answers. The state file (``STATE_DIR/<edge_id>.student.pt``) records where its weights came
from (server URL, session, version); it is written atomically (a crash leaves the previous
file), and one that is corrupt or does not fit is logged and ignored. Its version is never sent
to a server: every session starts from the WELCOME's weights (docs/protocol.md, item 8).
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from shadowtutor.models.checkpoint import CheckpointError, student_from_state_dict
from shadowtutor.models.pretrained import load_default_student

log = logging.getLogger(__name__)

STATE_FORMAT = "shadowtutor-edge-state/1"


@dataclass(kw_only=True, frozen=True)
class LocalStudent:
    """Full student weights the edge holds on its own. ``origin``: ``state`` (a state file) or
    ``packaged``."""

    tensors: dict[str, torch.Tensor]
    class_names: tuple[str, ...]
    origin: str
    server: str | None = None
    session_id: str | None = None
    version: int | None = None
    saved_at: float | None = None

    def describe(self) -> dict[str, Any]:
        """For the run summary: where the start-up weights came from (no tensors)."""
        return {
            "origin": self.origin,
            "server": self.server,
            "session_id": self.session_id,
            "version": self.version,
            "saved_at": self.saved_at,
        }


def state_path(state_dir: Path, edge_id: str) -> Path:
    """One file per edge id (several agents may share a state directory)."""
    return state_dir / f"{re.sub(r'[^A-Za-z0-9._-]', '_', edge_id)}.student.pt"


def _temporary(path: Path, pid: int) -> Path:
    return path.with_name(f".{path.name}.{pid}.tmp")


def remove_stale_temporaries(path: Path) -> list[Path]:
    """Delete the temporary files of ``path`` left by writers that died mid-save (their process is
    gone); returns what was removed."""
    removed = []
    for tmp in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        pid = tmp.name[len(path.name) + 2 : -len(".tmp")]
        if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
            continue
        with contextlib.suppress(OSError):
            tmp.unlink()
            removed.append(tmp)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        # e.g. another user's process
        return True
    return True


def save_state(path: Path, student: LocalStudent) -> None:
    """Write atomically: a temporary file in the same directory (mode 0600), flushed, then renamed
    over ``path``; the temporaries of writers that died are removed first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    blob = {
        "format": STATE_FORMAT,
        "class_names": list(student.class_names),
        "server": student.server,
        "session_id": student.session_id,
        "version": student.version,
        "saved_at": student.saved_at,
        "state_dict": student.tensors,
    }
    tmp = _temporary(path, os.getpid())
    try:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out:
            # readable by the agent's user only, whatever its umask
            os.fchmod(out.fileno(), 0o600)
            torch.save(blob, out)
            out.flush()
            os.fsync(out.fileno())
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def load_state(path: Path, class_names: tuple[str, ...]) -> LocalStudent | None:
    """The saved student, or None when there is none or it cannot be used (logged). Temporaries left
    by a writer that died are removed."""
    if path.parent.is_dir():
        for tmp in remove_stale_temporaries(path):
            log.info("removed %s, left by an agent that stopped while saving", tmp)
    if not path.is_file():
        return None
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(blob, Mapping) or blob.get("format") != STATE_FORMAT:
            raise CheckpointError(f"not an edge state file (format {STATE_FORMAT!r})")
        if tuple(blob["class_names"]) != tuple(class_names):
            raise CheckpointError(
                f"its classes {list(blob['class_names'])} are not this edge's {list(class_names)}"
            )
        tensors = dict(blob["state_dict"])
        # the weights fit the student
        student_from_state_dict(tensors, class_names)
        version = blob.get("version")
        return LocalStudent(
            tensors=tensors,
            class_names=tuple(class_names),
            origin="state",
            server=blob.get("server"),
            session_id=blob.get("session_id"),
            version=None if version is None else int(version),
            saved_at=blob.get("saved_at"),
        )
    except Exception as exc:
        # torch raises many types for a damaged file; none may stop the edge
        log.warning("ignoring the edge state file %s: %s", path, exc)
        return None


def initial_student(state_file: Path | None, class_names: tuple[str, ...]) -> LocalStudent | None:
    """What the edge labels with before the server answers: its saved weights, else the packaged
    student.

    None when neither fits ``class_names`` (the edge then waits for the server's weights).
    """
    if state_file is not None and (saved := load_state(state_file, class_names)) is not None:
        log.info(
            "starting with the weights held last (session %s, version %s, from %s)",
            saved.session_id,
            saved.version,
            saved.server,
        )
        return saved
    try:
        packaged = load_default_student()
    except CheckpointError as exc:
        log.warning("no packaged student to start with: %s", exc)
        return None
    if tuple(packaged.class_names) != tuple(class_names):
        log.warning(
            "the packaged student's classes %s are not this edge's %s: waiting for the server's "
            "weights",
            list(packaged.class_names),
            list(class_names),
        )
        return None
    tensors = {name: value.detach().clone() for name, value in packaged.model.state_dict().items()}
    return LocalStudent(tensors=tensors, class_names=tuple(class_names), origin="packaged")


class StateKeeper:
    """Saves the held weights to the state file at most every ``interval`` seconds, and at
    :meth:`flush`.

    A save that fails (disk full) is logged and reported through ``on_dropped``; the edge goes on.
    """

    def __init__(
        self,
        path: Path,
        server: str,
        interval: float,
        *,
        on_dropped: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.server = server
        self.interval = interval
        self.on_dropped = on_dropped
        self.clock = clock
        self.saves = 0
        self._last_save: float | None = None
        self._unsaved: tuple[dict[str, torch.Tensor], tuple[str, ...], str | None, int] | None = (
            None
        )

    def held(
        self,
        tensors: Mapping[str, torch.Tensor],
        class_names: tuple[str, ...],
        session_id: str | None,
        version: int,
    ) -> None:
        """The edge now holds these weights; saved now if the last save is ``interval`` old."""
        self._unsaved = (dict(tensors), class_names, session_id, version)
        now = self.clock()
        if self._last_save is None or now - self._last_save >= self.interval:
            self.flush()

    def flush(self) -> None:
        if self._unsaved is None:
            return
        tensors, class_names, session_id, version = self._unsaved
        self._unsaved = None
        self._last_save = self.clock()
        try:
            save_state(
                self.path,
                LocalStudent(
                    tensors=tensors,
                    class_names=class_names,
                    origin="state",
                    server=self.server,
                    session_id=session_id,
                    version=version,
                    saved_at=time.time(),
                ),
            )
            self.saves += 1
        except OSError as exc:
            log.warning("cannot save the held weights to %s: %s", self.path, exc)
            self.on_dropped()
