"""A third-party plugin for infercore's tests."""
