"""The floors (issue "Floors by folder"): a folder imports its own floor and the floors below,
never above. Every import of every module counts, those inside functions too; the two
deliberate upward edges are listed by name, each with its reason in the code."""

from __future__ import annotations

import ast
from pathlib import Path

import torchdoctor.version

PACKAGE = Path(torchdoctor.version.PACKAGE_DIR)

# lowest first; a module belongs to the longest prefix listed
FLOORS = {
    "torchdoctor.errors": 0, "torchdoctor.version": 0,
    "torchdoctor.model": 1, "torchdoctor.machine": 1,
    "torchdoctor.comm": 2,
    "torchdoctor.run": 3, "torchdoctor.rules": 3,
    "torchdoctor.lint": 4, "torchdoctor.trace": 4, "torchdoctor.report": 4,
    "torchdoctor.diagnosis": 5, "torchdoctor.pipeline": 5,
    "torchdoctor.compare": 6, "torchdoctor.tune": 6, "torchdoctor.memory": 6, "torchdoctor.integrations": 6,
    "torchdoctor.api": 7,
    "torchdoctor.commands": 8, "torchdoctor.cli": 8, "torchdoctor.__main__": 8, "torchdoctor": 8,
}
# (importer, imported prefix): the data model's Report renders itself when a user asks
# (Report.to_json, the notebook's _repr_html_)
DELIBERATE = {("torchdoctor.model.findings", "torchdoctor.report")}
TOP_LEVEL = {"__init__.py", "__main__.py", "api.py", "cli.py", "errors.py", "pipeline.py", "version.py"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def floor_of(module: str) -> tuple[int, str]:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in FLOORS:
            return FLOORS[prefix], prefix
    raise AssertionError(f"{module} is on no floor: add its folder to FLOORS (and to the README's table)")


def imports(path: Path, module: str) -> list[tuple[str, int]]:
    """(imported module, line) for every torchdoctor import in the file, nested ones included."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            # `from torchdoctor.x import y`: y may be a module of x
            found += [(f"{base}.{alias.name}" if (PACKAGE.parent / f"{base}.{alias.name}".replace(".", "/")).exists()
                       or (PACKAGE.parent / (f"{base}.{alias.name}".replace(".", "/") + ".py")).exists() else base,
                       node.lineno) for alias in node.names]
    return [(name, line) for name, line in found if name == "torchdoctor" or name.startswith("torchdoctor.")]


def test_no_import_runs_up_a_floor():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        floor, _ = floor_of(module)
        for target, line in imports(path, module):
            target_floor, prefix = floor_of(target)
            if target_floor > floor and not any(module == a and target.startswith(b) for a, b in DELIBERATE):
                upward.append(f"{path.relative_to(PACKAGE)}:{line} imports {target} (floor {floor} -> {target_floor})")
    assert not upward, "imports that run up a floor:\n" + "\n".join(upward)


def test_the_checker_sees_imports_inside_functions():
    """The walk above would pass vacuously if it missed the late imports (pipeline.py imports
    the diagnosis only inside its functions; findings.py its renderers)."""
    assert "torchdoctor.diagnosis.run" in {name for name, _ in imports(PACKAGE / "pipeline.py", "torchdoctor.pipeline")}
    late = {name for name, _ in imports(PACKAGE / "model" / "findings.py", "torchdoctor.model.findings")}
    assert {"torchdoctor.report.json_", "torchdoctor.report.html"} <= late


def test_the_package_root_holds_no_data_modules():
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in TOP_LEVEL)
    assert not loose, f"modules loose at the top level (give them a floor's folder): {loose}"
    assert not (PACKAGE / "diagnose").exists()  # torchdoctor.diagnose is the API function only
    for folder in sorted(p for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()):
        floor_of(f"torchdoctor.{folder.name}")
