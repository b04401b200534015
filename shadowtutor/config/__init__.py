"""Configuration plumbing shared by every process: settings models as flags and environment
variables."""
