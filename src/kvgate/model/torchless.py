"""Use transformers' config classes without importing torch, where torch is installed.

With torch installed, transformers' config modules import it (``configuration_utils``
→ ``modeling_rope_utils``: ``if is_torch_available(): import torch``; ``utils.type_validators``
→ ``activations``: ``from torch import nn``), which made ``kvgate geometry CONFIG`` take
2.4× as long with torch installed as without (``benchmarks/RESULTS.md``, start-up with torch installed).
While transformers' config classes are imported and used here, and torch is installed but
not yet imported (:func:`with_config_classes`):

- ``sys.modules["torch"]`` holds a stand-in (:class:`_Deferred`): ``import torch`` binds it
  without running torch;
- ``sys.modules["transformers.activations"]`` holds one whose ``ACT2FN`` has the activation
  names of transformers' own ``activations.ACT2CLS`` (read from that file's source, not
  copied), so the activation-name check of ``type_validators`` (``activation_fn_key``)
  answers as with torch;
- ``configuration_utils.is_torch_available`` reads ``False``, so ``PreTrainedConfig`` keeps
  ``dtype`` as the config's string (``to_dict`` gives that string back with torch too).

Afterwards the stand-ins leave ``sys.modules``; in the modules that bound them they forward
every attribute to the real module, imported on first use. So nothing imported meanwhile is
left in a no-torch state, and ``is_torch_available`` keeps its true (cached) answer. Anything
that touches torch meanwhile stops the attempt (:class:`_TorchNeeded`), which is then
repeated with torch imported. A process that has already imported torch (an engine) reads
configs with it, as before.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import os
import sys
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

_T = TypeVar("_T")


class _TorchNeeded(BaseException):
    """Something touched torch while :func:`_torch_deferred` held it back. A
    ``BaseException``, so that no ``except ImportError`` / ``except Exception`` in the code
    being imported can swallow it and finish that module in a no-torch state."""


class _Deferred(types.ModuleType):
    """A module held back (module doc): it carries the real ``__spec__`` (which
    ``importlib.util.find_spec``, hence transformers' ``is_torch_available``, returns).
    While ``deferring`` is true any other attribute raises :class:`_TorchNeeded`;
    afterwards every attribute is the real module's, imported on first use."""

    def __init__(self, spec: Any, **attrs: Any) -> None:
        super().__init__(spec.name)
        self.__spec__ = spec
        self.__dict__.update(attrs)
        self.deferring = True

    def __getattr__(self, name: str) -> Any:
        if self.__dict__.get("deferring", False):
            package = getattr(self.__spec__, "submodule_search_locations", None) is not None
            if name.startswith("__") and (name != "__path__" or not package):
                raise AttributeError(name)  # not set, as on the real module (``from m import x`` asks)
            raise _TorchNeeded(f"{self.__name__}.{name}")
        return getattr(importlib.import_module(self.__name__), name)


class _DeferredActivations(Mapping[str, Any]):
    """``ACT2FN`` of the held-back ``transformers.activations``: its keys are the names of
    ``ACT2CLS`` in that module's source; a value is the real one (imported on use)."""

    def __init__(self, names: list[str], module: _Deferred | None = None) -> None:
        self.names, self.module = names, module

    def __len__(self) -> int:
        return len(self.names)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __contains__(self, key: object) -> bool:
        return key in self.names

    def __getitem__(self, key: str) -> Any:
        if self.module is None or self.module.deferring:
            raise _TorchNeeded(f"ACT2FN[{key!r}]")
        return importlib.import_module("transformers.activations").ACT2FN[key]


def _activation_names(path: str | None) -> list[str] | None:
    """The string keys of the ``ACT2CLS = {...}`` literal in ``path`` (transformers'
    ``activations.py``), or ``None`` when the file does not have one."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "ACT2CLS" for t in node.targets)
                and isinstance(node.value, ast.Dict)):
            keys = [k.value if isinstance(k, ast.Constant) and isinstance(k.value, str) else None
                    for k in node.value.keys]
            return None if None in keys else keys  # type: ignore[return-value]
    return None


def _spec(name: str) -> Any:
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


@contextlib.contextmanager
def _torch_deferred() -> Iterator[None]:
    """Within: torch and ``transformers.activations`` are held back and transformers' config
    code keeps dtypes as strings (module doc), when torch is installed and not yet imported;
    else a no-op.

    Raises:
        _TorchNeeded: something touched torch within (the caller repeats without this).
    """
    spec = None if "torch" in sys.modules else _spec("torch")
    if spec is None:
        yield
        return
    held: dict[str, _Deferred] = {"torch": _Deferred(spec)}
    if "transformers.activations" not in sys.modules:
        act = _spec("transformers.activations")
        names = _activation_names(getattr(act, "origin", None)) if act is not None else None
        if act is not None and names is not None:
            acts = _DeferredActivations(names)
            held[act.name] = acts.module = _Deferred(act, ACT2FN=acts)
    sys.modules.update(held)
    try:
        try:
            cu: Any = importlib.import_module("transformers.configuration_utils")
        except ImportError:  # pragma: no cover - transformers is a core dependency
            cu = None
        real = getattr(cu, "is_torch_available", None)
        if real is not None:
            cu.is_torch_available = _false
        try:
            yield
        finally:
            if real is not None:
                cu.is_torch_available = real
    finally:
        for name, mod in held.items():
            mod.deferring = False
            if sys.modules.get(name) is mod:
                del sys.modules[name]


def _false() -> bool:
    return False


def with_config_classes(fn: Callable[[], _T]) -> _T:
    """``fn()`` (which imports or uses transformers' config classes) without importing torch
    where it can be done (:func:`_torch_deferred`), else with torch."""
    # transformers prints "PyTorch was not found..." on import when torch is absent: noise here
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    try:
        with _torch_deferred():
            return fn()
    except _TorchNeeded:
        return fn()
