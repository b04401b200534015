"""What a session's key frames go through: the teaching interface and its local implementation,
the models at work (teacher queue, distillation), model loading, sessions."""
