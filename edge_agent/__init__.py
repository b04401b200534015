"""The ShadowTutor edge agent: the student on every frame, key frames to the server, updates back.

Start it with ``shadowtutor edge --server URL --source SRC``; :class:`edge_agent.agent.EdgeAgent`
is the library entry point.
"""
