"""torchdoctor in a Lightning Trainer, without changing the command line:

    from torchdoctor.integrations.lightning import DoctorCallback
    trainer = L.Trainer(callbacks=[DoctorCallback(steps=30)])
    trainer.fit(model, datamodule)

From `on_fit_start` (the sanity check included, as `torchdoctor run` includes it) the same
probes as `torchdoctor run` measure `warmup` optimizer steps unrecorded, then up to `steps`
(Lightning's automatic optimization steps the optimizer inside a closure: the probes time it
as forward and backward). At the limit the probes come out at the end of that batch, the run
directory is written, the top findings go to the trainer's loggers (metrics, and the findings
as hyperparameter text) and to stderr, and `trainer.should_stop` ends the fit the way early
stopping does. Under DDP every rank measures and they stop at the same batch; rank 0 writes.

Lightning is imported when this module is: `lightning` or, failing that, `pytorch_lightning`.
"""

from __future__ import annotations

import os
import signal
import warnings
from typing import Any

from torchdoctor.model.limits import DEFAULT_MAX_SECONDS, DEFAULT_STEPS, DEFAULT_WARMUP
from torchdoctor.integrations.common import CallbackResults, FrameworkRun, summary_metrics, summary_params
from torchdoctor.run.inprocess import MeasureSpec

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older package name
    try:
        from pytorch_lightning.callbacks import Callback
    except ImportError:
        raise ImportError("torchdoctor.integrations.lightning needs Lightning: pip install lightning") from None

__all__ = ["DoctorCallback"]


class DoctorCallback(CallbackResults, Callback):
    """Measure the first `warmup + steps` optimizer steps of `trainer.fit`, then stop the fit
    (`stop=True`) or let it go on unmeasured (`stop=False`). The report is `self.report` (rank 0),
    the run directory `self.run_dir`; `out`, `max_seconds`, `trace` and `knobs` as in
    `torchdoctor.watch()`."""

    def __init__(self, steps: int = DEFAULT_STEPS, warmup: int = DEFAULT_WARMUP, out: str | os.PathLike[str] | None = None, *,
                 max_seconds: float = DEFAULT_MAX_SECONDS, stop: bool = True, trace: bool | None = None,
                 knobs: tuple[str, ...] = (), follow: bool = False) -> None:
        self.spec = MeasureSpec.of(None if follow and steps == DEFAULT_STEPS else steps, warmup, out,
                                   None if follow and max_seconds == DEFAULT_MAX_SECONDS else max_seconds, trace,
                                   knobs, follow=follow)
        self.stop = stop
        self._alarm_before: Any = None

    # ---- Lightning's hooks -------------------------------------------------------------
    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if self._measured is not None:  # one callback measures one fit: a second fit runs unmeasured
            return
        self._measured = FrameworkRun(self.spec, "lightning", rank=trainer.global_rank, world_size=trainer.world_size)
        self._alarm_before = signal.getsignal(signal.SIGALRM) if hasattr(signal, "SIGALRM") else None
        self._measured.start(optimizers=len(trainer.optimizers))

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        fit = self._measured
        if fit is None or not fit.measuring:
            return
        fit.micro_steps += 1
        if not fit.should_stop():
            return
        report = fit.end()
        self._forget_our_alarm(trainer)
        if self.stop:
            trainer.should_stop = True
        if report is not None:
            self._log(trainer, report)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._end(trainer)  # the fit ended before the limit (max_epochs, max_steps, early stopping)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._end(trainer, exception)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._end(trainer)  # never leave the probes in: on_fit_end does not run after every failure

    def _end(self, trainer: Any, exc: BaseException | None = None) -> None:
        if self._measured is not None and self._measured.measuring:
            report = self._measured.end(exc=exc)
            self._forget_our_alarm(trainer)
            if report is not None:
                self._log(trainer, report)

    def _forget_our_alarm(self, trainer: Any) -> None:
        """Lightning notes every signal handler after `on_fit_start` and puts them back when
        the fit ends: the line sampler's SIGALRM handler among them, though the sampler has
        already taken it out. What was there before the probes goes back instead."""
        saved = getattr(getattr(trainer, "_signal_connector", None), "_original_handlers", None)
        if isinstance(saved, dict) and hasattr(signal, "SIGALRM") and signal.SIGALRM in saved:
            saved[signal.SIGALRM] = self._alarm_before

    def _log(self, trainer: Any, report) -> None:
        fit = self._measured
        for logger in getattr(trainer, "loggers", None) or []:
            try:
                logger.log_metrics(summary_metrics(report), step=trainer.global_step)
                logger.log_hyperparams(summary_params(report, fit.run.run_dir))
            except Exception as exc:  # a logger that refuses text must not end the training
                warnings.warn(f"torchdoctor: could not log the findings to {type(logger).__name__}: "
                              f"{type(exc).__name__}: {exc}", stacklevel=1)
        fit.print_summary()
