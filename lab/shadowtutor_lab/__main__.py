"""``python -m shadowtutor_lab ARGS``: the ``shadowtutor`` command line with the lab's commands, installed or not.

With ``lab/`` (and the product) on ``PYTHONPATH``, e.g. on a machine where nothing is pip-installed,
this is ``shadowtutor ARGS`` with every lab command available; the exit status is the command's.
"""

from shadowtutor_cli import main
from shadowtutor_lab.cli import COMMAND_MODULES

raise SystemExit(main(extra_modules=COMMAND_MODULES))
