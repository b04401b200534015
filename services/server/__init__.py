"""The ShadowTutor server: FastAPI on uvicorn, one WebSocket session per edge.

Entry points: ``services.server.app.create_app`` (the app factory) and
``services.server.settings.ServerSettings``; this package imports nothing heavy itself.
"""
