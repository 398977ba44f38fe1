"""The memory cgroup's OOM-kill count, read from a cgroup tree laid out by hand."""

from torchdoctor.machine.oom import killed_words, oom_kills


def test_oom_kills_are_read_from_cgroup_v2_or_v1(tmp_path):
    assert oom_kills(tmp_path) is None  # neither file: not known, never guessed
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    assert oom_kills(tmp_path) == 3
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\n")
    assert oom_kills(tmp_path) == 1


def test_a_sigkill_is_worded_by_what_the_cgroup_counted():
    assert "ended 2 process(es) of this memory cgroup" in killed_words(9, 2)
    assert "counted no OOM kill" in killed_words(9, 0)
    assert "most often the kernel's out-of-memory killer" in killed_words(9, None)
    assert killed_words(15, None) == "killed by signal 15"
