"""Ways to run the student faster than one full pass per frame (see :mod:`.change_based`)."""
