"""The worker's adapters: LoRA wrapped around the model's linears, ``max_loras`` device slots with
reference counts, and a host cache (least recently used first out) of adapters read from disk."""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

import torch
from torch import nn

from infercore.config import InfercoreConfig
from infercore.layers.linear import LinearBase
from infercore.lora.layers import LoRALinear
from infercore.lora.peft_checkpoint import LoRAError, PeftAdapter, load_adapter
from infercore.lora.request import LoRARequest
from infercore.lora.step_state import LoRAStepState
from infercore.lora.target_modules import TARGET_MODULES, WRAPPED_LINEARS, module_shapes

logger = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def wrap_model(model: nn.Module, max_loras: int, max_rank: int, dtype: torch.dtype,
               state: LoRAStepState) -> dict[tuple[int, str], LoRALinear]:
    """Replace every dense decoder linear of ``model`` by a :class:`LoRALinear` around it; returns them by
    (layer index, path in the layer). A mixture-of-experts block is left as it is."""
    wrapped: dict[tuple[int, str], LoRALinear] = {}
    for index, layer in enumerate(model.model.layers):
        for path, row_parallel in WRAPPED_LINEARS.items():
            block_name, _, name = path.partition(".")
            # A family may name its feed-forward block otherwise (Mixtral's experts): then it has none.
            parent = getattr(layer, block_name, None)
            base = getattr(parent, name, None)
            if isinstance(base, LinearBase):
                lora = LoRALinear(base, row_parallel, max_loras, max_rank, dtype, state)
                setattr(parent, name, lora)
                wrapped[(index, path)] = lora
    return wrapped


class LoRAManager:
    """Adapter slots on one device. :meth:`acquire` gives a request's adapter a slot (loading it into a free
    one when it has none) and :meth:`release` hands it back; a slot nobody holds keeps its adapter until a
    new adapter needs the slot (least recently used first), so a returning adapter costs no copy.

    The scheduler keeps at most ``max_loras`` distinct adapters running, so a slot is always free when a
    new one arrives. Slot lookups never wait on the device; a load copies from pinned host memory.
    """

    def __init__(self, config: InfercoreConfig, model: nn.Module, hf_config: Any, device: torch.device,
                 model_dtype: torch.dtype, max_num_tokens: int, pin: bool) -> None:
        lora = config.lora
        self.max_loras, self.max_rank = lora.max_loras, lora.max_lora_rank
        self.max_cpu_loras = lora.max_cpu_loras or lora.max_loras
        self.dtype = _DTYPES.get(lora.lora_dtype, model_dtype)
        self.hf_config = hf_config
        self._shapes = module_shapes(getattr(hf_config, "get_text_config", lambda: hf_config)())
        self.pin = pin
        self.state = LoRAStepState(max_num_tokens, self.max_loras, device, pin)
        self.layers = wrap_model(model, self.max_loras, self.max_rank, self.dtype, self.state)
        self._slot_ids = [0] * self.max_loras
        self._slot_refs = [0] * self.max_loras
        #: Slots by adapter id, least recently acquired first.
        self._resident: OrderedDict[int, int] = OrderedDict()
        self._host: OrderedDict[int, PeftAdapter] = OrderedDict()

    def acquire(self, request: LoRARequest) -> int:
        """The slot of ``request``'s adapter, loaded into one if it is not on the device."""
        lora_id = request.lora_int_id
        slot = self._resident.get(lora_id)
        if slot is None:
            slot = self._free_slot()
            old = self._slot_ids[slot]
            if old:
                del self._resident[old]
                self._slot_ids[slot] = 0
            self._load(slot, self._host_adapter(request))
            self._slot_ids[slot] = lora_id
            self._resident[lora_id] = slot
        self._resident.move_to_end(lora_id)
        self._slot_refs[slot] += 1
        return slot

    def release(self, slot: int) -> None:
        """A request that held ``slot`` left the batch."""
        self._slot_refs[slot] -= 1

    def _free_slot(self) -> int:
        empty = [s for s in range(self.max_loras) if not self._slot_ids[s]]
        if empty:
            return empty[0]
        for slot in self._resident.values():  # least recently acquired first
            if self._slot_refs[slot] == 0:
                return slot
        raise RuntimeError(f"all {self.max_loras} LoRA slots hold adapters of running requests; the scheduler "
                           "admits at most max_loras distinct adapters")

    def _host_adapter(self, request: LoRARequest) -> PeftAdapter:
        adapter = self._host.get(request.lora_int_id)
        if adapter is None:
            adapter = load_adapter(request.lora_name, request.lora_path, self.max_rank, self.hf_config)
            weights = {key: (self._stage(a), self._stage(b)) for key, (a, b) in adapter.weights.items()}
            adapter = PeftAdapter(adapter.name, adapter.spec, weights)
            self._host[request.lora_int_id] = adapter
            while len(self._host) > self.max_cpu_loras:
                self._host.popitem(last=False)
            logger.info("LoRA adapter %r (id %d, rank %d) loaded from %s", request.lora_name,
                        request.lora_int_id, adapter.spec.rank, request.lora_path)
        self._host.move_to_end(request.lora_int_id)
        return adapter

    def _stage(self, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.to(self.dtype).contiguous()
        return tensor.pin_memory() if self.pin else tensor

    def _load(self, slot: int, adapter: PeftAdapter) -> None:
        for layer in self.layers.values():
            layer.clear_slot(slot)
        for (index, module), (a, b) in adapter.weights.items():
            target = TARGET_MODULES[module]
            layer = self.layers.get((index, target.layer_path))
            if layer is None:
                raise LoRAError(f"LoRA adapter {adapter.name!r}: layer {index} has no dense {module} to adapt")
            row = 0
            for i, part in zip(target.slices, target.parts, strict=True):
                size = self._shapes[part][1]
                layer.set_slice(slot, i, a, b[row: row + size])
                row += size
