"""Session checkpoints: a session's weights and optimizer on disk, the journal of its updates,
restore."""
