"""Test-only plugin: ``ScriptedForCausalLM`` replies to every prompt with a text written in its folder."""
