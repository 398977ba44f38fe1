"""Argument edits of --fix, one call layout at a time: every comment survives, on its line."""

import libcst as cst
import pytest

from torchdoctor.lint.call_edits import drop_argument, set_argument


def edited(source: str, edit) -> str:
    class Editor(cst.CSTTransformer):
        def leave_Call(self, original, updated):
            return edit(updated) if isinstance(updated.func, cst.Attribute) else updated
    out = cst.parse_module(source).visit(Editor()).code
    compile(out, "<edited>", "exec")
    return out


DROPS = [
    # (layout before, after removing set_to_none)
    ("f.g(a, set_to_none=False, b=1)\n", "f.g(a, b=1)\n"),
    ("f.g(a, set_to_none=False,)\n", "f.g(a,)\n"),
    ("f.g(\n    set_to_none=False,  # trailing\n)\n", "f.g(\n    # trailing\n)\n"),
    ("f.g(set_to_none=False  # why\n    )\n", "f.g(  # why\n    )\n"),
    ("f.g(  # open\n    set_to_none=False,\n)\n", "f.g(  # open\n)\n"),
    ("f.g(\n    a,\n    set_to_none=False,  # c\n    b=1,\n)\n", "f.g(\n    a,\n    # c\n    b=1,\n)\n"),
    ("f.g(\n    a,  # about a\n    set_to_none=False\n)\n", "f.g(\n    a  # about a\n)\n"),
    ("f.g(\n    a,  # about a\n    set_to_none=False,  # c\n)\n", "f.g(\n    a,  # about a\n    # c\n)\n"),
    ("f.g(a, set_to_none=False  # why\n    )\n", "f.g(a  # why\n    )\n"),
    ("f.g(\n    set_to_none=False,\n    # before b\n    b=1,\n)\n", "f.g(\n    # before b\n    b=1,\n)\n"),
]


@pytest.mark.parametrize("before, after", DROPS)
def test_dropping_an_argument_keeps_every_comment(before, after):
    assert edited(before, lambda call: drop_argument(call, "set_to_none")) == after


APPENDS = [
    # (layout before, after adding nb=True)
    ("f.g()\n", "f.g(nb=True)\n"),
    ("f.g(a,)\n", "f.g(a, nb=True,)\n"),
    ("f.g(a, b,  # c\n)\n", "f.g(a, b, nb=True,  # c\n)\n"),
    ("f.g(\n    a,\n    b  # c\n)\n", "f.g(\n    a,\n    b,  # c\n    nb=True\n)\n"),
    ("f.g(\n    a,\n    b,  # c\n    # own line\n)\n", "f.g(\n    a,\n    b,  # c\n    nb=True,\n    # own line\n)\n"),
    ("x = f.g(  # c\n)\n", "x = f.g(  # c\n    nb=True\n)\n"),
    ("f.g(*a)\n", "f.g(*a)\n"),  # *args may pass it already: never a duplicate
    ("f.g(x, **kw)\n", "f.g(x, **kw)\n"),
]


@pytest.mark.parametrize("before, after", APPENDS)
def test_a_new_keyword_goes_after_the_last_argument_and_its_comment(before, after):
    assert edited(before, lambda call: set_argument(call, "nb", "True")) == after


def test_a_positional_argument_is_replaced_in_place_not_duplicated():
    assert edited("f.g(0, False)\n", lambda call: set_argument(call, "nb", "True", 1)) == "f.g(0, True)\n"
    assert edited("f.g(0, nb=False)\n", lambda call: set_argument(call, "nb", "True", 1)) == "f.g(0, nb=True)\n"
    assert edited("f.g(*a, False)\n", lambda call: set_argument(call, "nb", "True", 1)) == "f.g(*a, False)\n"
