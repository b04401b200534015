"""The edge's frame labellers: one interface (:mod:`.base`), one registry that builds them
(:mod:`.registry`).

The plain student (:mod:`.student`) labels whole frames; change-based inference
(:mod:`.change_based`) and the flow path (:mod:`.flow_path`) decorate it, the edge cluster
(:mod:`.cluster`) replaces it, and :mod:`.step_aside` hands the frames back to the plain student
when an acceleration is measured slower. Importing this package (and :mod:`.registry`) imports
neither torch nor OpenCV.
"""
