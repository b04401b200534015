"""The lab's ``shadowtutor`` commands: benchmarks and studies, one module each with ``register(subparsers)``.

:data:`COMMAND_MODULES` lists them in the order of their entry-point names in ``lab/pyproject.toml``
(the group ``shadowtutor.commands``), which is how an installed lab reaches the console script;
``python -m shadowtutor_lab`` registers the same modules without the entry points, from a source folder.
"""

COMMAND_MODULES = (
    "shadowtutor_lab.cli.bench",
    "shadowtutor_lab.cli.bounds",
    "shadowtutor_lab.cli.change_based",
    "shadowtutor_lab.cli.demo",
    "shadowtutor_lab.cli.evaluate",
    "shadowtutor_lab.cli.fuzz",
    "shadowtutor_lab.cli.pretrain",
    "shadowtutor_lab.cli.regions",
    "shadowtutor_lab.cli.scenes",
)
