import ast
import textwrap

from torchdoctor.lint.facts import Facts
from torchdoctor.lint.values import POSITIVE, WHEN_CUDA, Unknown, bind


def value_of(source: str, expr: str, function: str | None = None):
    """Evaluate `expr` as if written at the end of `function` (or the module)."""
    facts = Facts(ast.parse(textwrap.dedent(source)), source)
    scope = next(s for s in facts.model.scopes if s.name == (function or "<module>"))
    return facts.values.evaluate(ast.parse(expr, mode="eval").body, scope)


def test_literals_and_constants_assigned_once():
    src = "WORKERS = 4\nHALF = WORKERS // 2\nNAME = 'cpu'\n"
    assert value_of(src, "WORKERS") == 4
    assert value_of(src, "HALF + 1") == 3
    assert value_of(src, "NAME") == "cpu"
    assert value_of(src, "-WORKERS") == -4


def test_names_assigned_twice_or_parameters_are_unknown():
    src = "n = 1\nn = 2\ndef f(k=3):\n    m = k\n"
    assert isinstance(value_of(src, "n"), Unknown)
    assert isinstance(value_of(src, "m", "f"), Unknown)
    assert isinstance(value_of(src, "nowhere"), Unknown)


def test_function_constants_shadow_module_ones_and_self_attributes_resolve():
    src = """
    W = 0
    def f():
        W = 8
    class T:
        def __init__(self):
            self.workers = 2
        def build(self):
            pass
    """
    assert value_of(src, "W", "f") == 8
    assert value_of(src, "W") == 0
    assert value_of(src, "self.workers", "build") == 2


def test_cpu_count_is_positive_and_cuda_tests_are_when_cuda():
    src = "import os\nimport torch\ndevice = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
    assert value_of(src, "os.cpu_count()") is POSITIVE
    assert value_of(src, "min(8, os.cpu_count())") is POSITIVE
    assert isinstance(value_of(src, "os.cpu_count() // 2"), Unknown)  # could be 0
    assert value_of(src, "device == 'cuda'") is WHEN_CUDA
    assert value_of(src, "torch.cuda.is_available()") is WHEN_CUDA
    assert value_of(src, "True if torch.cuda.is_available() else False") is WHEN_CUDA


def test_argparse_options_say_where_the_value_comes_from():
    src = """
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--pin", action="store_true")
    args = p.parse_args()
    """
    workers = value_of(src, "args.num_workers")
    assert isinstance(workers, Unknown) and "`--num-workers`, default 0" in workers.why
    assert "default False" in value_of(src, "args.pin").why


def test_bind_matches_positional_and_keyword_arguments():
    call = ast.parse("DataLoader(ds, 64, True, None, None, 4, pin_memory=False)", mode="eval").body
    bound = bind(call, ("dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "num_workers"))
    assert ast.unparse(bound.get("num_workers")) == "4" and ast.unparse(bound.get("pin_memory")) == "False"
    assert bound.get("persistent_workers") is None and not bound.splat
    assert bind(ast.parse("f(*a, **kw)", mode="eval").body, ("x",)).splat
