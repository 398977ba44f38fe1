"""The doctor's global module hooks are told apart from the script's: torch's
`_has_any_global_hook()` (asked by `OptimizedModule.__call__` before it warns) counts the script's
only, and compiled code runs with the doctor's taken out."""

import torch
from torch.nn.modules import module as nn_module

from torchdoctor.run.probes.global_hooks import pause_own_module_hooks, quiet_global_hook_check
from torchdoctor.run.probes.patching import PatchSet


def ours(module, args):
    return None


ours.__module__ = "torchdoctor.run.probes.memory"  # as a probe's hook is


def test_only_the_scripts_global_hooks_count_and_ours_pause_around_compiled_code():
    patches = PatchSet()
    quiet_global_hook_check(patches)
    own = [nn_module.register_module_forward_pre_hook(ours), nn_module.register_module_forward_hook(
        lambda m, a, o: None, always_call=True)]
    own[1].hooks_dict_ref()[own[1].id].__module__ = "torchdoctor.run.probes.memory"  # a lambda of ours
    try:
        assert not nn_module._has_any_global_hook()  # ours alone: Dynamo has nothing to warn about
        restore = pause_own_module_hooks()
        assert restore is not None and not nn_module._global_forward_pre_hooks
        assert not nn_module._global_forward_hooks and not nn_module._global_forward_hooks_always_called
        restore()
        assert len(nn_module._global_forward_pre_hooks) == 1 and len(nn_module._global_forward_hooks_always_called) == 1
        script = nn_module.register_module_forward_pre_hook(lambda module, args: None)
        try:
            assert nn_module._has_any_global_hook()  # the script's own: still warned as without the doctor
            restore = pause_own_module_hooks()
            assert len(nn_module._global_forward_pre_hooks) == 1  # the script's stays in
            restore()
        finally:
            script.remove()
    finally:
        for handle in own:
            handle.remove()
        patches.restore()
    assert nn_module._has_any_global_hook is getattr(torch.nn.modules.module, "_has_any_global_hook")
    assert not getattr(nn_module._has_any_global_hook, "__torchdoctor_patch__", False)
