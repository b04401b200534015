"""Seed 004 / DVSNet on the edge: frames cut into regions, each segmented by the student or warped by optical flow.

``RegionLabeller`` (labeller.py) is the one-device engine; ``grid.py`` cuts frames,
``flow.py`` estimates flow (OpenCV DIS) and warps labels, ``decision.py`` is the decision
network, ``training.py`` makes its training data and trains it, ``bench.py`` measures it.
"""
