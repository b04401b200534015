"""The lab's ``shadowtutor`` commands: benchmarks and studies, one module each with ``register(subparsers)``."""
