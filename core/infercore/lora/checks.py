"""The front end's check of a request's adapter: LoRA is on, the id names one adapter, and the adapter
fits the base model (from its config and file header, before the request reaches the engine)."""

from __future__ import annotations

from typing import Any

from infercore.config import InfercoreConfig
from infercore.lora.peft_checkpoint import LoRAError, check_adapter
from infercore.lora.request import LoRARequest


class AdapterChecker:
    """Checks each adapter once (by id); a later request with the same id must name the same adapter."""

    def __init__(self, config: InfercoreConfig) -> None:
        self.config = config
        self._checked: dict[int, LoRARequest] = {}
        self._hf_config: Any = None

    def check(self, request: LoRARequest | None) -> None:
        """Raise :class:`LoRAError` (a ValueError that says what to change) if ``request`` can't be served."""
        if request is None:
            return
        if not isinstance(request, LoRARequest):
            raise LoRAError(f"lora_request must be a LoRARequest, got {type(request).__name__}")
        lora = self.config.lora
        if not lora.enable_lora:
            raise LoRAError(f"the request names LoRA adapter {request.lora_name!r} but the engine runs without "
                            "LoRA; start it with enable_lora=True (--enable-lora)")
        known = self._checked.get(request.lora_int_id)
        if known is not None:
            if known != request:
                raise LoRAError(f"lora_int_id {request.lora_int_id} already names adapter {known.lora_name!r} at "
                                f"{known.lora_path!r}; give {request.lora_name!r} an id of its own")
            return
        if self._hf_config is None:
            from infercore.models.loader import get_hf_config

            self._hf_config = get_hf_config(self.config.model)
        check_adapter(request.lora_name, request.lora_path, lora.max_lora_rank, self._hf_config)
        self._checked[request.lora_int_id] = request

    def forget(self, lora_int_id: int) -> None:
        """Drop an adapter's check (it was unloaded; its id may be given to another)."""
        self._checked.pop(lora_int_id, None)
