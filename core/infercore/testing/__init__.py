"""The conformance kit (platforms, parsers, grammar backends), a pytest plugin.

Run it against any installed platform::

    pytest -p infercore.testing --infercore-platform NAME

It checks what infercore relies on: the probe is pure (no device runtime initialised by importing
or probing), memory queries answer, the capability flags hold, the attention backend matches the
torch reference on random ragged batches (prefix blocks, same-step prefix sharing, chunked prompts,
decodes, sliding windows, ALiBi, graph padding), every custom op the platform registers matches
its reference, a tiny model generates the same greedy tokens as Hugging Face transformers, and the
model split over two ranks (two processes) generates the tokens it generates whole.
A failure names the case. Options:

* ``--infercore-platform NAME`` (required to run the kit);
* ``--infercore-attention-backend NAME`` (repeatable): check these registered backends instead of the
  platform's choice;
* ``--infercore-model PATH``: the model folder of the end-to-end and tensor-parallel checks (default: a
  tiny random Qwen3).

Parser and grammar-backend plugins are checked with their own options (each repeatable; no platform is
needed):

* ``--infercore-tool-parser NAME`` / ``--infercore-reasoning-parser NAME``: streamed outputs, cut
  anywhere, give what the whole output gives (see :mod:`infercore.testing.parser_checks`);
  ``--infercore-parser-outputs FILE`` adds outputs in the parser's format;
* ``--infercore-grammar-backend NAME``: the bitmask agrees with the tokens the matcher accepts (see
  :mod:`infercore.testing.grammar_checks`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

CHECKS = Path(__file__).with_name("checks.py")
PARSER_CHECKS = Path(__file__).with_name("parser_checks.py")
GRAMMAR_CHECKS = Path(__file__).with_name("grammar_checks.py")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("infercore", "infercore platform conformance kit")
    group.addoption("--infercore-platform", default=None, help="name of the platform to check")
    group.addoption("--infercore-attention-backend", action="append", default=None,
                    help="registered attention backend to check (default: the platform's choice); repeatable")
    group.addoption("--infercore-model", default=None,
                    help="model folder for the end-to-end check (default: a tiny random Qwen3)")
    group.addoption("--infercore-tool-parser", action="append", default=None,
                    help="registered tool-call parser to check; repeatable")
    group.addoption("--infercore-reasoning-parser", action="append", default=None,
                    help="registered reasoning parser to check; repeatable")
    group.addoption("--infercore-parser-outputs", default=None,
                    help='JSON file of model outputs in the parsers\' format: [{"output": TEXT, "tools": [...]}]')
    group.addoption("--infercore-grammar-backend", action="append", default=None,
                    help="registered grammar (structured output) backend to check; repeatable")


def pytest_configure(config: pytest.Config) -> None:
    """Collect the checks of each kind of plugin named on the command line (alone, unless paths were given)."""
    wanted = [str(path) for path, options in (
        (CHECKS, ("--infercore-platform",)),
        (PARSER_CHECKS, ("--infercore-tool-parser", "--infercore-reasoning-parser")),
        (GRAMMAR_CHECKS, ("--infercore-grammar-backend",)),
    ) if any(config.getoption(option) for option in options)]
    if not wanted:
        return
    explicit = config.args_source == pytest.Config.ArgsSource.ARGS
    config.args[:] = [*config.args, *wanted] if explicit else wanted
