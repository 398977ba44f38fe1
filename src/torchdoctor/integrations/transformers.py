"""torchdoctor in a Hugging Face `transformers.Trainer`, without changing the command line:

    from torchdoctor.integrations.transformers import DoctorCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[DoctorCallback(steps=30)])
    trainer.train()

From `on_train_begin` the same probes as `torchdoctor run` measure `warmup` optimizer steps
unrecorded, then up to `steps`. A step is one optimizer step: with gradient accumulation its
micro-steps (`on_substep_end`, then `on_step_end`) are counted in it, each one `backward()`.
At the limit (`on_step_end`) the probes come out, the run directory is written, the top
findings are printed, and `control.should_training_stop` ends the training (`stop=True`) or
it goes on unmeasured (`stop=False`). Under torch.distributed every rank measures and they stop
at the same step; the world's process zero writes.

transformers is imported when this module is (this file's name is the package's: the import
below is absolute, so it finds the package).
"""

from __future__ import annotations

import os
from typing import Any

from torchdoctor.model.limits import DEFAULT_MAX_SECONDS, DEFAULT_STEPS, DEFAULT_WARMUP
from torchdoctor.integrations.common import CallbackResults, FrameworkRun
from torchdoctor.run.inprocess import MeasureSpec

try:
    from transformers import TrainerCallback
except ImportError:
    raise ImportError("torchdoctor.integrations.transformers needs transformers: pip install transformers") from None

__all__ = ["DoctorCallback"]


class DoctorCallback(CallbackResults, TrainerCallback):
    """Measure the first `warmup + steps` optimizer steps of `trainer.train()`. The report is
    `self.report` (on process zero), the run directory `self.run_dir`; `out`, `max_seconds`,
    `trace` and `knobs` as in `torchdoctor.watch()`."""

    def __init__(self, steps: int = DEFAULT_STEPS, warmup: int = DEFAULT_WARMUP, out: str | os.PathLike[str] | None = None, *,
                 max_seconds: float = DEFAULT_MAX_SECONDS, stop: bool = True, trace: bool | None = None,
                 knobs: tuple[str, ...] = (), follow: bool = False) -> None:
        self.spec = MeasureSpec.of(None if follow and steps == DEFAULT_STEPS else steps, warmup, out,
                                   None if follow and max_seconds == DEFAULT_MAX_SECONDS else max_seconds, trace,
                                   knobs, follow=follow)
        self.stop = stop

    # ---- the Trainer's events ----------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._measured is not None:
            # transformers has no event for a train() that raised: a run left open by one ends
            # here, so the probes never stay in; a later train() runs unmeasured
            self._measured.end("crashed")
            return
        self._measured = FrameworkRun(self.spec, "transformers", rank=args.process_index, world_size=args.world_size)
        self._measured.start(optimizers=1 if kwargs.get("optimizer") is not None else 0)

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._measured is not None and self._measured.measuring:
            self._measured.micro_steps += 1  # a micro-step of gradient accumulation, before the step's last

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        train = self._measured
        if train is None or not train.measuring:
            return
        train.micro_steps += 1  # the step's last micro-step, then its optimizer step
        if not train.should_stop():
            return
        train.end()
        if self.stop:
            control.should_training_stop = True
        train.print_summary()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        train = self._measured
        if train is not None and train.measuring:  # training ended before the limit
            train.end()
            train.print_summary()
