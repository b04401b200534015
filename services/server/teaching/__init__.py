"""What a session's key frames go through: the teaching interface, the teacher queue, distillation,
model loading, sessions."""
