"""The platform conformance kit, a pytest plugin.

Run it against any installed platform::

    pytest -p infercore.testing --infercore-platform NAME

It checks what infercore relies on: the probe is pure (no device runtime initialised by importing
or probing), memory queries answer, the capability flags hold, the attention backend matches the
torch reference on random ragged batches (prefix blocks, same-step prefix sharing, chunked prompts,
decodes, sliding windows, ALiBi, graph padding), every custom op the platform registers matches
its reference, and a tiny model generates the same greedy tokens as Hugging Face transformers.
A failure names the case. Options:

* ``--infercore-platform NAME`` (required to run the kit);
* ``--infercore-attention-backend NAME`` (repeatable): check these registered backends instead of the
  platform's choice;
* ``--infercore-model PATH``: the model folder of the end-to-end check (default: a tiny random Qwen3).
"""

from __future__ import annotations

from pathlib import Path

import pytest

CHECKS = Path(__file__).with_name("checks.py")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("infercore", "infercore platform conformance kit")
    group.addoption("--infercore-platform", default=None, help="name of the platform to check")
    group.addoption("--infercore-attention-backend", action="append", default=None,
                    help="registered attention backend to check (default: the platform's choice); repeatable")
    group.addoption("--infercore-model", default=None,
                    help="model folder for the end-to-end check (default: a tiny random Qwen3)")


def pytest_configure(config: pytest.Config) -> None:
    """With ``--infercore-platform``, collect the kit's checks (alone, unless paths were given)."""
    if not config.getoption("--infercore-platform"):
        return
    explicit = config.args_source == pytest.Config.ArgsSource.ARGS
    config.args[:] = [*config.args, str(CHECKS)] if explicit else [str(CHECKS)]
