"""Output formats, exit codes and command-line behaviour of `torchdoctor lint`."""

import json

from lint_helpers import write

from torchdoctor.cli import main
from torchdoctor.lint.registry import DETECTED_CODES
from torchdoctor.rules.registry import rule_by_code

TRAIN = """import torch
from torch.utils.data import DataLoader
loader = DataLoader(ds, batch_size=8, num_workers=2, pin_memory=True, persistent_workers=True)
for x, y in loader:
    loss = model(x.to("cuda"))
    loss.backward()
    opt.step()
    print(loss.item())
"""
FINDING_KEYS = {"code", "slug", "severity", "title", "message", "location", "evidence", "fix",
                "estimated_speedup", "estimate_basis"}


def run(capsys, *argv):
    code = main(["lint", "--isolated", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_text_is_one_sorted_line_per_finding_in_the_house_format(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, TRAIN, "b.py")
    write(tmp_path, "import torch\nimport os\nos.environ['CUDA_LAUNCH_BLOCKING'] = '1'\n" + TRAIN, "a.py")
    code, out, err = run(capsys, ".")
    assert code == 1
    assert out.splitlines() == [
        "a.py:3:1: TD204 explicit-sync: CUDA_LAUNCH_BLOCKING=1 makes every kernel launch wait until the "
        "kernel finishes: the host and GPU never overlap. It is a debugging switch; remove it",
        "a.py:8:18: TD104 blocking-transfer: " + out.splitlines()[1].split("blocking-transfer: ")[1],
        "a.py:11:11: TD201 host-sync: " + out.splitlines()[2].split("host-sync: ")[1],
        "b.py:5:18: TD104 blocking-transfer: " + out.splitlines()[3].split("blocking-transfer: ")[1],
        "b.py:8:11: TD201 host-sync: " + out.splitlines()[4].split("host-sync: ")[1],
    ]
    assert "5 finding(s) in 2 file(s)" in err and "2 fixable with --fix" in err


def test_json_is_a_list_of_design_findings_plus_the_column(tmp_path, capsys):
    path = write(tmp_path, TRAIN)
    code, out, _ = run(capsys, "--format", "json", str(path))
    findings = json.loads(out)
    assert code == 1 and [f["code"] for f in findings] == ["TD104", "TD201"]
    for f in findings:
        assert FINDING_KEYS <= set(f) and f["estimated_speedup"] is None
        assert f["location"]["line"] > 0 and f["column"] > 0 and f["fix"] == rule_by_code(f["code"]).fix
    assert findings[0]["fixable"] is True and findings[1]["fixable"] is False


def test_sarif_carries_rule_metadata_help_and_consistent_indices(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, TRAIN)
    write(tmp_path, "def broken(:\n", "broken.py")
    code, out, _ = run(capsys, "--format", "sarif", ".")
    sarif = json.loads(out)
    assert sarif["version"] == "2.1.0" and sarif["$schema"].endswith("sarif-2.1.0.json")
    run_ = sarif["runs"][0]
    rules = run_["tool"]["driver"]["rules"]
    assert {r["id"] for r in rules} >= DETECTED_CODES
    for rule in rules:
        meta = rule_by_code(rule["id"])
        assert rule["shortDescription"]["text"] == meta.title and meta.fix in rule["help"]["text"]
        assert rule["helpUri"].endswith(f"#{rule['id'].lower()}-{meta.slug}")
    results = run_["results"]
    assert [r["ruleId"] for r in results] == ["TD104", "TD201"]
    for result in results:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"] and result["level"] == "warning"
        location = result["locations"][0]["physicalLocation"]
        assert location["artifactLocation"] == {"uri": path.name, "uriBaseId": "%SRCROOT%"}
        assert location["region"]["startColumn"] > 0
    notes = run_["invocations"][0]["toolExecutionNotifications"]
    assert "cannot parse" in notes[0]["message"]["text"]


def test_sarif_locations_outside_the_working_directory_are_file_uris(tmp_path, capsys):
    path = write(tmp_path, TRAIN)
    _, out, _ = run(capsys, "--format", "sarif", str(path))
    location = json.loads(out)["runs"][0]["results"][0]["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": path.as_uri()}


def test_exit_codes(tmp_path, capsys):
    clean = write(tmp_path, "import torch\nx = torch.ones(3)\n", "clean.py")
    broken = write(tmp_path, "def broken(:\n", "broken.py")
    assert run(capsys, str(clean))[0] == 0
    code, _, err = run(capsys, str(broken))
    assert code == 2 and "cannot parse" in err and "nothing could be linted" in err
    assert run(capsys, str(broken), str(clean))[0] == 0  # one file read: judged on its findings
    assert run(capsys, str(tmp_path / "missing.py"))[0] == 2
    assert run(capsys, str(write(tmp_path, TRAIN)), "--exit-zero")[0] == 0


def test_usage_errors_are_one_line_and_exit_2(tmp_path, capsys):
    for argv in ([], ["--select", "TD999", "x.py"], ["--format", "xml", "x.py"], ["--fix", "--diff", "x.py"]):
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, argv


def test_info_findings_are_hidden_unless_asked_for(tmp_path, capsys):
    path = write(tmp_path, "import torch\nfrom torch.utils.data import DataLoader\n"
                           "def make():\n    return DataLoader(Images(), batch_size=8)\n")
    code, out, err = run(capsys, str(path))
    assert code == 0 and out == "" and "1 below --min-severity hidden" in err
    code, out, _ = run(capsys, "--min-severity", "info", str(path))
    assert code == 1 and "TD105" in out


def test_output_file_receives_the_report(tmp_path, capsys):
    target = tmp_path / "report.sarif"
    code, out, _ = run(capsys, "--format", "sarif", "--output", str(target), str(write(tmp_path, TRAIN)))
    assert code == 1 and out == "" and json.loads(target.read_text())["runs"][0]["results"]


def test_parallel_workers_give_the_same_findings(tmp_path, capsys):
    for i in range(60):
        write(tmp_path, TRAIN, f"pkg/m{i:02d}.py")
    _, serial, _ = run(capsys, "--jobs", "1", str(tmp_path))
    _, parallel, _ = run(capsys, "--jobs", "2", str(tmp_path))
    assert serial == parallel and serial.count("\n") == 120


def test_stdin_is_linted_under_the_given_name(capsys, monkeypatch):
    import io
    monkeypatch.setattr("sys.stdin", io.StringIO(TRAIN))
    code, out, _ = run(capsys, "-", "--stdin-filename", "src/train.py")
    assert code == 1 and out.startswith("src/train.py:5:18: TD104")
    monkeypatch.setattr("sys.stdin", io.StringIO("def broken(:\n"))
    assert run(capsys, "-")[0] == 2
