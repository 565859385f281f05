"""The type stubs that `pip install .` puts beside the extension (nanobind's stubgen)."""
import ast
import os

import ember


def test_stubs_are_installed_and_name_the_api():
    pkg = os.path.dirname(ember.__file__)
    assert os.path.isfile(os.path.join(pkg, "py.typed"))
    with open(os.path.join(pkg, "_ember.pyi"), encoding="utf-8") as f:
        text = f.read()
    tree = ast.parse(text)  # valid Python
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert {"Tensor", "TokenDataset", "CharTokenizer", "dtype", "device"} <= set(classes)
    assert {"manual_seed", "get_rng_state", "randn", "cat", "prepare_char_dataset"} <= functions
    methods = {n.name for n in classes["TokenDataset"].body if isinstance(n, ast.FunctionDef)}
    assert {"get_batch", "window_start", "load"} <= methods
    tensor_methods = {n.name for n in classes["Tensor"].body if isinstance(n, ast.FunctionDef)}
    assert {"backward", "view", "__add__"} <= tensor_methods
