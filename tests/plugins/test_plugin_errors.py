"""Plugin failures name the plugin's distribution and version; `infercore plugins` lists broken ones."""

from __future__ import annotations

import argparse
import json

import pytest

from infercore.entrypoints import plugins_cmd
from infercore.plugin_api import hookimpl
from infercore.plugins.manager import PluginManager
from infercore.plugins.registry import TargetImportError


class _LazyBroken:
    INFERCORE_PLUGIN_API = (1, 0)

    @hookimpl
    def register_models(self, register):
        register("AcmeForCausalLM", "infercore_acme_missing.model:AcmeForCausalLM")


def test_lazy_import_failure_names_distribution_and_version() -> None:
    manager = PluginManager()
    manager.register_module(_LazyBroken(), "acme", "infercore-acme", "1.2.3")
    with pytest.raises(TargetImportError) as err:
        manager.registry("model").load("AcmeForCausalLM")
    message = str(err.value)
    assert "plugin 'acme' (infercore-acme 1.2.3)" in message
    assert "infercore_acme_missing" in message and "INFERCORE_DISABLE_PLUGINS=acme" in message
    assert isinstance(err.value.__cause__, ModuleNotFoundError)


def _broken_manager() -> PluginManager:
    manager = PluginManager("infercore.plugins.broken")
    manager.load_entry_points(keep_going=True)
    return manager


def test_plugins_command_lists_broken_plugins_and_fails(monkeypatch, capsys) -> None:
    monkeypatch.setattr(plugins_cmd, "PluginManager", lambda: PluginManager("infercore.plugins.broken"))
    assert plugins_cmd.run(argparse.Namespace(json=False)) == 1
    out = capsys.readouterr().out
    for name, needle in (("raises_on_import", "broken on purpose"), ("wrong_api", "plugin API version 99"),
                         ("hook_raises", "hook failed on purpose")):
        assert f"{name}  (infercore-testplugin 0.0.1)" in out
        assert needle in out
    assert "Traceback" not in out


def test_plugins_json_marks_broken_plugins(monkeypatch, capsys) -> None:
    monkeypatch.setattr(plugins_cmd, "PluginManager", lambda: PluginManager("infercore.plugins.broken"))
    assert plugins_cmd.run(argparse.Namespace(json=True)) == 1
    records = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert records["wrong_api"]["broken"] is True and "99" in records["wrong_api"]["error"]
    assert all(r["broken"] for r in records.values()) and len(records) == 3


def test_keep_going_records_every_broken_plugin() -> None:
    manager = _broken_manager()
    assert set(manager.broken) == {"raises_on_import", "wrong_api", "hook_raises"}
