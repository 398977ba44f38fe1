"""`# noqa`, --select/--ignore and per-file ignores."""

import pytest
from helpers.lint_files import found

from torchdoctor.errors import UsageError
from torchdoctor.lint.selection import Selection, parse_codes

SCRIPT = """
import torch
for x in loader:
    loss = model(x)
    loss.backward()
    opt.step()
    a = loss.item()  # noqa
    b = loss.item()  # noqa: TD201
    c = loss.item()  # noqa: TD2
    d = loss.item()  # noqa: E501
    e = loss.item()  # noqa:TD203
    torch.cuda.synchronize()  # noqa: TD201, TD204
    opt.zero_grad(
        set_to_none=False,
    )  # noqa: TD303
    f = loss.item()
"""


def test_noqa_silences_all_or_the_listed_codes_and_prefixes(tmp_path):
    assert found(tmp_path, SCRIPT) == [("TD201", 9), ("TD201", 10), ("TD201", 15)]


def test_file_level_noqa(tmp_path):
    assert found(tmp_path, "# torchdoctor: noqa\n" + SCRIPT) == []
    assert found(tmp_path, "# torchdoctor: noqa: TD201\n" + SCRIPT) == []
    assert found(tmp_path, "# torchdoctor: noqa: TD3\n" + SCRIPT) == [("TD201", 11), ("TD201", 12), ("TD201", 17)]


def test_select_and_ignore_prefer_the_more_specific_selector():
    selection = Selection(select=["TD2"], ignore=["TD203"])
    assert selection.wants("TD201") and not selection.wants("TD203") and not selection.wants("TD105")
    assert Selection(select=["TD201"], ignore=["TD2"]).wants("TD201")
    assert not Selection(select=None, ignore=[""]).wants("TD201")  # --ignore ALL


def test_per_file_ignores_match_globs_and_folders():
    selection = Selection(per_file=[("tests/*", ["TD201"]), ("scripts/", ["TD2"])])
    assert not selection.wants("TD201", "tests/test_train.py") and selection.wants("TD204", "tests/x.py")
    assert not selection.wants("TD204", "scripts/run/train.py") and selection.wants("TD201", "src/train.py")


def test_selectors_are_validated_against_the_catalogue():
    assert parse_codes(["td2,TD301", "ALL"], "--select") == ["TD2", "TD301", ""]
    with pytest.raises(UsageError, match="TD999"):
        parse_codes(["TD999"], "--select")
    with pytest.raises(UsageError, match="E501"):
        parse_codes("E501", "--ignore")


def test_cli_selection_is_applied_to_findings(tmp_path):
    assert found(tmp_path, SCRIPT, select=["TD204"]) == []
    assert found(tmp_path, SCRIPT, ignore=["TD201"]) == []


def test_only_real_comments_silence_and_any_space_may_follow_the_colon(tmp_path):
    script = """
for x in loader:
    loss = model(x)
    loss.backward()
    opt.step()
    s = "# noqa"; a = loss.item()
    t = '''
# torchdoctor: noqa
'''
    b = loss.item()  # noqa:  E501
    c = loss.item()  # noqa:\tTD201
"""
    # a string holding "# noqa" is not a comment; `# noqa:  E501` is E501's, not a bare noqa
    assert found(tmp_path, script) == [("TD201", 5), ("TD201", 9)]


def test_two_hits_of_one_code_on_one_line_report_the_more_severe(tmp_path):
    from helpers.lint_files import severities

    assert severities(tmp_path, """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        def build(net, unused=False):
            return DDP(net, find_unused_parameters=unused, bucket_cap_mb=1.5)
        build(net, unused=True)
    """) == {("TD603", 4): "low"}
