"""``python -m shadowtutor``: the ``shadowtutor`` console script, which lives in the top layer
(``shadowtutor_cli``, over the server and the agent). This entry file belongs to that layer in
the import contracts; nothing else in the core package imports it."""

import sys

from shadowtutor_cli import main

sys.exit(main())
