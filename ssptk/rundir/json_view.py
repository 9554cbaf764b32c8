"""A JSON object of the run-directory contract read through attributes: :class:`JsonView` and its :class:`Key`.

``summary.json`` and ``config.json`` (and their sections) are read by key in one place, here and in the classes
built on it (:mod:`ssptk.rundir.summary_file`, :mod:`ssptk.rundir.config_file`); every other module reads their
values as typed attributes (``summary.steps_per_s``). A view is the JSON object itself (a ``dict``), so the file
is written back exactly as it was read, keys a later version added included, and users' ``summary["x"]`` keeps
working. A key a file does not have reads as its default (``None``): older runs still read. Imports nothing of
ssptk.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Generic, TypeVar, overload

__all__ = ["JsonView", "Key"]

_T = TypeVar("_T")
V = TypeVar("V", bound="JsonView")


class Key(Generic[_T]):
    """One documented key of a :class:`JsonView`, read as the attribute of the same name (or of the name the code
    gives it, where the file's ``key`` says less: ``staleness``, the bound, read as ``bound``): the value the object
    holds, through ``read`` where given (a section as its own view), else ``default``."""

    def __init__(self, read: Callable[[Any], _T] | None = None, default: Any = None, key: str | None = None) -> None:
        self.read, self.default, self.name = read, default, key or ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = self.name or name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Key[_T]: ...

    @overload
    def __get__(self, obj: JsonView, owner: type | None = None) -> _T: ...

    def __get__(self, obj: JsonView | None, owner: type | None = None) -> Key[_T] | _T:
        if obj is None:
            return self
        value = dict.get(obj, self.name, self.default)
        return self.read(value) if self.read is not None else value


class JsonView(dict[str, Any]):
    """A JSON object of the contract with its documented keys as typed attributes (:class:`Key`); ``KEYS`` lists
    them. Built from any mapping (a file as read, a dict written by hand); nothing is checked here: the readers
    of :class:`ssptk.rundir.RunDir` hold each file to the contract first (:mod:`ssptk.rundir.contract`)."""

    KEYS: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.KEYS = tuple(v.name for klass in reversed(cls.__mro__) for v in vars(klass).values()
                         if isinstance(v, Key))

    @classmethod
    def of(cls: type[V], obj: Mapping[str, Any] | None) -> V:
        """``obj`` as this view (the same object when it is one already; ``{}`` for ``None`` or a non-mapping)."""
        if isinstance(obj, cls):
            return obj
        return cls(obj) if isinstance(obj, Mapping) else cls()

    @classmethod
    def maybe(cls: type[V], obj: Any) -> V | None:
        """``obj`` as this view, or ``None`` where it is not a JSON object (a section a file does not have)."""
        return cls.of(obj) if isinstance(obj, Mapping) else None

    def has(self, key: Key[Any]) -> bool:
        """Whether the object holds ``key`` at all (``null`` included): ``view.has(Predicted.cores)``."""
        return key.name in self
