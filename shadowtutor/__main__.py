import sys

from shadowtutor.cli import main

sys.exit(main())
