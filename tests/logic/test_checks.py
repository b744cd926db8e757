"""The one home of the checks (:mod:`pseudosl.logic.checks`, re-exported by :mod:`pseudosl.checks`) and the one error
family (every error class of the package a :class:`~pseudosl.errors.PseudoslError`), issue 40 item 2, issue 39
item 4."""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import pseudosl
import pseudosl.checks
from pseudosl.errors import PseudoslError
from pseudosl.logic import checks as logic_checks
from pseudosl.logic.checks import as_array, check_bool, check_int

SRC = Path(pseudosl.__file__).resolve().parent


def test_the_torch_free_checks_have_one_home_and_the_tensor_checks_re_export_them():
    for name in logic_checks.__all__:
        assert getattr(pseudosl.checks, name) is getattr(logic_checks, name), name
    import pseudosl.logic.errors as errors
    assert not [n for n in vars(errors) if n.startswith("check") or n in ("as_int", "parse_int_token")]
    import pseudosl.psl.sampling as sampling
    assert not hasattr(sampling, "check_count")


def test_no_module_defines_an_int_or_bool_check_of_its_own():
    """``check_int`` is the only int check and ``check_bool`` the only switch check: no other function of the package
    is named like one (``as_int``, ``check_count``, ``check_flag`` ...)."""
    suspects = {"as_int", "check_count", "check_flag", "as_bool", "check_switch", "to_int"}
    found = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name in suspects:
                found.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name}")
    assert not found


def test_every_error_class_of_the_package_is_a_pseudosl_error():
    """Each exception class a module of the package defines derives from PseudoslError (and a built-in type)."""
    classes = []
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if "experiments.detox" in name and importlib.util.find_spec("transformers") is None:
            continue
        module = importlib.import_module(name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == name:
                classes.append(value)
    assert len(classes) >= 12
    assert not [c.__qualname__ for c in classes if not issubclass(c, PseudoslError)]
    from pseudosl.logic.errors import CircuitError, SizeLimitError, UnsatisfiableError
    assert pseudosl.errors.PseudoslError is pseudosl.logic.errors.PseudoslError
    assert all(issubclass(c, ValueError) for c in (CircuitError, SizeLimitError, UnsatisfiableError))


@pytest.mark.parametrize("value", [True, False, np.bool_(True), np.False_])
def test_check_bool_takes_bools(value):
    out = check_bool("flag", value)
    assert out is bool(value)


@pytest.mark.parametrize("value", ["True", "no", "", 0, 1, 2.0, None, np.int64(1), torch.tensor(True), [False]])
def test_check_bool_refuses_everything_read_by_truth_value(value):
    with pytest.raises(TypeError, match=r"^flag must be True or False, got "):
        check_bool("flag", value)


def test_check_bool_takes_none_only_where_it_means_something():
    assert check_bool("fused", None, none="the device's default") is None
    with pytest.raises(TypeError, match=r"fused must be True, False or None \(the device's default\), got str 'auto'"):
        check_bool("fused", "auto", none="the device's default")


@given(st.integers(-10**40, 10**40), st.integers(-5, 5), st.integers(5, 10**30))
def test_check_int_bounds_name_the_argument_and_the_bound(value, low, high):
    if low <= value <= high:
        assert check_int("n", value, low, high=high) == value
    else:
        with pytest.raises(ValueError, match=r"^n must be (>=|<=) "):
            check_int("n", value, low, " (the fix)", high=high)


def test_as_array_names_a_ragged_nesting():
    assert as_array("rows", [[1, 2], [3, 4]]).shape == (2, 2)
    with pytest.raises(ValueError, match="rows must be a rectangular array; got rows of different lengths"):
        as_array("rows", [[1, 2, 3], [4]])
