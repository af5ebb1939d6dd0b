"""kvtier.pyi, the type stub an IDE reads, names exactly the module's public API: every class,
function and exception, and every public method and property of each class, and nothing the
module does not have. Every public name carries a docstring (help(), an IDE's hover)."""

import ast
import inspect
import os

import kvtier

STUB = os.path.join(os.path.dirname(__file__), os.pardir, "kvtier.pyi")


def stub_names():
    tree = ast.parse(open(STUB).read())
    top, members = set(), {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            top.add(node.name)
            members[node.name] = {n.name if not isinstance(n, ast.AnnAssign) else n.target.id
                                  for n in node.body
                                  if isinstance(n, (ast.FunctionDef, ast.AnnAssign))}
        elif isinstance(node, ast.FunctionDef):
            top.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            top.add(node.target.id)
    return top, members


def public(names):
    return {n for n in names if not n.startswith("_")}


def test_the_stub_names_every_public_name_of_the_module_and_no_other():
    top, _ = stub_names()
    module = public(dir(kvtier)) | {"__version__"}
    assert public(top) | {"__version__"} == module


def test_the_stub_names_every_method_and_property_of_each_class():
    _, members = stub_names()
    for name, stubbed in members.items():
        cls = getattr(kvtier, name)
        if issubclass(cls, tuple):  # named tuples: their fields
            assert public(stubbed) == set(cls._fields), name
            continue
        if issubclass(cls, BaseException):
            continue
        own = public(n for n in vars(cls) if not n.startswith("__"))
        assert public(stubbed) == own, name


def test_every_class_and_function_has_a_docstring():
    for name in public(dir(kvtier)):
        obj = getattr(kvtier, name)
        if inspect.isclass(obj) or callable(obj):
            assert (obj.__doc__ or "").strip(), name
