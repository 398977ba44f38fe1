"""For --dry-run, under the interpreter the check will use: import each step script (all are
guarded by `if __name__ == "__main__"`, so importing runs none of them), and for scripts that
train at import (examples, workloads) only compile them and resolve their imports.
Prints one JSON line per path: {"path", "how", "ok", "error"}."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def import_script(rel: str) -> None:
    path = ROOT / rel
    if rel.startswith("benchmarks/gpucheck/"):
        importlib.import_module(rel.removesuffix(".py").replace("/", "."))
        return
    name = f"_gpucheck_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import would: dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)


def resolve_imports(rel: str) -> None:
    """Compile the file and find every module it imports, without running it."""
    path = ROOT / rel
    tree = ast.parse(path.read_text(), str(path))
    compile(tree, str(path), "exec")
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
        for name in names:
            top = name.split(".")[0]
            if (path.parent / f"{top}.py").exists() or (path.parent / top).is_dir():
                continue  # a module beside the script: on its path when it runs
            if importlib.util.find_spec(name) is None:
                raise ImportError(f"no module named {name!r}")


def main(argv: list[str]) -> int:
    how = "import"
    failed = 0
    for arg in argv:
        if arg in ("--import", "--resolve"):
            how = arg[2:]
            continue
        try:
            (import_script if how == "import" else resolve_imports)(arg)
            line = {"path": arg, "how": how, "ok": True, "error": ""}
        except (Exception, SystemExit) as exc:  # SystemExit, a syntax error, a missing module: all mean "would not run"
            failed += 1
            line = {"path": arg, "how": how, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(line), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
