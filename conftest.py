"""pytest's root configuration: every test session, ``tests/`` and ``experiments/`` alike,
fails if a process it started outlives it (:mod:`testing.process_guard`)."""

pytest_plugins = ["testing.process_guard"]
