"""Ways to label video frames faster than running the student on every whole frame."""
