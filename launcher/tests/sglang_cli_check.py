"""Parse SGLang server command lines with SGLang's own argparse parser, no torch/CUDA.

Our own code, not SGLang's; run by tests/conformance.rs in a venv that holds
`pip install --no-deps sglang==X` and its light dependencies (`cargo xtask setup`).
torch, triton and torchvision (and transformers with --fake-transformers, for 0.5.18) are
replaced by an import-time stand-in that only lets imports complete: SGLang's parser
construction is static, so the parser is SGLang's own.

usage: python sglang_cli_check.py [--fake-transformers] < argvs
       python sglang_cli_check.py [--fake-transformers] --list-flags
stdin:  one JSON array of strings per line (the args after `python -m sglang.launch_server`)
stdout: one JSON line per input line:
        {"ok": true, "version", "warnings", "args": {dest: value}}
        or {"ok": false, "version", "exit_code": 2, "stderr": [last line]}
--list-flags: every option string of the parser and how many values it takes, one
        "--flag<TAB>N" line each (N: 0 for a switch, 1 for one value, + for one or more,
        * for any number, ? for an optional one), sorted; the sim's table of SGLang's flags
        (sim/src/sglang_flags/) is this output.
"""
import abc, contextlib, importlib.abc, importlib.machinery, io, json, sys, types


class _Meta(abc.ABCMeta):  # every attribute of a faked module is such a class
    def __new__(m, n, b, ns, **kw): return super().__new__(m, n, b, ns)
    def __init__(c, n, b, ns, **kw): super().__init__(n, b, ns)
    def __getattr__(c, n):
        if n.startswith("__") and n.endswith("__"): raise AttributeError(n)
        return _fake(f"{c.__qualname__}.{n}")
    def __call__(c, *a, **k):
        if "_is_fake" not in c.__dict__: return super().__call__(*a, **k)  # real subclass
        if len(a) == 1 and not k and callable(a[0]): return a[0]  # used as a decorator
        return _Decor()
    def register(c, *a, **k):
        return super().register(*a, **k) if "_is_fake" not in c.__dict__ else (a[0] if a else None)
    def __getitem__(c, k): return c
    def __setitem__(c, k, v): pass
    def __contains__(c, k): return False
    def __iter__(c): return iter(())
    def __len__(c): return 0
    def __bool__(c): return False
    def __int__(c): return 0
    def __index__(c): return 0
    def __float__(c): return 0.0
    def __lt__(c, o): return False
    def __le__(c, o): return False
    def __gt__(c, o): return False
    def __ge__(c, o): return False
    def __or__(c, o): return c
    def __ror__(c, o): return c


class _Decor:
    def __call__(self, *a, **k): return a[0] if len(a) == 1 and not k and callable(a[0]) else self
    def __getattr__(self, n):
        if n.startswith("__"): raise AttributeError(n)
        return _fake("decor." + n)
    def __bool__(self): return False


_cache = {}


def _fake(q):
    if q not in _cache:
        _cache[q] = _Meta(q.rsplit(".", 1)[-1], (object,), {"__qualname__": q, "_is_fake": True})
    return _cache[q]


class _Mod(types.ModuleType):
    def __getattr__(self, n):
        if n == "__version__": return "2.99.0"
        if n in ("npu", "_npu"): raise AttributeError(n)  # hasattr(torch, "npu") must be False
        if n.startswith("__") and n.endswith("__"): raise AttributeError(n)
        return _fake(f"{self.__name__}.{n}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, tops): self.tops = set(tops)
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.tops:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None
    def create_module(self, spec):
        m = _Mod(spec.name); m.__path__ = []; return m
    def exec_module(self, m): pass


def main(argv):
    fake = ["torch", "triton", "torchvision"]
    if argv and argv[0] == "--fake-transformers":
        fake.append("transformers")
        argv = argv[1:]
    list_flags = argv[:1] == ["--list-flags"]
    sys.meta_path.insert(0, _Finder(fake))
    import argparse, logging
    from sglang.srt.server_args import ServerArgs
    from sglang.version import __version__
    warnings = []

    class _Collect(logging.Handler):
        def emit(self, record):
            warnings.append(record.getMessage().replace("\x1b[1;33m", "").replace("\x1b[0m", ""))

    logging.getLogger().addHandler(_Collect(logging.WARNING))
    parser = argparse.ArgumentParser(prog="sglang serve")  # as in prepare_server_args
    ServerArgs.add_cli_args(parser)
    if list_flags:
        rows = set()
        for action in parser._actions:
            n = action.nargs
            arity = "0" if n == 0 else "1" if n is None else str(n)
            rows.update(f"{o}\t{arity}" for o in action.option_strings if o.startswith("--"))
        print("\n".join(sorted(rows)))
        return 0
    for line in sys.stdin:
        if not line.strip():
            continue
        args = json.loads(line)
        warnings.clear()
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                ns = parser.parse_args(args)
        except SystemExit as e:
            out = {"ok": False, "version": __version__, "exit_code": e.code,
                   "stderr": err.getvalue().strip().splitlines()[-1:]}
        else:
            out = {"ok": True, "version": __version__,
                   "warnings": warnings + err.getvalue().strip().splitlines(), "args": vars(ns)}
        print(json.dumps(out, default=repr), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
