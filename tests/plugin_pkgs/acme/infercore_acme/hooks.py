"""infercore-acme's hooks. Importing this module is cheap: every target is a lazy string."""

from __future__ import annotations

from infercore.plugin_api import RegisterFn, hookimpl

INFERCORE_PLUGIN_API = (1, 0)


@hookimpl
def register_platforms(register: RegisterFn) -> None:
    register("acme", "infercore_acme.platform:AcmePlatform")


@hookimpl
def register_attention_backends(register: RegisterFn) -> None:
    register("acme_attention", "infercore_acme.attention:AcmeAttentionBackend")


@hookimpl
def register_custom_ops(register: RegisterFn) -> None:
    register("gelu", "infercore_acme.ops:gelu", platform="acme")
    register("layer_norm", "infercore_acme.ops:layer_norm", platform="acme")


@hookimpl
def register_models(register: RegisterFn) -> None:
    register("GPT2LMHeadModel", "infercore_acme.gpt2:GPT2LMHeadModel")
    register("GPTNeoXForCausalLM", "infercore_acme.gpt_neox:GPTNeoXForCausalLM")
