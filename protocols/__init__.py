"""Bundled qualification protocols (TOML) and the worker-protocol schema."""
