"""Capacity planning: server profiles (what one server sustains per key frame) and cameras per server."""
