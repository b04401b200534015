"""DVSNet on the edge: frames cut into regions, each segmented by the student or warped by optical
flow.

``RegionLabeller`` (labeller.py) is the one-device engine; ``grid.py`` cuts frames,
``flow.py`` estimates flow (OpenCV DIS) and warps labels, ``decision.py`` is the decision
network, ``cluster.py`` spreads the regions over an edge cluster on Ray (Yang et al.'s embedded
cluster scheme).
"""
