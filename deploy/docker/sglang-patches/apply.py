#!/usr/bin/env python3
"""Apply the SGLang patch set of patches.toml to an installed SGLang.

    python3 apply.py [--sglang-dir DIR] [--version X.Y.Z] [--ledger FILE] [--report FILE]
                     [--dry-run]

Defaults: the `sglang` package the running Python imports (found without importing it) and
its version from pip's record (importlib.metadata), the ledger next to this script.

For each [[patch]] of the ledger: skipped when the version is outside [min_version,
max_version] or at or after fixed_in (the reason is printed); otherwise applied with
`patch -p1 --forward --fuzz=0` in the package directory. A patch that is already in the
files (its reverse applies) is reported as such and left alone, so running twice is harmless.
A patch that should apply and does not fails the run (exit 1) with patch's own output. Each
patched Python file is byte-compiled afterwards (py_compile), which checks it parses and
writes the .pyc the image's non-root user could not.

Prints one line per patch: `sglang-patches: applied|already-applied|skipped|FAILED NAME: why`;
`--report FILE` also writes them as JSON (deploy/tests/sglang_patches.rs reads it).
Exit codes: 0 every patch in range applied (or already was), 1 one did not, 2 bad usage or
ledger. Python 3.8+ with no packages beyond pip (whose vendored tomli reads the ledger where
the standard library's tomllib, 3.11+, is missing).
"""

import argparse
import importlib.metadata
import importlib.util
import json
import os
import py_compile
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def load_toml(path):
    """The ledger as a dict: tomllib (3.11+), else tomli, else pip's vendored tomli."""
    try:
        import tomllib as toml  # noqa: PLC0415
    except ImportError:
        try:
            import tomli as toml  # noqa: PLC0415
        except ImportError:
            from pip._vendor import tomli as toml  # noqa: PLC0415
    with open(path, "rb") as f:
        return toml.load(f)


def release(version):
    """The numeric release of a version string: "0.5.22.post1" -> (0, 5, 22)."""
    m = re.match(r"^\s*v?(\d+(?:\.\d+)*)", version)
    if not m:
        raise ValueError(f"not a version: {version!r}")
    parts = [int(p) for p in m.group(1).split(".")]
    while len(parts) < 3:
        parts.append(0)
    return tuple(parts)


def decide(entry, version):
    """(apply?, reason) for one ledger entry and the installed version."""
    v = release(version)
    fixed_in = entry.get("fixed_in", "")
    if fixed_in and v >= release(fixed_in):
        return False, f"fixed upstream in {fixed_in} (installed {version})"
    if v < release(entry["min_version"]):
        return False, f"{version} is older than min_version {entry['min_version']}"
    if v > release(entry["max_version"]):
        return False, (
            f"WARNING: {version} is newer than max_version {entry['max_version']}, the last "
            "release this patch was checked against, and no fixed_in is recorded: check "
            "whether it still needs the fix and update patches.toml"
        )
    return True, f"{version} is in [{entry['min_version']}, {entry['max_version']}]"


def patched_files(patch_path):
    """The files a -p1 unified diff writes (its `+++ b/...` lines)."""
    out = []
    with open(patch_path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("+++ "):
                name = line[4:].split("\t")[0].strip()
                out.append(name.split("/", 1)[1] if "/" in name else name)
    return out


def run_patch(args, cwd, patch_path):
    cmd = ["patch", "-p1", "--fuzz=0", "--batch", "--no-backup-if-mismatch", "-i", patch_path, *args]
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout


def apply_one(entry, sglang_dir, ledger_dir, dry_run):
    """(status, detail) for one patch that is in range."""
    path = os.path.join(ledger_dir, entry["file"])
    if not os.path.isfile(path):
        return "FAILED", f"{path} is missing"
    # Already applied: the reverse applies cleanly (and the forward does not).
    rc, _ = run_patch(["--reverse", "--dry-run", "--force"], sglang_dir, path)
    if rc == 0:
        return "already-applied", "its reverse applies cleanly; left as is"
    rc, out = run_patch(["--forward", "--dry-run"], sglang_dir, path)
    if rc != 0:
        return "FAILED", "does not apply cleanly:\n" + out.rstrip()
    if dry_run:
        return "applied", "dry run: would apply cleanly"
    rc, out = run_patch(["--forward"], sglang_dir, path)
    if rc != 0:
        return "FAILED", "patch failed:\n" + out.rstrip()
    for name in patched_files(path):
        if name.endswith(".py"):
            try:
                py_compile.compile(os.path.join(sglang_dir, name), doraise=True)
            except py_compile.PyCompileError as e:
                return "FAILED", f"{name} no longer compiles: {e.msg}"
    return "applied", out.strip().replace("\n", "; ")


def installed_sglang_dir():
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sglang-dir", help="the sglang package directory (default: the installed one)")
    ap.add_argument("--version", help="the SGLang version (default: importlib.metadata's)")
    ap.add_argument("--ledger", default=os.path.join(HERE, "patches.toml"))
    ap.add_argument("--report", help="also write the outcome as JSON to this file")
    ap.add_argument("--dry-run", action="store_true", help="check, change nothing")
    a = ap.parse_args(argv)

    sglang_dir = a.sglang_dir or installed_sglang_dir()
    if not sglang_dir or not os.path.isdir(sglang_dir):
        print("sglang-patches: no sglang package found (give --sglang-dir)", file=sys.stderr)
        return 2
    version = a.version
    if not version:
        try:
            version = importlib.metadata.version("sglang")
        except importlib.metadata.PackageNotFoundError:
            print("sglang-patches: sglang is not installed (give --version)", file=sys.stderr)
            return 2
    try:
        ledger = load_toml(a.ledger)
        entries = ledger.get("patch", [])
        for e in entries:
            for key in ("file", "fixes", "min_version", "max_version"):
                if not isinstance(e.get(key), str) or not e[key]:
                    raise ValueError(f"an entry has no {key}: {e.get('file', e)}")
            release(e["min_version"]), release(e["max_version"])
            if e.get("fixed_in"):
                release(e["fixed_in"])
    except (OSError, ValueError) as e:
        print(f"sglang-patches: bad ledger {a.ledger}: {e}", file=sys.stderr)
        return 2

    print(f"sglang-patches: SGLang {version} at {sglang_dir}; {len(entries)} patch(es) in {a.ledger}")
    ledger_dir = os.path.dirname(os.path.abspath(a.ledger))
    results = []
    for e in entries:
        wanted, why = decide(e, version)
        if wanted:
            status, detail = apply_one(e, sglang_dir, ledger_dir, a.dry_run)
        else:
            status, detail = "skipped", why
        results.append({"file": e["file"], "status": status, "detail": detail})
        print(f"sglang-patches: {status} {e['file']}: {detail}")
    if a.report:
        with open(a.report, "w", encoding="utf-8") as f:
            json.dump({"version": version, "sglang_dir": sglang_dir, "patches": results}, f, indent=2)
    failed = [r["file"] for r in results if r["status"] == "FAILED"]
    if failed:
        print(f"sglang-patches: FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
