"""Output formats, exit codes and command-line behaviour of `torchdoctor lint`."""

import json

from helpers.lint_files import write

from torchdoctor.cli import main
from torchdoctor.rules.registry import detected_codes, rule_by_code

DETECTED_CODES = detected_codes("lint")

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


def test_sarif_fingerprints_tell_apart_results_of_one_function_and_survive_moves(tmp_path, capsys):
    body = ("import torch\ndef train(model, loader, opt):\n    for x in loader:\n        loss = model(x)\n"
            "        loss.backward()\n        opt.step()\n        a = loss.item()\n        b = loss.item()\n"
            "        a = loss.item()\n")
    path = write(tmp_path, body)

    def prints():
        sarif = json.loads(run(capsys, "--format", "sarif", str(path))[1])
        return [r["partialFingerprints"]["torchdoctor/v2"] for r in sarif["runs"][0]["results"]]
    first = prints()
    assert len(first) == 3 and len(set(first)) == 3  # same code, file and function: still three results
    path.write_text(body.replace("import torch\n", "import torch\n\n# moved down\n"))
    assert prints() == first


def test_sarif_source_root_is_an_absolute_file_uri(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, TRAIN)
    sarif = json.loads(run(capsys, "--format", "sarif", "train.py")[1])
    root = sarif["runs"][0]["originalUriBaseIds"]["%SRCROOT%"]["uri"]
    assert root == tmp_path.resolve().as_uri() + "/"


def test_sarif_notebook_regions_are_lines_of_the_ipynb_file(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cells = [{"cell_type": "markdown", "metadata": {}, "source": ["# notes\n"]},
             {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
              "source": ["import torch\n", "for x in loader:\n", "    loss = model(x)\n", "    loss.backward()\n",
                         "    opt.step()\n", "    print(loss.item())\n"]}]
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}, indent=1))
    result = json.loads(run(capsys, "--format", "sarif", "nb.ipynb")[1])["runs"][0]["results"][0]
    region = result["locations"][0]["physicalLocation"]["region"]
    file_lines = path.read_text().splitlines()
    assert "print(loss.item())" in file_lines[region["startLine"] - 1] and "startColumn" not in region
    assert (result["properties"]["notebookCell"], result["properties"]["cellLine"]) == (2, 6)
    assert "notebook cell 2, line 6" in result["message"]["text"]


def test_force_exclude_skips_excluded_paths_named_on_the_command_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, '[tool.torchdoctor.lint]\nexclude = ["legacy/"]\n', "pyproject.toml")
    write(tmp_path, TRAIN, "legacy/old.py")
    write(tmp_path, TRAIN, ".venv/lib/site.py")
    write(tmp_path, TRAIN, "src/train.py")
    assert run(capsys, "legacy/old.py")[0] == 1  # named explicitly: linted, as before
    code = main(["lint", "--force-exclude", "legacy/old.py", ".venv/lib/site.py", "src/train.py"])
    out = capsys.readouterr().out
    assert code == 1 and {line.split(":")[0] for line in out.splitlines()} == {"src/train.py"}
    assert main(["lint", "--force-exclude", "legacy/old.py"]) == 0
    import io
    monkeypatch.setattr("sys.stdin", io.StringIO(TRAIN))
    assert main(["lint", "--force-exclude", "--stdin-filename", "legacy/old.py", "-"]) == 0
    assert capsys.readouterr().out == ""


def test_the_pre_commit_hook_forces_excludes():
    from pathlib import Path
    hooks = (Path(__file__).parents[3] / ".pre-commit-hooks.yaml").read_text()
    assert "entry: torchdoctor lint --force-exclude" in hooks


def test_stdin_per_file_ignores_are_relative_to_the_config_folder(tmp_path, capsys, monkeypatch):
    import io
    write(tmp_path / "proj", '[tool.torchdoctor.lint]\nper-file-ignores = { "tests/*" = ["TD201"] }\n',
          "pyproject.toml")
    monkeypatch.chdir(tmp_path)  # not the config's folder
    monkeypatch.setattr("sys.stdin", io.StringIO(TRAIN))
    code = main(["lint", "--stdin-filename", "proj/tests/test_x.py", "-"])
    out = capsys.readouterr().out
    assert "TD104" in out and "TD201" not in out and code == 1


def test_the_summary_names_the_severities_it_hides(tmp_path, capsys):
    path = write(tmp_path, TRAIN)
    _, _, err = run(capsys, "--min-severity", "high", str(path))
    assert "2 below --min-severity hidden (2 medium)" in err and "info" not in err
    info = write(tmp_path, "import torch\nfrom torch.utils.data import DataLoader\n"
                           "def make():\n    return DataLoader(Images(), batch_size=8)\n", "info.py")
    _, _, err = run(capsys, "--min-severity", "high", str(path), str(info))
    assert "3 below --min-severity hidden (2 medium, 1 info: the value is only known at run time)" in err


def test_empty_select_and_zero_jobs_are_usage_errors(tmp_path, capsys):
    path = str(write(tmp_path, TRAIN))
    for argv, words in ((["--select", "", path], "--select names no codes"), (["-j", "0", path], "--jobs"),
                        (["--jobs", "-2", path], "--jobs")):
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and words in err, argv
