"""What a ready teaching says of itself (:class:`Description`): the server's ``/readyz`` body and
the classes every HELLO is checked against."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Description:
    """A ready teaching: its teacher's name, the classes its students segment and where it runs;
    the student's origin (``fresh`` or ``checkpoint``) and the device where this process holds
    them (None where the models are elsewhere)."""

    teacher: str
    class_names: tuple[str, ...]
    where: str
    student: str | None = None
    device: str | None = None

    def shown(self) -> dict[str, Any]:
        """The fields that are known, as ``/readyz`` shows them (the classes as a list)."""
        fields = {**asdict(self), "class_names": list(self.class_names)}
        return {name: value for name, value in fields.items() if value is not None}
