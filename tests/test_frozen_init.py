"""fast_frozen_init: same values, same frozenness, same defaults as the dataclass's own __init__."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
from hypothesis import given, strategies as st

from dmocker._frozen import fast_frozen_init


@dataclasses.dataclass(frozen=True, slots=True)
class _Plain:
    a: int
    b: float
    c: tuple[int, ...] = ()
    d: str | None = None


@fast_frozen_init
@dataclasses.dataclass(frozen=True, slots=True)
class _Fast:
    a: int
    b: float
    c: tuple[int, ...] = ()
    d: str | None = None


@given(st.integers(), st.floats(allow_nan=False), st.lists(st.integers(), max_size=3).map(tuple),
       st.none() | st.text(max_size=3), st.booleans())
def test_same_fields_as_the_generated_init(a: int, b: float, c: tuple[int, ...], d: str | None,
                                           keywords: bool) -> None:
    ref = _Plain(a, b, c, d)
    got = _Fast(a=a, b=b, c=c, d=d) if keywords else _Fast(a, b, c, d)
    assert dataclasses.astuple(got) == dataclasses.astuple(ref)
    assert got == _Fast(a, b, c, d) and hash(got) == hash(_Fast(a, b, c, d))
    assert pickle.loads(pickle.dumps(got)) == got


def test_defaults_and_frozenness() -> None:
    v = _Fast(1, 2.0)
    assert (v.c, v.d) == ((), None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.a = 3  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        _Fast(1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _Fast(1, 2.0, e=3)  # type: ignore[call-arg]


def test_unsupported_shapes_fail_loudly() -> None:
    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class PostInit:
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclasses.dataclass(slots=True)
    class Mutable:
        a: int

    for cls in (NoSlots, PostInit, Mutable):
        with pytest.raises(TypeError):
            fast_frozen_init(cls)


def test_introspection_sees_the_dataclass_signature() -> None:
    import inspect
    import typing

    from hypothesis import find

    assert inspect.signature(_Fast) == inspect.signature(_Plain)
    assert typing.get_type_hints(_Fast.__init__) == typing.get_type_hints(_Plain.__init__)
    # st.builds infers the field strategies from those hints, as for the plain dataclass
    assert find(st.builds(_Fast), lambda v: v.a > 5 and isinstance(v.b, float)).a > 5


def test_default_factory_gives_a_fresh_value_per_instance() -> None:
    @fast_frozen_init
    @dataclasses.dataclass(frozen=True, slots=True)
    class WithFactory:
        a: int
        b: list[int] = dataclasses.field(default_factory=list)

    x, y = WithFactory(1), WithFactory(2)
    assert x.b == [] and x.b is not y.b
    given_list = [3]
    assert WithFactory(1, given_list).b is given_list
