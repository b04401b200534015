"""Change-based inference of the student for static cameras (CBinfer, Cavigelli et al., section 3).

Only what changed since the previous frames is recomputed, layer by layer; caches of layers
before the first tensor a weight update changes stay valid (partial distillation keeps the
front fixed). Modules: :mod:`.sparse_ops` (gather / matmul / scatter primitives),
:mod:`.stages` (the student's layers with their caches), :mod:`.runner` (the per-frame
executor: refresh, fallback, weight updates), :mod:`.thresholds` (tau_l and their file),
:mod:`.calibrate` (choosing tau_l), :mod:`.backend` (the edge's inference backend).
"""
