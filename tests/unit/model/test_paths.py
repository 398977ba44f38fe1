"""One path rule (model/paths.py): as the user types it, and absolute for a recorded one."""

import os

from torchdoctor.model.paths import recorded_path, typed_path


def test_a_path_as_the_user_types_it(tmp_path):
    cwd = str(tmp_path / "proj")
    assert typed_path(os.path.join(cwd, "src", "train.py"), cwd) == os.path.join("src", "train.py")
    assert typed_path("src/../train.py", cwd) == "train.py"
    outside = str(tmp_path / "proj2" / "x.py")  # shares a prefix with cwd, and is outside it
    assert typed_path(outside, cwd) == outside
    assert typed_path("../lib/y.py", cwd) == str(tmp_path / "lib" / "y.py")


def test_the_absolute_path_of_a_recorded_one(tmp_path):
    cwd = str(tmp_path)
    assert recorded_path("a/b.py", cwd) == str(tmp_path / "a" / "b.py")
    assert recorded_path(str(tmp_path / "c.py"), "/elsewhere") == str(tmp_path / "c.py")
    assert recorded_path(typed_path(str(tmp_path / "d" / "e.py"), cwd), cwd) == str(tmp_path / "d" / "e.py")
