"""The adapters a server offers as models: ``--lora-modules name=path`` at start, and more loaded or
unloaded while it runs. A request's ``model`` names the base model or one of them."""

from __future__ import annotations

import itertools

from infercore.config import InfercoreConfig
from infercore.lora.checks import AdapterChecker
from infercore.lora.peft_checkpoint import LoRAError
from infercore.lora.request import LoRARequest


class UnknownAdapterError(LoRAError):
    """No served adapter has that name (a 404 over HTTP)."""


def parse_lora_module(spec: str) -> tuple[str, str]:
    """``name=path`` → (name, path)."""
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise LoRAError(f"--lora-modules entry {spec!r} should be name=path (e.g. sql=/adapters/sql-lora)")
    return name, path


class ServedAdapters:
    """Adapters by name, each checked against the base model when it is added (a bad one is refused
    with the reason). Ids are given in order of addition and never reused."""

    def __init__(self, config: InfercoreConfig, checker: AdapterChecker | None = None) -> None:
        self.checker = checker or AdapterChecker(config)
        self._by_name: dict[str, LoRARequest] = {}
        self._ids = itertools.count(1)
        for spec in config.lora.lora_modules:
            self.add(*parse_lora_module(spec))

    def add(self, name: str, path: str) -> LoRARequest:
        """Offer the adapter at ``path`` as model ``name``; raises LoRAError if it can't be served."""
        if name in self._by_name:
            raise LoRAError(f"an adapter named {name!r} is already served; unload it first or pick another name")
        request = LoRARequest(name, next(self._ids), path)
        self.checker.check(request)
        self._by_name[name] = request
        return request

    def remove(self, name: str) -> None:
        """Stop offering adapter ``name`` (requests running with it finish)."""
        request = self._by_name.pop(name, None)
        if request is None:
            raise UnknownAdapterError(f"no adapter named {name!r} is served")
        self.checker.forget(request.lora_int_id)

    def get(self, name: str) -> LoRARequest | None:
        return self._by_name.get(name)

    def all(self) -> list[LoRARequest]:
        return list(self._by_name.values())
