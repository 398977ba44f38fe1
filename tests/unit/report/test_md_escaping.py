"""The three Markdown escapes: cell (plain text), code (literal span), prose (rule text)."""

from torchdoctor.report.mdtext import cell, code, heading, prose


def test_cell_escapes_table_and_inline_syntax():
    assert cell("a|b") == "a\\|b"
    assert cell("x\ny\r\nz") == "x y z"
    assert cell("*bold* `code` [link](u) <b> &amp; ~~s~~") == (
        "\\*bold\\* \\`code\\` \\[link\\](u) \\<b\\> \\&amp; \\~\\~s\\~\\~")
    assert cell("C:\\data\\") == "C:\\\\data\\\\"  # a trailing backslash cannot eat the next pipe


def test_cell_escapes_underscores_only_where_they_could_make_emphasis():
    assert cell("my_train_loop.py") == "my_train_loop.py"
    assert cell("__init__.py") == "\\_\\_init\\_\\_.py"
    assert cell("_private") == "\\_private"


def test_cell_shows_control_characters_instead_of_sending_them():
    assert cell("a\x1b[31mb") == "a\\\\x1b\\[31mb"


def test_code_span_survives_backticks_and_pipes():
    assert code("train.py:7") == "`train.py:7`"
    assert code("a|b") == "`a\\|b`"
    assert code("a|b", in_table=False) == "`a|b`"
    assert code("x = `y`") == "`` x = `y` ``"  # fence longer than any run inside, padded
    assert code("``") == "``` `` ```"
    assert code("") == ""


def test_prose_keeps_rule_markdown_and_disarms_html():
    text = "Use `x.to(d, non_blocking=True)` <b>now</b>; see `List<int>`."
    assert prose(text) == "Use `x.to(d, non_blocking=True)` &lt;b>now&lt;/b>; see `List<int>`."


def test_prose_leaves_fenced_blocks_alone_and_closes_an_open_one():
    fenced = "Before <x>\n```python\nif a < b: pass\n```\nAfter <y>"
    assert prose(fenced) == "Before &lt;x>\n```python\nif a < b: pass\n```\nAfter &lt;y>"
    assert prose("~~~\n<raw>") == "~~~\n<raw>\n~~~"
    # A shorter run of backticks does not close a longer fence.
    assert prose("````\n```\n<x>\n````\n<y>") == "````\n```\n<x>\n````\n&lt;y>"


def test_heading_is_one_line_and_never_opens_a_fence():
    assert heading("```python\n<x>") == "```python &lt;x>"
