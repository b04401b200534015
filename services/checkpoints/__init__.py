"""Session checkpoints: a session's weights and optimizer on disk, the journal of its updates,
restore, and the keeper that orchestrates them for a teaching replica."""
