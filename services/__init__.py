"""ShadowTutor services: the GPU server that edge agents connect to (``services.server``)."""
