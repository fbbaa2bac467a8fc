"""Repository-root pytest configuration: optional-dependency modules are collected only where their
dependency is installed (``make test`` installs torch and verl, so CI collects both)."""

import importlib.util

collect_ignore = [
    path
    for path, dependency in (("src/credax/torch.py", "torch"), ("src/credax/verl.py", "verl"))
    if importlib.util.find_spec(dependency) is None
]
