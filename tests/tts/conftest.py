"""Fixtures for the test-time rehearsal tests: the shared episode kit (tests/episode_kit.py: a real
tokenizer, the scripted engine double, small real environments)."""

from episode_kit import kit, tasks, tiny_engine, tokenizer  # noqa: F401  (fixtures, registered by import)
