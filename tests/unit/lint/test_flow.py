"""Where a DataLoader goes: through names (each use sees its last binding), `self` attributes,
return values, parameters, constructors, tuples of loaders and imported training helpers."""

import ast
import textwrap

from helpers.lint_files import lines_of

from torchdoctor.lint.facts import Facts

HEAD = "import torch\nfrom torch.utils.data import DataLoader\n"


def uses(source: str) -> list[tuple[int, list[tuple[int, bool]]]]:
    """For each DataLoader (in source order): its line, and (line of each loop or helper call
    using it, whether that use repeats)."""
    source = HEAD + textwrap.dedent(source).lstrip("\n")
    facts = Facts(ast.parse(source), source)
    loaders = sorted(facts.loaders.loaders, key=lambda l: (l.call.lineno, l.call.col_offset))
    return [(l.call.lineno, sorted((u.line, u.repeats) for u in l.uses)) for l in loaders]


def test_a_reused_name_gives_each_loop_its_own_loader():
    assert uses("""
        loader = DataLoader(a, num_workers=2)
        for x in loader:
            pass
        loader = DataLoader(b, num_workers=2)
        for epoch in range(3):
            for x in loader:
                pass
    """) == [(3, [(4, False)]), (6, [(8, True)])]


def test_bindings_in_both_branches_reach_the_loop_after_them():
    assert uses("""
        if fast:
            loader = DataLoader(a)
        else:
            loader = DataLoader(b)
        for x in loader:
            pass
    """) == [(4, [(7, False)]), (6, [(7, False)])]


def test_returned_from_a_factory_stored_on_self_and_iterated_in_another_method():
    assert uses("""
        def make(ds):
            return DataLoader(ds, pin_memory=True)
        class Trainer:
            def __init__(self, ds):
                self.loader = make(ds)
            def epoch(self):
                for x in self.loader:
                    pass
            def fit(self):
                for _ in range(9):
                    self.epoch()
    """) == [(4, [(9, True)])]


def test_handed_to_a_constructor_and_kept_as_an_attribute():
    assert uses("""
        class Runner:
            def __init__(self, model, data):
                self.data = data
            def run(self):
                for batch in self.data:
                    pass
        def main():
            train = DataLoader(ds)
            Runner(model, train).run()
    """) == [(10, [(7, False)])]


def test_a_tuple_of_loaders_is_iterated_once_each_per_pass_of_what_is_around_it():
    assert uses("""
        train, val = DataLoader(a), DataLoader(b)
        for loader in (train, val):
            for x in loader:
                pass
    """) == [(3, [(5, False)]), (3, [(5, False)])]


def test_tuple_returned_by_a_helper_is_taken_apart():
    assert uses("""
        def loaders():
            return DataLoader(a), DataLoader(b)
        train, val = loaders()
        for x in val:
            pass
    """) == [(4, []), (4, [(6, False)])]


def test_next_of_an_iterator_in_a_while_loop_and_an_imported_training_helper():
    assert uses("""
        from .engine import train_one_epoch
        loader = DataLoader(ds, num_workers=4)
        it = iter(loader)
        while True:
            x = next(it)
        other = DataLoader(ds, num_workers=4)
        for epoch in range(10):
            train_one_epoch(model, other, optimizer, epoch)
    """) == [(4, [(6, False)]), (8, [(10, True)])]


def test_a_value_that_flows_back_into_itself_ends():
    assert uses("""
        def wrap(loader):
            return wrap(loader) if deep else loader
        for x in wrap(DataLoader(ds)):
            pass
    """) == [(5, [(5, False)])]


def test_every_binding_is_resolved_once_however_many_loops_use_a_name():
    blocks = "".join(f"loader = DataLoader(ds{i})\nfor x in loader:\n    pass\n" for i in range(300))
    source = HEAD + "def helper(loader):\n    for y in loader:\n        pass\n" + blocks + "helper(loader)\n"
    facts = Facts(ast.parse(source), source)
    flow = facts.loaders
    assert all(len(loader.uses) == 1 for loader in flow.loaders[:-1])  # each loop sees its own loader
    assert len(flow.loaders[-1].uses) == 2  # the last one also reaches the helper
    assert len(flow._memo) < 4 * 300  # one entry per binding, parameter or function: linear in the file


def test_a_loader_handed_to_an_imported_helper_in_an_epoch_loop_restarts_its_workers(tmp_path):
    assert lines_of(tmp_path, """
        import torch
        from torch.utils.data import DataLoader
        from engine import train_one_epoch
        loader = DataLoader(ds, num_workers=8)
        for epoch in range(90):
            train_one_epoch(model, criterion, loader, optimizer, epoch)
            torch.cuda.synchronize()
    """, "TD102") == [4]


def test_methods_called_on_an_instance_and_parameters_read_at_their_call_sites(tmp_path):
    assert lines_of(tmp_path, """
        import torch
        from torch.utils.data import DataLoader
        def build(ds, workers):
            return DataLoader(ds, num_workers=workers)
        class Engine:
            def __init__(self, ds):
                self.loader = build(ds, 4)
            def train_epoch(self):
                for x in self.loader:
                    model(x).backward()
                    opt.step()
        engine = Engine(ds)
        for epoch in range(10):
            engine.train_epoch()
            torch.cuda.synchronize()
    """, "TD102") == [4]


def test_a_method_returning_a_drawn_batch_makes_its_callers_loop_a_use_that_does_not_restart():
    assert uses("""
        class Endless:
            def __init__(self, ds):
                self.loader = DataLoader(ds, num_workers=2)
                self.it = iter(self.loader)
            def draw(self):
                try:
                    batch = next(self.it)
                except StopIteration:
                    self.it = iter(self.loader)
                    batch = next(self.it)
                return batch
        source = Endless(ds)
        for epoch in range(3):
            for step in range(100):
                x = source.draw()
    """) == [(5, [(16, False)])]


def test_a_function_returning_something_other_than_a_batch_makes_no_use():
    assert uses("""
        class Holder:
            def __init__(self, ds):
                self.loader = DataLoader(ds)
                self.it = iter(self.loader)
            def size(self):
                return len(self.loader)
        holder = Holder(ds)
        for step in range(10):
            n = holder.size()
    """) == [(5, [])]


def _forwarded(source: str) -> dict[str, str] | None:
    source = HEAD + textwrap.dedent(source).lstrip("\n")
    loader = Facts(ast.parse(source), source).loaders.loaders[0]
    if loader.forwarded_from is None:
        return None
    return {name: ast.unparse(expr) for name, expr in loader.forwarded.items()}


def test_keywords_passed_through_kwargs_by_the_one_caller_are_the_loaders():
    assert _forwarded("""
        class Wrapped:
            def __init__(self, ds, shuffle=True, **kwargs):
                self.loader = DataLoader(ds, shuffle=shuffle, **kwargs)
        Wrapped(ds, shuffle=False, pin_memory=flag, num_workers=2)
    """) == {"pin_memory": "flag", "num_workers": "2"}


def test_kwargs_are_not_resolved_with_two_callers_a_callers_splat_or_a_changed_kwargs():
    two_callers = """
        def make(ds, **kwargs):
            return DataLoader(ds, **kwargs)
        make(a, pin_memory=True)
        make(b)
    """
    splat = """
        def make(ds, **kwargs):
            return DataLoader(ds, **kwargs)
        make(a, **options)
    """
    changed = """
        def make(ds, **kwargs):
            kwargs.pop("pin_memory", None)
            return DataLoader(ds, **kwargs)
        make(a, pin_memory=True)
    """
    assert [_forwarded(s) for s in (two_callers, splat, changed)] == [None, None, None]
