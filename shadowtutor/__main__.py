"""``python -m shadowtutor``: runs ``python -m shadowtutor_cli``, the ``shadowtutor`` command.

The command lives in the top layer (``shadowtutor_cli``, over the server and the agent); the core
names that layer's entry module to run it and imports nothing of it."""

import runpy

runpy.run_module("shadowtutor_cli", run_name="__main__", alter_sys=True)
