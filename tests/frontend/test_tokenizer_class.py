"""The API server loads its tokenizer with the folder's declared class (no ``AutoTokenizer``, so no torch in that
process), and loads it again with the class ``AutoTokenizer`` picks (asked of a short-lived process) where the two
differ."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from transformers import AutoTokenizer

from infercore.tiny_models import build_tokenizer
from infercore.tokenizer_loading import (
    auto_tokenizer_class,
    auto_tokenizer_class_elsewhere,
    declared_tokenizer_class,
    guess_tokenizer,
    matching_tokenizer,
    serving_tokenizer,
)

TEXT = "Hello world, ünïcode 123 <|im_end|> again"


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tok") / "base"
    build_tokenizer(path)
    return path


def _declaring(base: Path, tmp_path: Path, class_name: str, **extra: object) -> Path:
    folder = tmp_path / class_name
    shutil.copytree(base, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.update(tokenizer_class=class_name, **extra)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def _model(folder: Path) -> SimpleNamespace:
    return SimpleNamespace(model=str(folder), tokenizer=None, revision=None, trust_remote_code=False)


@pytest.mark.parametrize("declared", ["TokenizersBackend", "PreTrainedTokenizerFast", "Qwen2Tokenizer",
                                      "GPT2Tokenizer", "LlamaTokenizerFast"])
def test_the_serving_tokenizer_is_auto_tokenizers(tokenizer_dir: Path, tmp_path: Path, declared: str) -> None:
    # LlamaTokenizerFast over a byte-level tokenizer.json: transformers 5.25 loads TokenizersBackend instead (the
    # declared class would encode differently), 5.17 the declared class; either way the same as AutoTokenizer.
    folder = _declaring(tokenizer_dir, tmp_path, declared)
    auto = AutoTokenizer.from_pretrained(str(folder))
    assert auto_tokenizer_class_elsewhere(_model(folder)) == auto_tokenizer_class(_model(folder)) == type(auto).__name__
    served = serving_tokenizer(_model(folder))
    assert type(served) is type(auto)
    assert served(TEXT).input_ids == auto(TEXT).input_ids
    assert served.all_special_ids == auto.all_special_ids and served.chat_template == auto.chat_template


def test_a_guess_of_another_class_is_loaded_again_with_auto_tokenizers(tokenizer_dir: Path, tmp_path: Path) -> None:
    folder = _declaring(tokenizer_dir, tmp_path, "Qwen2Tokenizer")
    guessed = guess_tokenizer(_model(folder))
    assert type(guessed).__name__ == "Qwen2Tokenizer"
    assert matching_tokenizer(guessed, _model(folder), "Qwen2Tokenizer") is guessed  # nothing to load again
    assert matching_tokenizer(guessed, _model(folder), None) is guessed  # the answer not known: the guess stays
    other = matching_tokenizer(guessed, _model(folder), "GPT2Tokenizer")  # AutoTokenizer would pick another class
    assert type(other).__name__ == "GPT2Tokenizer"


def test_no_guess_without_a_class_transformers_exports_or_with_code_of_the_folder(tokenizer_dir: Path,
                                                                                   tmp_path: Path) -> None:
    assert declared_tokenizer_class(str(_declaring(tokenizer_dir, tmp_path, "NoSuchTokenizer"))) is None
    assert declared_tokenizer_class(str(_declaring(tokenizer_dir, tmp_path, "GPT2Tokenizer",
                                                   auto_map={"AutoTokenizer": ["a.B", None]}))) is None
    assert declared_tokenizer_class(str(_declaring(tokenizer_dir, tmp_path, "AutoConfig"))) is None
    no_json = _declaring(tokenizer_dir, tmp_path, "Qwen2Tokenizer")
    (no_json / "tokenizer.json").unlink()
    assert declared_tokenizer_class(str(no_json)) is None
    assert declared_tokenizer_class(str(tmp_path / "missing")) is None
    # No guess: nothing is loaded, and AutoTokenizer's class (or AutoTokenizer itself, where the class is not known
    # or not one transformers exports: the folder's own code, say) loads it after the engine's start.
    assert guess_tokenizer(_model(tokenizer_dir / "missing")) is None
    auto_class = type(AutoTokenizer.from_pretrained(str(tokenizer_dir)))
    for answer in (None, "NotInTransformers", auto_class.__name__):
        assert type(matching_tokenizer(None, _model(tokenizer_dir), answer)) is auto_class


def test_no_class_without_a_tokenizer_or_in_time(tokenizer_dir: Path, tmp_path: Path) -> None:
    assert auto_tokenizer_class(SimpleNamespace(model=str(tmp_path), skip_tokenizer_init=True)) is None
    assert auto_tokenizer_class(_model(tmp_path / "missing")) is None
    assert auto_tokenizer_class_elsewhere(_model(tmp_path / "missing")) is None
    assert auto_tokenizer_class_elsewhere(_model(tokenizer_dir), timeout_s=0.01) is None


def test_the_helper_process_is_killed_when_its_answer_is_no_longer_wanted(tokenizer_dir: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # A launcher told to stop (or whose engine died) must not wait out a slow helper (a hub download, say).
    import subprocess
    import time

    from infercore import tokenizer_loading as tokenizer_module

    started: list[subprocess.Popen] = []
    popen = subprocess.Popen

    def recorded(*args: object, **kwargs: object) -> subprocess.Popen:
        started.append(popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(tokenizer_module, "_AUTO_CLASS_SCRIPT", "import time; time.sleep(60)")
    monkeypatch.setattr(subprocess, "Popen", recorded)
    asked_at = time.monotonic()
    polls: list[float] = []

    def give_up() -> bool:
        polls.append(time.monotonic())
        return time.monotonic() - asked_at > 0.5

    assert auto_tokenizer_class_elsewhere(_model(tokenizer_dir), give_up=give_up) is None
    assert time.monotonic() - asked_at < 10 and len(polls) >= 2
    assert len(started) == 1 and started[0].poll() is not None  # killed and reaped, not left running


def test_a_hub_repo_is_guessed_only_from_its_cached_snapshot(tokenizer_dir: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    snapshot = _declaring(tokenizer_dir, tmp_path, "Qwen2Tokenizer")
    cached = {"tokenizer_config.json": str(snapshot / "tokenizer_config.json"),
              "tokenizer.json": str(snapshot / "tokenizer.json")}
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache",
                        lambda repo, file, revision=None: cached.get(file) if repo == "acme/tiny" else None)
    assert declared_tokenizer_class("acme/tiny").__name__ == "Qwen2Tokenizer"
    assert declared_tokenizer_class("acme/other") is None
    cached.pop("tokenizer.json")  # one file not downloaded yet: no guess, nothing fetched here
    assert declared_tokenizer_class("acme/tiny") is None


def test_the_answer_is_remembered_until_the_folder_changes(tokenizer_dir: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from infercore import tokenizer_loading as tokenizer_module

    monkeypatch.setenv("INFERCORE_CACHE_DIR", str(tmp_path / "cache"))
    asked: list[str] = []

    def ask(model_config: object, give_up: object = None) -> str:
        asked.append(str(model_config.model))
        return "TokenizersBackend"

    monkeypatch.setattr(tokenizer_module, "auto_tokenizer_class_elsewhere", ask)
    folder = _declaring(tokenizer_dir, tmp_path, "TokenizersBackend")
    remembered = tokenizer_module.auto_tokenizer_class_remembered
    assert remembered(_model(folder)) == remembered(_model(folder)) == "TokenizersBackend"
    assert len(asked) == 1  # the second start asks no helper process
    config = folder / "tokenizer_config.json"
    config.write_text(config.read_text() + " ")  # the folder changed: asked again
    assert remembered(_model(folder)) == "TokenizersBackend" and len(asked) == 2
    (tmp_path / "cache" / tokenizer_module.AUTO_CLASS_CACHE_FILE).write_text("{not json")
    assert remembered(_model(folder)) == "TokenizersBackend" and len(asked) == 3  # a broken file is asked past
    monkeypatch.setattr(tokenizer_module, "auto_tokenizer_class_elsewhere", lambda model_config, give_up=None: None)
    assert remembered(_model(tmp_path / "not-local")) is None  # nothing to remember, nothing written


def test_a_class_named_by_the_launcher_loads_without_asking(tokenizer_dir: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # The --api-server-count launcher asked once for every API server: no helper process, no AutoTokenizer here
    # (torch is imported in this test process, where an API server asked by none loads with AutoTokenizer).
    from infercore import tokenizer_loading as tokenizer_module

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("asked again")

    for name in ("auto_tokenizer_class_elsewhere", "auto_tokenizer_class_remembered", "_auto"):
        monkeypatch.setattr(tokenizer_module, name, never)
    folder = _declaring(tokenizer_dir, tmp_path, "Qwen2Tokenizer")
    assert type(serving_tokenizer(_model(folder), class_name="GPT2Tokenizer")).__name__ == "GPT2Tokenizer"
    assert type(serving_tokenizer(_model(folder), class_name="Qwen2Tokenizer")).__name__ == "Qwen2Tokenizer"
    served = serving_tokenizer(_model(tokenizer_dir), class_name="TokenizersBackend")
    assert type(served).__name__ == "TokenizersBackend"
    assert served(TEXT).input_ids == AutoTokenizer.from_pretrained(str(tokenizer_dir))(TEXT).input_ids
    with pytest.raises(AssertionError, match="asked again"):  # no class named: asked as before
        serving_tokenizer(_model(folder))


def test_naming_the_class_imports_no_transformers(tokenizer_dir: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # What the launcher reads to find a remembered answer (transformers' version) imports nothing heavy: it
    # spawns its API servers after, and keeps none of their imports.
    import subprocess
    import sys

    from infercore import tokenizer_loading as tokenizer_module

    monkeypatch.setenv("INFERCORE_CACHE_DIR", str(tmp_path / "cache"))
    folder = _declaring(tokenizer_dir, tmp_path, "TokenizersBackend")
    monkeypatch.setattr(tokenizer_module, "auto_tokenizer_class_elsewhere", lambda model_config, give_up=None: "TokenizersBackend")
    assert tokenizer_module.auto_tokenizer_class_remembered(_model(folder)) == "TokenizersBackend"  # remembered
    probe = ("import json, sys, types\n"
             "from infercore.tokenizer_loading import auto_tokenizer_class_remembered\n"
             f"model = types.SimpleNamespace(model={str(folder)!r}, tokenizer=None, trust_remote_code=False)\n"
             "answer = auto_tokenizer_class_remembered(model)\n"
             "print(json.dumps([answer, sorted(m for m in ('transformers', 'torch') if m in sys.modules)]))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["TokenizersBackend", []]
