"""The engine's log lines for a Python user who has not configured logging, as vLLM shows them."""

from __future__ import annotations

import logging

LOGGER_NAME = "infercore"
FORMAT = "%(levelname)s %(asctime)s %(name)s: %(message)s"


def show_engine_logs_by_default() -> None:
    """Send infercore's INFO records to stderr when nobody configured logging.

    Python shows only warnings of an unconfigured program, so without this a user of ``LLM`` would not
    see the engine start (model, KV cache size, workers). Once the program configures logging (a
    handler on the root logger or on ``infercore``, or a level set on ``infercore``), it is left alone.
    """
    logger = logging.getLogger(LOGGER_NAME)
    if logging.getLogger().handlers or logger.handlers or logger.level != logging.NOTSET:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(FORMAT, datefmt="%H:%M:%S"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    # Records already shown here must not be shown again if the program configures the root logger later.
    logger.propagate = False
