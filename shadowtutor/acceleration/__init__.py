"""Ways to label video frames faster than running the student on every whole frame: change-based
inference for static cameras (:mod:`.change_based`), regions with a flow path and an edge cluster
(:mod:`.regions`)."""
