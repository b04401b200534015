"""``python -m shadowtutor_cli``: the ``shadowtutor`` console script."""

import sys

from shadowtutor_cli import main

sys.exit(main())
