"""The ShadowTutor lab: benchmarks, studies, scene generation, stress and network tools.

It imports the product (``shadowtutor``, ``services``, ``edge_agent``); the product never imports it.
Its command modules reach the ``shadowtutor`` console script through the entry-point group
``shadowtutor.commands``.
"""
