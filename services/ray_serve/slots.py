"""The edges' places on one teaching replica: at most ``capacity``, the least recently used dropped
first."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class SlotTable(Generic[T]):
    """Slots keyed by edge id, made by ``factory(edge_id)`` on first use. Holds at most
    ``capacity``: taking a new one past that drops the least recently used. A dropped slot is only
    forgotten here; a request still running with it keeps it until that request ends."""

    def __init__(self, capacity: int, factory: Callable[[str], T]) -> None:
        if capacity < 1:
            raise ValueError(f"a replica holds at least 1 slot, got {capacity}")
        self.capacity = capacity
        self._factory = factory
        self._slots: OrderedDict[str, T] = OrderedDict()

    def take(self, edge_id: str) -> T:
        """The edge's slot (made now if it has none), now the most recently used."""
        slot = self._slots.get(edge_id)
        if slot is None:
            if len(self._slots) >= self.capacity:
                self._slots.popitem(last=False)
            slot = self._slots[edge_id] = self._factory(edge_id)
        self._slots.move_to_end(edge_id)
        return slot

    def release(self, edge_id: str) -> bool:
        """Forget the edge's slot; False when there was none."""
        return self._slots.pop(edge_id, None) is not None

    def edges(self) -> list[str]:
        """The edges holding a slot, least recently used first."""
        return list(self._slots)

    def slots(self) -> list[T]:
        """The slots, least recently used first."""
        return list(self._slots.values())

    def __len__(self) -> int:
        return len(self._slots)
