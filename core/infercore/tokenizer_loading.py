"""Loading a model's tokenizer: with ``AutoTokenizer``, or, in the API server, with the class ``AutoTokenizer`` would
pick but without importing it (its module imports transformers' configuration code and torch under it, about
200 MB an API server serving a text model otherwise never holds).

:func:`serving_tokenizer` is the API server's: the folder's declared class first, checked against the class a
short-lived process says ``AutoTokenizer`` picks (remembered per folder in infercore's cache folder).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def _exported_tokenizer_class(class_name: object) -> type[PreTrainedTokenizerBase] | None:
    """transformers' tokenizer class of that name (importing its module only), or None."""
    if not isinstance(class_name, str) or not class_name.isidentifier():
        return None
    import transformers

    named = getattr(transformers, class_name, None)
    base = transformers.PreTrainedTokenizerBase
    return named if isinstance(named, type) and issubclass(named, base) else None


def _tokenizer_folder(name: str, revision: str | None) -> Path | None:
    """The local folder of a tokenizer: ``name`` itself, or a hub repo's snapshot where both its tokenizer files
    are already in the Hugging Face cache (None otherwise: nothing is downloaded here)."""
    folder = Path(name).expanduser()
    if folder.is_dir():
        return folder
    try:
        from huggingface_hub import try_to_load_from_cache

        found = [try_to_load_from_cache(name, file, revision=revision)
                 for file in ("tokenizer_config.json", "tokenizer.json")]
    except Exception:  # noqa: BLE001 - not a repo id, or no hub client: no cached folder
        return None
    if all(isinstance(path, str) for path in found):
        return Path(str(found[0])).parent
    return None


def declared_tokenizer_class(name: str, revision: str | None = None) -> type[PreTrainedTokenizerBase] | None:
    """The class a tokenizer folder's ``tokenizer_config.json`` declares, where transformers exports it and the
    folder (local, or a hub repo's cached snapshot) holds a ``tokenizer.json`` and no code of its own; None
    otherwise.

    Usually the class ``AutoTokenizer`` picks, but not always (it overrides some declarations by model type), so
    only the API server loads with it, as a first guess checked against ``AutoTokenizer``'s answer in a process of
    its own (:func:`auto_tokenizer_class_elsewhere`) before it serves."""
    folder = _tokenizer_folder(name, revision)
    if folder is None:
        return None
    try:
        if not (folder / "tokenizer.json").is_file():
            return None
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or "auto_map" in config:
        return None
    return _exported_tokenizer_class(config.get("tokenizer_class"))


def get_tokenizer(model_config: Any, *, class_name: str | None = None) -> PreTrainedTokenizerBase:
    """Load the fast tokenizer of ``model_config.tokenizer`` (or ``.model``): a local folder or hub id.

    ``AutoTokenizer`` picks its class, unless ``class_name`` names one transformers exports (what
    ``AutoTokenizer`` picked in another process): that skips ``AutoTokenizer``'s module, which imports
    transformers' configuration code and torch under it, about 200 MB an API server does not otherwise need.
    Code from the model folder runs only when ``model_config.trust_remote_code`` is set.
    """
    name, revision = _tokenizer_name(model_config), getattr(model_config, "revision", None)
    direct = _exported_tokenizer_class(class_name) if class_name else None
    if direct is not None:
        return _load(name, functools.partial(direct.from_pretrained, name, revision=revision))
    return _load(name, functools.partial(_auto, name, revision, bool(getattr(model_config, "trust_remote_code", False))))


def guess_tokenizer(model_config: Any) -> PreTrainedTokenizerBase | None:
    """The tokenizer loaded with its folder's declared class (:func:`declared_tokenizer_class`), without
    ``AutoTokenizer``; None where there is no such class to guess (nothing loaded)."""
    declared = declared_tokenizer_class(_tokenizer_name(model_config), getattr(model_config, "revision", None))
    return None if declared is None else get_tokenizer(model_config, class_name=declared.__name__)


def _tokenizer_name(model_config: Any) -> str:
    """The tokenizer's folder or hub id: ``model_config.tokenizer``, else the model's."""
    return getattr(model_config, "tokenizer", None) or model_config.model


def _auto(name: str, revision: str | None, trust_remote_code: bool) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name, revision=revision, trust_remote_code=trust_remote_code)


def _load(name: str, load: Callable[[], PreTrainedTokenizerBase]) -> PreTrainedTokenizerBase:
    try:
        return load()
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"could not load a tokenizer from {name!r} ({exc}); pass --tokenizer with a folder or hub id "
            "that holds tokenizer.json, or --skip-tokenizer-init to send token ids") from None


def auto_tokenizer_class(model_config: Any) -> str | None:
    """The name of the class ``AutoTokenizer`` picks for the model; None without a tokenizer, or where loading it
    fails (the caller's own load then says what is wrong)."""
    if getattr(model_config, "skip_tokenizer_init", False):
        return None
    try:
        return type(get_tokenizer(model_config)).__name__
    except Exception:  # noqa: BLE001 - the caller's own load says what is wrong
        return None


#: Seconds the helper process may take to name ``AutoTokenizer``'s class (imports, and a download of the
#: tokenizer files where they are not cached yet).
AUTO_CLASS_TIMEOUT_S = 300.0
#: How often (seconds) the wait for that process asks ``give_up``.
_POLL_S = 0.2
_AUTO_CLASS_SCRIPT = """
import json, sys, types
from infercore.tokenizer_loading import auto_tokenizer_class
print(json.dumps(auto_tokenizer_class(types.SimpleNamespace(**json.loads(sys.argv[1])))))
"""


def auto_tokenizer_class_elsewhere(model_config: Any, timeout_s: float = AUTO_CLASS_TIMEOUT_S,
                                   give_up: Callable[[], bool] | None = None) -> str | None:
    """:func:`auto_tokenizer_class`, asked of a short-lived Python process: ``AutoTokenizer``'s module imports
    transformers' configuration code and torch under it (about 200 MB, and 2-3 s of imports with some
    transformers releases) that the API server then never holds. None where the process fails, runs out of
    time, or ``give_up`` (polled a few times a second) says the answer is no longer wanted; the process is
    killed then (the caller keeps its own choice)."""
    import subprocess
    import sys
    import time

    fields = {"model": model_config.model, "tokenizer": getattr(model_config, "tokenizer", None),
              "revision": getattr(model_config, "revision", None),
              "trust_remote_code": bool(getattr(model_config, "trust_remote_code", False))}
    try:
        process = subprocess.Popen([sys.executable, "-c", _AUTO_CLASS_SCRIPT, json.dumps(fields)],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError:
        return None
    deadline = time.monotonic() + timeout_s
    with process:
        while True:
            try:
                out, _ = process.communicate(timeout=_POLL_S)
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() < deadline and not (give_up is not None and give_up()):
                    continue
                process.kill()
                process.communicate()
                return None
    try:
        answer = json.loads(out.strip().splitlines()[-1]) if process.returncode == 0 else None
    except (ValueError, IndexError):
        return None
    return answer if isinstance(answer, str) else None


#: The file (in infercore's cache folder) that remembers :func:`auto_tokenizer_class_elsewhere`'s answers.
AUTO_CLASS_CACHE_FILE = "tokenizer_classes.json"


def _class_cache_key(model_config: Any) -> str | None:
    """What the answer for a local tokenizer folder depends on: the folder, its tokenizer and model config files
    (path, size, mtime), transformers' version and ``trust_remote_code``; None for a folder that is not local."""
    folder = Path(_tokenizer_name(model_config)).expanduser()
    if not folder.is_dir():
        return None
    stamps = []
    for file in ("tokenizer_config.json", "tokenizer.json", "config.json"):
        try:
            stat = (folder / file).stat()
            stamps.append(f"{file}:{stat.st_size}:{stat.st_mtime_ns}")
        except OSError:
            stamps.append(f"{file}:-")
    trust = bool(getattr(model_config, "trust_remote_code", False))
    return "|".join([str(folder.resolve()), _transformers_version(), f"trust={trust}", *stamps])


def _transformers_version() -> str:
    """The version of the transformers this process imports (or has imported), read from the installed metadata
    beside the package where there is one (whether or not it is imported, so every process reads the same), so
    that asking (the ``--api-server-count`` launcher does) imports neither transformers nor what it brings in;
    else from the package itself."""
    import importlib.metadata
    import importlib.util

    try:
        spec = importlib.util.find_spec("transformers")
        if spec is not None and spec.origin:
            beside = str(Path(spec.origin).parent.parent)
            for dist in importlib.metadata.distributions(name="transformers", path=[beside]):
                return str(dist.version)
    except (ImportError, ValueError, OSError):
        pass
    import transformers

    return str(transformers.__version__)


def auto_tokenizer_class_remembered(model_config: Any, give_up: Callable[[], bool] | None = None) -> str | None:
    """:func:`auto_tokenizer_class_elsewhere` (``give_up`` passed on), its answer for a local folder remembered in
    infercore's cache folder until the folder's files or transformers change: a warm start starts no helper
    process."""
    from infercore.demo import cache_dir

    key = _class_cache_key(model_config)
    path = cache_dir() / AUTO_CLASS_CACHE_FILE
    try:
        known = json.loads(path.read_text(encoding="utf-8")) if key is not None else {}
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict):
        known = {}
    if isinstance(known.get(key), str):
        return known[key]
    answer = auto_tokenizer_class_elsewhere(model_config, give_up=give_up)
    if key is not None and answer is not None:
        known[key] = answer
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            staging = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            staging.write_text(json.dumps(dict(list(known.items())[-256:])), encoding="utf-8")
            staging.replace(path)  # atomic: API servers starting together never read half a file
        except OSError:
            pass  # an unwritable cache folder costs the next start a helper process, nothing else
    return answer


def matching_tokenizer(tokenizer: PreTrainedTokenizerBase | None, model_config: Any,
                       class_name: str | None) -> PreTrainedTokenizerBase:
    """``tokenizer`` (a first guess, or None) when it is of the class ``AutoTokenizer`` picks (``class_name``; None:
    not known), else the tokenizer loaded with that class (with ``AutoTokenizer`` where the class is not known)."""
    if tokenizer is not None and (class_name is None or type(tokenizer).__name__ == class_name):
        return tokenizer
    return get_tokenizer(model_config, class_name=class_name)


def serving_tokenizer(model_config: Any, *, class_name: str | None = None) -> PreTrainedTokenizerBase:
    """The API server's tokenizer: the one ``AutoTokenizer`` loads, without importing ``AutoTokenizer`` (nor torch)
    in this process where transformers allows it.

    ``class_name`` is the class ``AutoTokenizer`` picks where another process already asked (the
    ``--api-server-count`` launcher asks once for all its API servers): the tokenizer loads with it, and no
    process is asked here. Without it the folder's declared class loads first (:func:`guess_tokenizer`); a
    short-lived process names the class ``AutoTokenizer`` picks (:func:`auto_tokenizer_class_remembered`: once per
    folder), and where the two differ the tokenizer loads again with that class.
    Where loading the tokenizer brought torch in anyway (transformers releases before 5.25 or so import it for
    every tokenizer), ``AutoTokenizer`` loads it here."""
    import sys

    if class_name is not None:
        return get_tokenizer(model_config, class_name=class_name)
    guess = guess_tokenizer(model_config)
    if "torch" in sys.modules:
        return get_tokenizer(model_config)
    return matching_tokenizer(guess, model_config, auto_tokenizer_class_remembered(model_config))
