"""The plugin system: discovery, listing, filtering, loud failures, platform selection."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from infercore.platforms.selection import NoPlatformError, select_platform_name
from infercore.plugins.manager import PluginError, PluginManager


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **env}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full_env, timeout=300)


def _plugins_json(**env: str) -> list[dict]:
    proc = subprocess.run(["infercore", "plugins", "--json"], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _manager(group: str = "infercore.plugins", monkeypatch=None, **env: str) -> PluginManager:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    manager = PluginManager(group)
    manager.load_entry_points()
    return manager


def test_plugins_json_lists_third_party_plugin():
    records = {r["name"]: r for r in _plugins_json()}
    rec = records["testplugin"]
    for key in ("name", "distribution", "version", "hooks", "registered"):
        assert key in rec
    assert rec["distribution"] == "infercore-testplugin" and rec["version"] == "0.0.1"
    assert rec["registered"] == {"platform": ["testdev"], "attention_backend": ["counting"],
                                 "model": ["TestTinyForCausalLM"]}
    assert rec["probe"]["testdev"]["available"] is True
    assert records["cpu"]["probe"]["cpu"]["available"] is True
    assert "Qwen3ForCausalLM" in records["builtin"]["registered"]["model"]


def test_probe_reason_reported_when_unavailable():
    records = {r["name"]: r for r in _plugins_json(INFERCORE_TESTDEV_UNAVAILABLE="1")}
    probe = records["testplugin"]["probe"]["testdev"]
    assert probe["available"] is False and "INFERCORE_TESTDEV_UNAVAILABLE" in probe["reason"]


def test_allow_list_limits_what_loads(monkeypatch):
    manager = _manager(monkeypatch=monkeypatch, INFERCORE_PLUGINS="cpu")
    assert set(manager.plugins) == {"builtin", "cpu"}


def test_disable_list(monkeypatch):
    manager = _manager(monkeypatch=monkeypatch, INFERCORE_DISABLE_PLUGINS="testplugin")
    assert "testplugin" not in manager.plugins and "cpu" in manager.plugins


@pytest.mark.parametrize(("plugin", "needle"), [
    ("raises_on_import", "broken on purpose"),
    ("wrong_api", "plugin API version 99"),
    ("hook_raises", "hook failed on purpose"),
])
def test_broken_plugins_fail_loudly(monkeypatch, plugin, needle):
    with pytest.raises(PluginError) as err:
        _manager("infercore.plugins.broken", monkeypatch=monkeypatch, INFERCORE_PLUGINS=plugin)
    message = str(err.value)
    assert needle in message
    assert plugin in message and "infercore-testplugin 0.0.1" in message


def test_duplicate_registration_is_an_error_unless_override():
    from infercore.plugins import hookimpl

    class First:
        INFERCORE_PLUGIN_API = 1

        @hookimpl
        def register_models(self, register):
            register("Dup", "a.b:C")

    class Second(First):
        pass

    class Overrider:
        INFERCORE_PLUGIN_API = 1

        @hookimpl
        def register_models(self, register):
            register("Dup", "x.y:Z", override=True)

    manager = PluginManager()
    manager.register_module(First(), "first")
    with pytest.raises(PluginError, match="registered by both plugin 'first' and plugin 'second'"):
        manager.register_module(Second(), "second")
    manager.register_module(Overrider(), "overrider")
    assert manager.registry("model").get("Dup").target == "x.y:Z"


def test_platform_selection(monkeypatch):
    manager = _manager(monkeypatch=monkeypatch)
    monkeypatch.delenv("INFERCORE_PLATFORM", raising=False)
    assert select_platform_name(manager) == "cpu"  # cpu priority 0 beats testdev -100
    monkeypatch.setenv("INFERCORE_PLATFORM", "testdev")
    assert select_platform_name(manager) == "testdev"
    monkeypatch.setenv("INFERCORE_PLATFORM", "cpu,testdev")
    with pytest.raises(NoPlatformError, match="several platforms"):
        select_platform_name(manager)
    monkeypatch.setenv("INFERCORE_PLATFORM", "nosuch")
    with pytest.raises(NoPlatformError, match=r"no such platform(.|\n)*cpu \(cpu\): available"):
        select_platform_name(manager)
    monkeypatch.setenv("INFERCORE_PLATFORM", "testdev")
    monkeypatch.setenv("INFERCORE_TESTDEV_UNAVAILABLE", "1")
    with pytest.raises(NoPlatformError, match="unavailable: disabled by"):
        select_platform_name(manager)


def test_no_platform_available(monkeypatch):
    monkeypatch.setenv("INFERCORE_TESTDEV_UNAVAILABLE", "1")
    # Leave out every real platform (a GPU machine would otherwise have one available).
    manager = _manager(monkeypatch=monkeypatch, INFERCORE_DISABLE_PLUGINS="cpu,cuda,rocm,xpu,acme")
    monkeypatch.delenv("INFERCORE_PLATFORM", raising=False)
    with pytest.raises(NoPlatformError, match=r"no platform is available(.|\n)*testdev \(testplugin\): unavailable"):
        select_platform_name(manager)


def test_import_and_plugins_command_do_not_touch_devices():
    proc = _run("""
        import sys
        import infercore
        assert "torch" not in sys.modules, "import infercore imported torch"
        from infercore.entrypoints.cli import main
        assert main(["plugins"]) == 0
        import torch
        assert not torch.cuda.is_initialized(), "infercore plugins initialised CUDA"
        print("OK")
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("OK")


def test_forward_path_uses_third_party_backend_and_model(tiny_model_factory, tmp_path):
    folder = tiny_model_factory("Qwen3ForCausalLM")
    plugin_folder = tmp_path / "model"
    plugin_folder.mkdir()
    for f in folder.iterdir():
        (plugin_folder / f.name).symlink_to(f)
    config = json.loads((folder / "config.json").read_text())
    config["architectures"] = ["TestTinyForCausalLM"]
    (plugin_folder / "config.json").unlink()
    (plugin_folder / "config.json").write_text(json.dumps(config))
    proc = _run(f"""
        from infercore import LLM, SamplingParams
        from infercore_testplugin import attention, model
        llm = LLM(model={str(plugin_folder)!r})
        out = llm.generate(["hello world"], SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)
        assert len(out[0].outputs[0].token_ids) == 4
        assert model.CALLS["forward"] > 0 and attention.CALLS["forward"] > 0, (model.CALLS, attention.CALLS)
        print("OK", model.CALLS, attention.CALLS)
    """, INFERCORE_PLATFORM="testdev")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "OK" in proc.stdout
