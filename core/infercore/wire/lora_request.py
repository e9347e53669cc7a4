"""LoRARequest: which adapter a request runs with. It crosses the process boundary as msgpack, so it
lives with the wire; users import it from :mod:`infercore.lora.request` (or `infercore`)."""

from __future__ import annotations

import msgspec


class LoRARequest(msgspec.Struct, frozen=True, array_like=True):
    """A LoRA adapter for one request: ``lora_name`` (what the server lists), ``lora_int_id`` (a unique
    positive id: the engine's key for the adapter, in its slots and in prefix-cache hashes) and
    ``lora_path`` (a PEFT folder: ``adapter_config.json`` + ``adapter_model.safetensors``)."""

    lora_name: str
    lora_int_id: int
    lora_path: str

    def __post_init__(self) -> None:
        if self.lora_int_id < 1:
            raise ValueError(f"lora_int_id must be a positive integer (got {self.lora_int_id}); 0 means no adapter")
