"""Imports from the installed sglang wheel without torch, for the test drivers next to this file.

Our test code, not SGLang's. sglang/__init__.py and some sub-packages' __init__.py import torch;
registering those packages as bare package objects lets the wheel's modules below them be
imported as they are.
"""

import os
import sys
import sysconfig
import types


def bare_packages(*names):
    """Registers each dotted package name as a bare package over its folder in the wheel (its
    __init__.py not run); returns the site-packages folder the wheel is in."""
    root = sysconfig.get_paths()["purelib"]
    for name in names:
        pkg = types.ModuleType(name)
        pkg.__path__ = [os.path.join(root, *name.split("."))]
        sys.modules[name] = pkg
    return root
