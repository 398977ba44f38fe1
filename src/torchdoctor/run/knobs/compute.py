"""Compute knobs: TF32, cuDNN autotuning, non-blocking copies, and the model-level changes
(autocast, torch.compile, channels_last) applied to the model the optimizer trains."""

from __future__ import annotations

import functools
import shutil
import weakref

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from torchdoctor.run.knobs.base import KnobGroup
from torchdoctor.run.knobs.model import TrainedModelFinder
from torchdoctor.run.probes.frames import own_caller_location

_NEEDS_CUDA = "no CUDA device: {} only changes GPU kernels"


class ComputeKnobs(KnobGroup):
    names = ("tf32", "cudnn_benchmark", "non_blocking", "amp", "compile", "channels_last", "threads")
    layer = "inner"

    def __init__(self, settings, ctx) -> None:
        super().__init__(settings, ctx)
        self.finder: TrainedModelFinder | None = None
        self._compiled_by_knob: "weakref.ref[torch.nn.Module] | None" = None
        self._knob_compiling = False
        self._unfound_note: str | None = None  # the script compiled before the model was found
        self._autocast_stack: list = []
        self._threads_before: int | None = None

    def install(self) -> None:
        cuda = self.ctx.cuda_available()
        for name in ("tf32", "cudnn_benchmark", "non_blocking"):
            if name in self.settings and not cuda:
                self.refuse(name, _NEEDS_CUDA.format(name))
        if cuda and ("tf32" in self.settings or "cudnn_benchmark" in self.settings):
            self._apply_backend_flags()
            # Scripts often set these flags themselves after startup; re-assert ours each step.
            self.handles.append(register_optimizer_step_post_hook(lambda *a: self._apply_backend_flags()))
        if "threads" in self.settings:
            self._threads_before = torch.get_num_threads()
            self._apply_threads()
            self.handles.append(register_optimizer_step_post_hook(lambda *a: self._apply_threads()))
        if cuda and self.settings.get("non_blocking"):
            self.patches.wrap(torch.Tensor, "to", self._wrap_copy)
            self.patches.wrap(torch.Tensor, "cuda", self._wrap_copy)
        if self._wants_model():
            self.finder = TrainedModelFinder(self._on_model)
            self.finder.install()
        if self.settings.get("compile"):
            # the script's own compiles, seen whenever they come: before the model is found (then the
            # knob has nothing to add) or after the knob compiled it (then the knob's is taken back)
            self.patches.wrap(torch, "compile", self._wrap_script_compile)
            self.patches.wrap(torch.nn.Module, "compile", self._wrap_script_module_compile)

    def uninstall(self) -> None:
        if self.finder is not None:
            self.finder.uninstall()
        while self._autocast_stack:  # a forward that raised past our exit hook
            self._autocast_stack.pop().__exit__(None, None, None)
        if self._threads_before is not None:  # the run is over; leave the process as it was
            torch.set_num_threads(self._threads_before)
        super().uninstall()

    def outcomes(self):
        if self._unfound_note is not None and self.finder is not None and self.finder.model is None:
            self.refuse("compile", self._unfound_note)  # the model never showed outside compiled code
        return super().outcomes()

    def _wants_model(self) -> bool:
        return (self.settings.get("amp", "off") != "off" or bool(self.settings.get("compile"))
                or bool(self.settings.get("channels_last")))

    # ---- backend flags and copies -------------------------------------------------
    def _apply_backend_flags(self) -> None:
        if "tf32" in self.settings:
            on = self.settings["tf32"]
            torch.backends.cuda.matmul.allow_tf32 = on
            torch.backends.cudnn.allow_tf32 = on
            torch.set_float32_matmul_precision("high" if on else "highest")
            self.applied("tf32", f"matmul and cuDNN TF32 {'on' if on else 'off'}")
        if "cudnn_benchmark" in self.settings:
            torch.backends.cudnn.benchmark = self.settings["cudnn_benchmark"]
            self.applied("cudnn_benchmark", f"cudnn.benchmark={self.settings['cudnn_benchmark']}")

    def _apply_threads(self) -> None:
        wanted = self.settings["threads"]
        if torch.get_num_threads() != wanted:  # set at start, and again if the script changed it
            before = torch.get_num_threads()
            torch.set_num_threads(wanted)
            self.applied("threads", f"torch threads {before} → {wanted}")

    def _wrap_copy(self, original):
        group = self

        @functools.wraps(original)
        def copy(tensor, *args, **kwargs):
            if not _sets_non_blocking(args, kwargs) and tensor.device.type == "cpu" and _to_cuda(original, args, kwargs):
                kwargs["non_blocking"] = True
                group.applied("non_blocking", "host→device copies made non_blocking")
            return original(tensor, *args, **kwargs)

        return copy

    # ---- the trained model --------------------------------------------------------
    def _on_model(self, model: torch.nn.Module) -> None:
        name = type(model).__name__
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
        if self.settings.get("channels_last"):
            if any(isinstance(m, (torch.nn.Conv2d, torch.nn.BatchNorm2d)) for m in model.modules()):
                model.to(memory_format=torch.channels_last)
                self.applied("channels_last", f"{name} converted to channels_last")
            else:
                self.refuse("channels_last", f"{name} has no 2-D convolutions: channels_last does not apply")
        amp = self.settings.get("amp", "off")
        if amp != "off":
            self._install_autocast(model, name, device, amp)
        if self.settings.get("compile"):
            if _already_compiled(model):
                inner = type(getattr(model, "_orig_mod", model)).__name__
                self.refuse("compile", f"already compiled by the script: {inner} runs under the script's own "
                                       "torch.compile, nothing to add")
            elif device.type == "cpu" and not (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")):
                self.refuse("compile", "not applicable: no C++ compiler found, and torch.compile on CPU needs one")
            else:
                self._knob_compiling = True
                try:
                    model.compile()  # in place: later calls of this module run the compiled graph
                finally:
                    self._knob_compiling = False
                self._compiled_by_knob = weakref.ref(model)
                self.applied("compile", f"{name}.compile() (the first steps pay the compile time)")

    # ---- the script's own compiles ------------------------------------------------------
    def _wrap_script_compile(self, original):
        group = self

        @functools.wraps(original)
        def compile(*args, **kwargs):
            target = args[0] if args else kwargs.get("model")
            if not group._knob_compiling and target is not None:
                group._script_compiles(target)
            return original(*args, **kwargs)

        return compile

    def _wrap_script_module_compile(self, original):
        group = self

        @functools.wraps(original)
        def compile(module, *args, **kwargs):
            if not group._knob_compiling:
                group._script_compiles(module)
            return original(module, *args, **kwargs)

        return compile

    def _script_compiles(self, target) -> None:
        """The script compiles `target` itself: if that is (or holds) the model the knob compiled,
        the knob's compile is taken back, so the steps run the script's compile alone. Before the
        model is found, the script's compile is the answer should the model never be found (it is
        then called only inside the script's compiled code, where the doctor's hooks stand aside)."""
        if self.finder is not None and self.finder.model is None and self._unfound_note is None:
            where = own_caller_location(2)
            name = getattr(target, "__name__", None) or type(getattr(target, "_orig_mod", target)).__name__
            self._unfound_note = (f"already compiled by the script: it compiles {name} itself"
                                  + (f" ({where.path}:{where.line})" if where else "")
                                  + "; the model it trains was called only inside compiled code")
        model = self._compiled_by_knob() if self._compiled_by_knob is not None else None
        if model is None or not _holds(target, model):
            return
        model._compiled_call_impl = None  # what Module.compile() set: the module's own call again
        self._compiled_by_knob = None
        where = own_caller_location(2)
        self.withdraw("compile", f"already compiled by the script: it compiles {type(model).__name__} itself"
                                 + (f" ({where.path}:{where.line})" if where else "")
                                 + " after the knob did; the knob's compile was taken back, the steps ran the "
                                   "script's own")

    def _install_autocast(self, model: torch.nn.Module, name: str, device: torch.device, amp: str) -> None:
        if amp == "fp16" and not _script_has_grad_scaler():
            self.refuse("amp", "fp16 needs a GradScaler in the script to avoid gradient underflow; use amp=bf16")
            return
        dtype = torch.bfloat16 if amp == "bf16" else torch.float16
        stack = self._autocast_stack

        def enter(module, args):
            ctx = torch.autocast(device_type=device.type, dtype=dtype)
            ctx.__enter__()
            stack.append(ctx)

        def leave(module, args, output):
            if stack:
                stack.pop().__exit__(None, None, None)

        self.handles.append(model.register_forward_pre_hook(enter))
        self.handles.append(model.register_forward_hook(leave, always_call=True))
        where = "CPU autocast (no CUDA)" if device.type == "cpu" else "autocast"
        self.applied("amp", f"{where} {amp} around {name}.forward (the loss outside it stays fp32)")


def _sets_non_blocking(args, kwargs) -> bool:
    """The call says non_blocking itself: by keyword, or positionally as the only bool that
    `.to(device, dtype, non_blocking, copy)`, `.to(dtype, non_blocking)` and `.cuda(device,
    non_blocking)` take (Module.to's own copies pass it so; adding the keyword made a second one)."""
    return "non_blocking" in kwargs or any(isinstance(a, bool) for a in args)


def _to_cuda(original, args, kwargs) -> bool:
    """Whether a `.to(...)`/`.cuda(...)` call targets a CUDA device."""
    if original.__name__ == "cuda":
        return True
    target = kwargs.get("device", args[0] if args else None)
    if isinstance(target, (str, torch.device)):
        return torch.device(target).type == "cuda"
    return isinstance(target, torch.Tensor) and target.device.type == "cuda"


def _holds(target, model: torch.nn.Module) -> bool:
    """`target` (what the script compiles) is the model, its wrapper, one of its methods, or a
    module that contains it."""
    if target is model or getattr(target, "_orig_mod", None) is model or getattr(target, "__self__", None) is model:
        return True
    return isinstance(target, torch.nn.Module) and any(m is model for m in target.modules())


def _already_compiled(model: torch.nn.Module) -> bool:
    """The script compiled this model itself: `model.compile()`, a `torch.compile(model)` wrapper,
    or the wrapper itself (the module the optimizer trains, called from the script, is the wrapper)."""
    if getattr(model, "_compiled_call_impl", None) is not None:
        return True
    import sys

    if "torch._dynamo" not in sys.modules:
        return False
    import gc

    from torch._dynamo.eval_frame import OptimizedModule

    if isinstance(model, OptimizedModule):
        return True

    return any(isinstance(o, OptimizedModule) and getattr(o, "_orig_mod", None) is model
               for o in gc.get_objects() if type(o).__name__ == "OptimizedModule")


def _script_has_grad_scaler() -> bool:
    import gc

    return any(isinstance(o, torch.amp.GradScaler) for o in gc.get_objects() if type(o).__name__ == "GradScaler")
