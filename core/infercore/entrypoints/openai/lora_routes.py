"""Loading and unloading LoRA adapters while the server runs (``--allow-runtime-lora-updating``).

Each API server process keeps its own list of served adapters; with ``--api-server-count`` above one,
load an adapter at start (``--lora-modules``) so every process offers it.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from infercore.entrypoints.openai.errors import APIError
from infercore.entrypoints.openai.protocol import ErrorResponse
from infercore.entrypoints.openai.state import ServerState
from infercore.lora.peft_checkpoint import LoRAError
from infercore.lora.served import UnknownAdapterError

lora_router = APIRouter()
_ERRORS: dict[int | str, dict[str, object]] = {code: {"model": ErrorResponse} for code in (400, 401, 403, 404)}


class LoadLoRAAdapterRequest(BaseModel):
    """POST /v1/load_lora_adapter: offer the PEFT adapter in the server's folder ``lora_path`` as ``lora_name``."""

    lora_name: str = Field(min_length=1, max_length=256)
    lora_path: str = Field(min_length=1, max_length=4096)


class UnloadLoRAAdapterRequest(BaseModel):
    """POST /v1/unload_lora_adapter: stop offering adapter ``lora_name``."""

    lora_name: str = Field(min_length=1, max_length=256)


def _served(request: Request) -> ServerState:
    state: ServerState = request.app.state.server
    if not state.config.lora.allow_runtime_lora_updating:
        raise APIError(403, "loading adapters at run time is off; start the server with "
                            "--allow-runtime-lora-updating, or name them with --lora-modules")
    return state


@lora_router.post("/v1/load_lora_adapter", responses=_ERRORS)
async def load_lora_adapter(body: LoadLoRAAdapterRequest, request: Request) -> JSONResponse:
    """Check the adapter against the base model and serve it; 400 with the reason when it does not fit."""
    state = _served(request)
    try:
        adapter = state.engine.adapters.add(body.lora_name, body.lora_path)
    except LoRAError as exc:
        raise APIError(400, str(exc), "lora_path") from None
    return JSONResponse({"lora_name": adapter.lora_name, "lora_int_id": adapter.lora_int_id})


@lora_router.post("/v1/unload_lora_adapter", responses=_ERRORS)
async def unload_lora_adapter(body: UnloadLoRAAdapterRequest, request: Request) -> JSONResponse:
    """Stop serving an adapter; 404 when none has that name."""
    state = _served(request)
    try:
        state.engine.adapters.remove(body.lora_name)
    except UnknownAdapterError as exc:
        raise APIError(404, str(exc), "lora_name") from None
    return JSONResponse({"lora_name": body.lora_name})
