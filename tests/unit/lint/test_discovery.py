"""Which files a directory argument covers."""

import os

from helpers.lint_files import write

from torchdoctor.lint.discovery import discover

LOOP = "for x in loader:\n    model(x).backward()\n    opt.step()\n    v = x.item()\n"


def shown(tmp_path, *targets, **kw) -> list[str]:
    return [s for _, s in discover(list(targets) or [tmp_path], cwd=tmp_path, **kw).files]


def test_virtualenvs_vcs_and_caches_are_skipped(tmp_path):
    for folder in (".venv", "venv", "env/lib/python3.11/site-packages", ".git", "__pycache__", "node_modules",
                   "build"):
        write(tmp_path, LOOP, f"{folder}/skipped.py")
    write(tmp_path, "", "myenv/pyvenv.cfg")
    write(tmp_path, LOOP, "myenv/lib/skipped.py")  # a virtualenv by its pyvenv.cfg, whatever its name
    write(tmp_path, LOOP, "src/train.py")
    write(tmp_path, "{}", "src/nb.ipynb")
    write(tmp_path, "not python", "src/notes.txt")
    assert shown(tmp_path, tmp_path) == ["src/nb.ipynb", "src/train.py"]


def test_a_path_named_on_the_command_line_is_linted_even_inside_an_excluded_folder(tmp_path):
    path = write(tmp_path, LOOP, ".venv/lib/special.py")
    assert shown(tmp_path, path) == [".venv/lib/special.py"]


def test_symlink_loops_end_and_each_file_is_linted_once(tmp_path):
    write(tmp_path, LOOP, "pkg/a.py")
    os.symlink(tmp_path / "pkg", tmp_path / "pkg" / "loop")
    os.symlink(tmp_path / "pkg" / "a.py", tmp_path / "pkg" / "alias.py")
    found = discover([tmp_path], cwd=tmp_path)
    assert [s for _, s in found.files] == ["pkg/a.py"]
    assert any("symbolic link" in note for note in found.notes)


def test_broken_links_and_missing_paths_are_problems(tmp_path):
    os.symlink(tmp_path / "gone.py", tmp_path / "dangling.py")
    found = discover([tmp_path, tmp_path / "missing.py"], cwd=tmp_path)
    assert sorted((p.display, p.message) for p in found.problems) == [
        ("dangling.py", "broken symbolic link"), ("missing.py", "no such file or directory")]


def test_configured_excludes_match_names_and_paths(tmp_path):
    write(tmp_path, LOOP, "legacy/old.py")
    write(tmp_path, LOOP, "gen/model_pb2.py")
    write(tmp_path, LOOP, "gen/keep.py")
    assert shown(tmp_path, tmp_path, excludes=["legacy/", "*_pb2.py"], root=tmp_path) == ["gen/keep.py"]
    assert shown(tmp_path, tmp_path, excludes=["gen/keep.py"], root=tmp_path) == ["gen/model_pb2.py", "legacy/old.py"]


def test_force_exclude_applies_configured_and_default_excludes_to_named_paths(tmp_path):
    legacy = write(tmp_path, LOOP, "legacy/old.py")
    venv = write(tmp_path, LOOP, ".venv/lib/special.py")
    generated = write(tmp_path, LOOP, "gen/model_pb2.py")
    kept = write(tmp_path, LOOP, "src/train.py")
    targets = [legacy, venv, generated, kept, tmp_path / "legacy"]
    assert shown(tmp_path, *targets, excludes=["legacy/", "*_pb2.py"], root=tmp_path, force_exclude=True) == [
        "src/train.py"]
    assert len(shown(tmp_path, *targets[:4], excludes=["legacy/", "*_pb2.py"], root=tmp_path)) == 4


def test_force_exclude_never_skips_the_project_folder_itself(tmp_path):
    project = tmp_path / "build"  # a default-excluded name, but it is the folder being linted
    write(project, LOOP, "train.py")
    assert shown(project, project, root=project, force_exclude=True) == ["train.py"]


def test_a_link_out_of_the_folder_is_not_followed_unless_named(tmp_path):
    write(tmp_path, LOOP, "outside/b.py")
    write(tmp_path, LOOP, "proj/pkg/a.py")
    os.symlink(tmp_path / "proj", tmp_path / "proj" / "pkg" / "up")  # `up -> ..`
    os.symlink(tmp_path / "outside", tmp_path / "proj" / "vendored")
    os.symlink(tmp_path / "outside" / "b.py", tmp_path / "proj" / "pkg" / "linked.py")
    found = discover([tmp_path / "proj" / "pkg"], cwd=tmp_path)
    assert [s for _, s in found.files] == ["proj/pkg/a.py"]
    assert sorted(n.split(":")[0] for n in found.notes) == ["proj/pkg/linked.py", "proj/pkg/up"]
    assert all("outside proj/pkg" in n for n in found.notes)
    assert shown(tmp_path, tmp_path / "proj" / "vendored") == ["proj/vendored/b.py"]  # named: followed


def test_symlink_loops_in_a_folder_are_notes_and_a_named_one_is_a_problem(tmp_path):
    write(tmp_path, LOOP, "train.py")
    os.symlink(tmp_path / "self", tmp_path / "self")
    os.symlink(tmp_path / "b.py", tmp_path / "a.py")
    os.symlink(tmp_path / "a.py", tmp_path / "b.py")
    found = discover([tmp_path], cwd=tmp_path)
    assert [s for _, s in found.files] == ["train.py"]
    assert sorted(found.notes) == [f"{name}: skipped, a symbolic link loop" for name in ("a.py", "b.py", "self")]
    named = discover([tmp_path / "self", tmp_path / "a.py"], cwd=tmp_path)
    assert [(p.display, p.message.split(" (")[0]) for p in named.problems] == [
        ("self", "symbolic link loop"), ("a.py", "symbolic link loop")]
