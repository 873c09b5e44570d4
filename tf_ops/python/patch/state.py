"""Installing and undoing the patch table's entries: which families are active, and
what each replaced attribute held before.

Each `tf_ops.patch_keras()` call adds one to the count of every family it selects;
undoing it subtracts. An entry is installed while any of its families counts above
zero, so patches nest and may be undone in any order. Installing replaces one
attribute (a method, a module's function) and remembers what was there; undoing puts
it back (or deletes it, where the class only inherited it), unless something else has
replaced it since, which is then left alone. Under ``jit_compile`` on the CPU an entry
of the families `xla_cpu.LEFT` names calls what it replaced. `generation` changes with
every change of what is installed: caches that depend on it (the functional fusion
plans) compare it.

Installing again what was installed before reuses that replacement where the attribute
still holds what it replaced: `patch_keras()` may be entered at every step (the
benchmarks interleave stock and patched steps so), and building ~130 wrappers each time
cost more than a small model's step gains.
"""

from __future__ import annotations

import collections
import dataclasses
import importlib
import inspect
import threading
from typing import Any, Callable

from tf_ops.python.patch import xla_cpu
from tf_ops.python.patch.entry import Entry

_lock = threading.RLock()
_counts: collections.Counter = collections.Counter()


@dataclasses.dataclass
class _Installed:
    owner: Any
    attribute: str
    had_own: bool  # the owner defined the attribute itself (else it inherited it)
    previous: Any  # the raw attribute (a staticmethod object stays one)
    replacement: Any


_installed: dict[str, _Installed] = {}
# target -> (the raw attribute it replaced, the replacement built for it): reused while
# the attribute holds that same object.
_built: dict[str, tuple[Any, Callable]] = {}
_resolved: dict[str, tuple[Any, str]] = {}
_groups: dict[str, tuple[str, ...]] = {}  # a discovering entry's target -> what it installed
generation = 0


def active(family: str) -> bool:
    """Whether `family` is patched in now."""
    return _counts[family] > 0


def active_families() -> tuple[str, ...]:
    return tuple(sorted(f for f, n in _counts.items() if n > 0))


def resolve_target(target: str) -> tuple[Any, str]:
    """``"pkg.module:Class.attr"`` -> (the class or module, ``"attr"``); ImportError
    or AttributeError where the package or the name is missing."""
    if target in _resolved:
        return _resolved[target]
    module_name, _, path = target.partition(":")
    owner: Any = importlib.import_module(module_name)
    *parents, attribute = path.split(".")
    for name in parents:
        owner = getattr(owner, name)
    getattr(owner, attribute)  # AttributeError if Keras renamed it
    _resolved[target] = owner, attribute
    return owner, attribute


def _install(entry: Entry) -> None:
    if entry.discover is not None:
        found = tuple(t for t in entry.discover() if t not in _installed)
        for target in found:
            _install_one(entry, target)
        _groups[entry.target] = found
        return
    _install_one(entry, entry.target)


def _install_one(entry: Entry, target: str) -> None:
    owner, attribute = resolve_target(target)
    had_own = attribute in vars(owner)
    raw = vars(owner)[attribute] if had_own else inspect.getattr_static(owner, attribute)
    built = _built.get(target)
    if built is not None and built[0] is raw:
        replacement = built[1]
    else:
        original: Callable = getattr(owner, attribute)
        if isinstance(raw, staticmethod):
            original = raw.__func__
        replacement = xla_cpu.stepping_aside(entry.replacement(original), original,
                                             entry.families)
        replacement.__tf_ops_patch__ = entry.target
        _built[target] = raw, replacement
    setattr(owner, attribute, staticmethod(replacement) if isinstance(raw, staticmethod)
            else replacement)
    _installed[target] = _Installed(owner, attribute, had_own, raw, replacement)


def _uninstall(target: str) -> None:
    for member in _groups.pop(target, ()):
        _uninstall(member)
    done = _installed.pop(target, None)
    if done is None:
        return
    current = vars(done.owner).get(done.attribute)  # installed as the owner's own
    if isinstance(current, staticmethod):
        current = current.__func__
    if current is not done.replacement:
        return  # replaced again by someone else since: theirs stays
    if done.had_own:
        setattr(done.owner, done.attribute, done.previous)
    else:
        delattr(done.owner, done.attribute)


def installed(target: str) -> Any:
    """The replacement installed at `target`, or None (a discovering entry's: the
    targets it installed)."""
    if target in _groups:
        return _groups[target]
    done = _installed.get(target)
    return None if done is None else done.replacement


def change(families: tuple[str, ...], delta: int, entries: tuple[Entry, ...],
           available: Callable[[Entry], bool]) -> None:
    """Adds `delta` (+1 or -1) to the count of each of `families`, then installs the
    entries now needed and uninstalls those no longer needed."""
    global generation
    with _lock:
        for family in families:
            _counts[family] += delta
        for entry in entries:
            wanted = entry.replacement is not None and any(
                active(f) for f in entry.families) and available(entry)
            present = entry.target in _installed or entry.target in _groups
            if wanted and not present:
                _install(entry)
            elif not wanted and present:
                _uninstall(entry.target)
        generation += 1
