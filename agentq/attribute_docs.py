"""The attribute docstrings of agentq's settings models, read when asked.

A field's docstring (the string literal under its annotation) is its meaning in
the generated ``docs/reference/`` pages. pydantic can read them itself
(``use_attribute_docstrings``), but it does so while each class is built, by
reading and parsing the class's source: about 40 ms of every process that
imports the settings models (a worker's start-up included), for text only the
reference generator reads. :func:`field_docs` reads it there instead, to the
same text pydantic gives.
"""

from __future__ import annotations

import ast
import inspect
import textwrap

from pydantic import BaseModel

__all__ = ["field_docs"]


def _class_docs(cls: type) -> dict[str, str]:
    """The docstrings of the annotated attributes written in ``cls`` itself."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    node = tree.body[0]
    assert isinstance(node, ast.ClassDef)
    docs: dict[str, str] = {}
    for before, after in zip(node.body, node.body[1:], strict=False):
        if (
            isinstance(before, ast.AnnAssign)
            and isinstance(before.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[before.target.id] = inspect.cleandoc(after.value.value)
    return docs


def field_docs(model: type[BaseModel]) -> dict[str, str]:
    """Each field's meaning: its ``description=``, else its attribute docstring
    (from the nearest class that declares the field), else ``""``."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):  # a subclass's docstring replaces its base's
        if issubclass(cls, BaseModel) and cls is not BaseModel:
            declared = inspect.get_annotations(cls)
            class_docs = _class_docs(cls)
            for name in declared:
                docs[name] = class_docs.get(name, "")
    return {
        name: info.description if info.description is not None else docs.get(name, "")
        for name, info in model.model_fields.items()
    }
