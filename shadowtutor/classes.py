"""Class lists shared by the student, the teachers and the scenes."""

from __future__ import annotations

# The eight moving object classes of the LVS dataset plus background, in the order of the
# authors' student checkpoint (background last).
LVS_CLASSES: tuple[str, ...] = (
    "person",
    "bicycle",
    "auto",
    "bird",
    "dog",
    "horse",
    "elephant",
    "giraffe",
    "background",
)


def background_index(class_names: tuple[str, ...] | list[str]) -> int:
    """Index of the ``background`` class; a class list without one is an error."""
    try:
        return list(class_names).index("background")
    except ValueError:
        raise ValueError(f"the class list {list(class_names)} has no 'background' class") from None
