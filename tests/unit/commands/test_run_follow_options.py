"""`torchdoctor run --follow`'s options: a bad one is one line naming the problem and the fix,
exit 2, before anything runs."""

import pytest

from torchdoctor.cli import main


@pytest.mark.parametrize("argv, says", [
    (["--tensorboard", "tb"], "--tensorboard sends a followed run's figures; add --follow"),
    (["--prometheus-port", "9108"], "--prometheus-port sends a followed run's figures; add --follow"),
    (["--follow", "--prometheus-port", "70000"], "--prometheus-port must be a port number from 1 to 65535"),
    (["--follow", "--timeline-every", "0"], "--timeline-every must be a positive number of seconds"),
    (["--follow", "--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "localhost:29500"],
     "--follow follows the ranks of one machine for now"),
])
def test_bad_follow_options_are_one_line_and_exit_2(tmp_path, capsys, argv, says):
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('must not run')\n")
    assert main(["run", *argv, "--out", str(tmp_path / "run"), str(script)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and says in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_a_missing_exporter_library_is_one_line(tmp_path, capsys, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_prometheus(name, *args, **kwargs):
        if name == "prometheus_client":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_prometheus)
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('must not run')\n")
    assert main(["run", "--follow", "--prometheus-textfile", str(tmp_path / "m.prom"), "--out", str(tmp_path / "run"),
                 str(script)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "pip install 'torchdoctor[prometheus]'" in err
    assert not (tmp_path / "run").exists()


def test_a_damaged_live_record_is_one_line_and_exit_2(tmp_path, capsys):
    """A live directory is a file users pass around too: live.json is read bounded, as record.json."""
    (tmp_path / "live.json").write_text('{"schema_version": 9, "run": {"script": "x"}, "steps": [{"index": -1}]}')
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "live.json" in err and "Traceback" not in err


def test_a_live_record_that_is_not_a_regular_file_is_refused(tmp_path, capsys):
    import os

    os.mkfifo(tmp_path / "live.json")
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "live.json" in err
