"""``from infercore.lora.request import LoRARequest``: which adapter a request runs with (defined with the
messages it travels in, :mod:`infercore.wire.lora_request`)."""

from __future__ import annotations

from infercore.wire.lora_request import LoRARequest

__all__ = ["LoRARequest"]
