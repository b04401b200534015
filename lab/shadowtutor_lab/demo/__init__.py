"""``shadowtutor demo``: the server and an edge agent as real processes on loopback, on a built-in scene."""
