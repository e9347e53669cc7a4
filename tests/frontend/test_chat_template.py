"""Chat templates render like Hugging Face's, inside a sandbox with bounded time and output."""

from __future__ import annotations

import time

import pytest

from infercore.config import ModelConfig
from infercore.tokenizer import ChatTemplateError, TokenizerInfo, apply_chat_template, get_tokenizer

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi 你好 😀"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def test_get_tokenizer_loads_the_folder(tokenizer_dir, tokenizer):
    loaded = get_tokenizer(ModelConfig(model=str(tokenizer_dir)))
    assert loaded.encode("hello 你好") == tokenizer.encode("hello 你好")
    info = TokenizerInfo.of(loaded)
    assert info.eos_token_id == loaded.convert_tokens_to_ids("<|im_end|>") and info.vocab_size == len(loaded)
    assert info.eos_token_id in info.all_special_ids


def test_get_tokenizer_names_a_missing_folder(tmp_path):
    with pytest.raises(ValueError, match="--tokenizer"):
        get_tokenizer(ModelConfig(model=str(tmp_path / "missing")))


@pytest.mark.parametrize("tools", [None, TOOLS])
def test_renders_like_transformers(tokenizer, tools):
    ours = apply_chat_template(tokenizer, MESSAGES, tools=tools)
    theirs = tokenizer.apply_chat_template(MESSAGES, tools=tools, tokenize=False, add_generation_prompt=True)
    assert ours == theirs and ours.endswith("<|im_start|>assistant\n")


def test_kwargs_and_continue_final_message(tokenizer):
    text = apply_chat_template(tokenizer, MESSAGES, chat_template_kwargs={"enable_thinking": False})
    assert text.endswith("<think>\n\n</think>\n\n")
    cont = apply_chat_template(tokenizer, [*MESSAGES, {"role": "assistant", "content": "Sure, "}],
                               add_generation_prompt=False, continue_final_message=True)
    assert cont.endswith("<|im_start|>assistant\nSure,")


def test_helpers_hf_templates_use(tokenizer):
    template = "{{ strftime_now('%Y') }}|{{ messages[1] | tojson }}|{% generation %}g{% endgeneration %}"
    text = apply_chat_template(tokenizer, MESSAGES, chat_template=template)
    year, data, gen = text.split("|")
    assert len(year) == 4 and "你好" in data and gen == "g"
    with pytest.raises(ChatTemplateError, match="system role is not supported"):
        apply_chat_template(tokenizer, MESSAGES, chat_template="{{ raise_exception('system role is not supported') }}")


@pytest.mark.parametrize("template", [
    "{{ ''.__class__.__mro__ }}",
    "{{ cycler.__init__.__globals__ }}",
    "{{ self.__init__.__globals__ }}",
    "{{ messages.append(1) }}",
])
def test_sandbox_escapes_fail_clearly(tokenizer, template):
    with pytest.raises(ChatTemplateError, match="unsafe operation.*not allowed"):
        apply_chat_template(tokenizer, MESSAGES, chat_template=template)


@pytest.mark.parametrize("template", [
    "{% for i in range(10**9) %}x{% endfor %}",
    "{% for i in range(90000) %}xxxxxxxxxxxxxxxxxxxx{% endfor %}",
    "{{ 'x' * 10**9 }}",
    "{{ 10 ** 100000 }}",
    "{% set ns = namespace(n=3) %}{% for i in range(40) %}{% set ns.n = ns.n * ns.n %}{% endfor %}",
    "{{ 'a' | center(10**9) }}",
    "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "{% set ns = namespace(s=['a']) %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
    "{% macro f(s, n) %}{% if n %}{{ f(s ~ s, n - 1) }}{% endif %}{% endmacro %}{{ f('x', 40) }}",
    "{{ '%999999999d' % 1 }}",
    "{{ '{:>999999999}'.format(1) }}",
    "{{ '%(x)999999999s' | format(x=1) }}",
    "{{ 'a'.center(10**9) }}",
    "{{ ('x' * 100000).replace('x', 'x' * 1000) }}",
    "{{ ('x' * 100000) | replace('x', 'x' * 1000) }}",
])
def test_output_bombs_fail_fast(tokenizer, template):
    start = time.monotonic()
    with pytest.raises(ChatTemplateError, match="limit|too large"):
        apply_chat_template(tokenizer, MESSAGES, chat_template=template)
    assert time.monotonic() - start < 2.0


def test_string_helpers_still_work(tokenizer):
    template = "{{ 'ab' | replace('a', 'c') }} {{ 'a%sb' % 'Z' }} {{ '{}-{}'.format(1, 2) }} {{ '%s' | format(3) }}"
    assert apply_chat_template(tokenizer, MESSAGES, chat_template=template) == "cb aZb 1-2 3"


def test_slow_templates_hit_the_deadline(tokenizer):
    template = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    start = time.monotonic()
    with pytest.raises(ChatTemplateError, match="longer than 0.3 s"):
        apply_chat_template(tokenizer, MESSAGES, chat_template=template, timeout_s=0.3)
    assert time.monotonic() - start < 1.5


def test_missing_template_and_empty_messages(tokenizer):
    with pytest.raises(ChatTemplateError, match="no chat template"):
        apply_chat_template(None, MESSAGES)
    with pytest.raises(ChatTemplateError, match="messages is empty"):
        apply_chat_template(tokenizer, [])
    with pytest.raises(ChatTemplateError, match="over the limit of 256000"):
        apply_chat_template(tokenizer, MESSAGES, chat_template="x" * 300_000)
