"""Where a followed run's figures also go (`run --follow --tensorboard DIR`, `--prometheus-port PORT`,
`--prometheus-textfile FILE`), through each ecosystem's own library, installed as an extra:
`pip install 'torchdoctor[tensorboard]'` or `'torchdoctor[prometheus]'`.

The names are stable (README, "Following a whole job"):

TensorBoard scalars (global step: the training step)
    torchdoctor/step_time_ms, torchdoctor/data_wait_ms, torchdoctor/samples_per_s,
    torchdoctor/memory_high_water_bytes; where NVML measured them, torchdoctor/gpu_util_percent,
    torchdoctor/gpu_power_w, torchdoctor/gpu_memory_used_bytes
TensorBoard text (the events): torchdoctor/changes, torchdoctor/stopped, torchdoctor/findings (at the end)

Prometheus (a registry of its own; gauges are the latest flush's median over its clean steps)
    torchdoctor_step                         the last step
    torchdoctor_step_time_seconds            step time
    torchdoctor_data_wait_seconds            time a step waited for its batch
    torchdoctor_samples_per_second           throughput
    torchdoctor_memory_high_water_bytes      memory high-water mark
    torchdoctor_gpu_utilization_percent      the GPU's utilization (NVML), median of the same steps
    torchdoctor_gpu_power_watts              the GPU's power draw (NVML), median of the same steps
    torchdoctor_gpu_memory_used_bytes        memory used on the GPU (NVML, every process's), their maximum
                                             (the three only once NVML measured them: absent, never 0, without)
    torchdoctor_changes_total{kind}          changes found (kind: step-time, data-wait, memory)
    torchdoctor_change_step{kind}            the step the latest change of that kind began at
    torchdoctor_stopped{reason}              1 once the run crashed, was stopped by a signal or stalled (a
                                             followed job's rank also `lost`: gone without writing anything)
    torchdoctor_finding{code,slug,severity,where}   at the end, one per finding: its estimated speedup
                                                     (0 when not estimated)

OpenTelemetry (OTLP over HTTP, `--otlp-endpoint http://collector:4318`; metrics to /v1/metrics, log
records to /v1/logs; resource service.name=torchdoctor)
    gauges torchdoctor.step, torchdoctor.step_time (s), torchdoctor.data_wait (s),
    torchdoctor.samples_per_second, torchdoctor.memory.high_water (By), where NVML measured them
    torchdoctor.gpu.utilization (%), torchdoctor.gpu.power (W), torchdoctor.gpu.memory.used (By);
    counter torchdoctor.changes{kind}
    log records: each change (WARNING), the black box (ERROR), each finding at the end (INFO), with
    the attributes torchdoctor.code, torchdoctor.step, code.filepath, code.lineno,
    torchdoctor.estimated_speedup where they apply

Each exporter is a sink of the follower (run/follow/follower.py): on_points, on_change, on_blackbox,
called from the follower's thread, never from the training loop; on_report and close after the run.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from torchdoctor.errors import UsageError
from torchdoctor.model.follow_record import HEAP_IN_USE, BlackBox, ChangePoint, TimelinePoint, rank_message

# every TensorBoard scalar a point can give (torchdoctor/<name>); collective_wait_ms under --nproc-per-node, the
# GPU's where NVML measured them
TB_SCALARS = ("step_time_ms", "data_wait_ms", "samples_per_s", "memory_high_water_bytes", "collective_wait_ms",
              "gpu_util_percent", "gpu_power_w", "gpu_memory_used_bytes")
PROMETHEUS_GAUGES = {
    "torchdoctor_step": "The last training step the run finished",
    "torchdoctor_step_time_seconds": "Median step time of the steps since the last export",
    "torchdoctor_data_wait_seconds": "Median time a step waited for its batch, since the last export",
    "torchdoctor_samples_per_second": "Median samples per second, since the last export",
    "torchdoctor_memory_high_water_bytes": "Memory high-water mark (CUDA max allocated, else the process's max RSS)",
}
PROMETHEUS_GPU_GAUGES = {  # made at the first figure NVML measured: an unlabelled gauge would read 0 before
    "torchdoctor_gpu_utilization_percent": "The GPU's utilization in percent (NVML), median of the steps since the last export",
    "torchdoctor_gpu_power_watts": "The GPU's power draw in watts (NVML), median of the steps since the last export",
    "torchdoctor_gpu_memory_used_bytes": "Memory used on the GPU (NVML, every process's), the most since the last export",
}
PROMETHEUS_RANK_GAUGES = {  # `--nproc-per-node` only
    "torchdoctor_collective_wait_seconds": "Median time a step waited in collectives (the other ranks), since the last export",
}


def make_exporters(tensorboard: Path | None = None, prometheus_port: int | None = None,
                   prometheus_textfile: Path | None = None, otlp_endpoint: str | None = None,
                   per_rank: bool = False) -> list:
    """The exporters asked for; a one-line UsageError when a library is missing. `per_rank`: a
    multi-rank job's (`--nproc-per-node`), every figure labelled with its rank."""
    sinks: list = []
    if tensorboard is not None:
        sinks.append(TensorBoardExporter(tensorboard))
    if prometheus_port is not None or prometheus_textfile is not None:
        sinks.append(PrometheusExporter(port=prometheus_port, textfile=prometheus_textfile, per_rank=per_rank))
    if otlp_endpoint is not None:
        sinks.append(OtlpExporter(otlp_endpoint))
    return sinks


def finding_where(finding) -> str:
    return str(finding.location) if finding.location is not None else ""


def _point_values(p: TimelinePoint) -> dict[str, float]:
    values = {"step_time_ms": p.step_s * 1000.0, "data_wait_ms": p.data_wait_s * 1000.0}
    if p.comm_wait_s is not None:
        values["collective_wait_ms"] = p.comm_wait_s * 1000.0
    if p.samples and p.step_s > 0:
        values["samples_per_s"] = p.samples / p.step_s
    if p.mem_bytes is not None:
        values["memory_high_water_bytes"] = float(p.mem_bytes)
    for name, value in (("gpu_util_percent", p.gpu_util), ("gpu_power_w", p.gpu_power_w),
                        ("gpu_memory_used_bytes", p.gpu_mem_bytes)):
        if value is not None:  # not measured: no scalar, never a 0
            values[name] = float(value)
    return values


def gpu_figures(points: list[TimelinePoint]) -> dict[str, float]:
    """The GPU's figures of the steps since the last export, as the gauges hold them: utilization and power
    their median, memory used its maximum; only those NVML measured."""
    out: dict[str, float] = {}
    util = [p.gpu_util for p in points if p.gpu_util is not None]
    power = [p.gpu_power_w for p in points if p.gpu_power_w is not None]
    used = [p.gpu_mem_bytes for p in points if p.gpu_mem_bytes is not None]
    if util:
        out["util"] = statistics.median(util)
    if power:
        out["power"] = statistics.median(power)
    if used:
        out["memory"] = float(max(used))
    return out


def change_text(change: ChangePoint) -> str:
    """A change as one line; a rank's own change (a followed job's) starts with its rank."""
    if change.kind != "straggler":  # the straggler's line names its rank itself
        return rank_message(_change_line(change), change.rank)
    return _change_line(change)


def stopped_text(box: BlackBox, rank: int | None = None) -> str:
    """The black box as one line: what happened, where, the rank it is of, what it waited in."""
    where = f" at {box.where}" if box.where else ""
    waits = f"; waits in {box.waiting_in}" if box.waiting_in else ""
    return rank_message(f"{box.message}{where}{waits}", rank if rank is not None else box.rank)


def _change_line(change: ChangePoint) -> str:
    if change.kind == "memory":
        held = "heap in use" if change.memory_measure == HEAP_IN_USE else "high-water"
        return (f"memory creeps from step {change.step}: {held} {change.after.median / 2**20:.0f} MiB, "
                f"{(change.bytes_per_s or 0) / 2**20 * 60:.1f} MiB/min")
    if change.kind == "straggler":
        return (f"rank {change.rank} became the straggler at step {change.step} ({change.t:.1f} s): its own time "
                f"{change.before.median * 1000:+.2f} → {change.after.median * 1000:+.2f} ms against the other ranks'")
    return (f"{change.kind} changed at step {change.step} ({change.t:.1f} s): median {change.before.median * 1000:.2f} "
            f"→ {change.after.median * 1000:.2f} ms")


class TensorBoardExporter:
    def __init__(self, log_dir: Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise UsageError("--tensorboard needs the tensorboard package: pip install 'torchdoctor[tensorboard]'") from None
        self.log_dir = log_dir
        self._writer_class = SummaryWriter
        self.writer = SummaryWriter(log_dir=str(log_dir))
        self.rank_writers: dict[int, object] = {}  # `--nproc-per-node`: DIR/rank-K, one TensorBoard run per rank

    def describe(self) -> str:
        return f"TensorBoard ({self.log_dir})"

    def _for(self, rank: int | None):
        if rank is None:
            return self.writer
        if rank not in self.rank_writers:
            self.rank_writers[rank] = self._writer_class(log_dir=str(self.log_dir / f"rank-{rank}"))
        return self.rank_writers[rank]

    def on_points(self, points: list[TimelinePoint], rank: int | None = None) -> None:
        writer = self._for(rank)
        for p in points:
            if p.warmup:
                continue
            for name, value in _point_values(p).items():
                writer.add_scalar(f"torchdoctor/{name}", value, global_step=p.step)
        writer.flush()

    def on_change(self, change: ChangePoint) -> None:
        self.writer.add_text("torchdoctor/changes", change_text(change), global_step=change.step)
        self.writer.flush()

    def on_blackbox(self, box: BlackBox, rank: int | None = None) -> None:
        self.writer.add_text("torchdoctor/stopped", stopped_text(box, rank), global_step=box.step)
        self.writer.flush()

    def on_report(self, report) -> None:
        rows = ["| code | finding | where | estimated speedup |", "|---|---|---|---|"]
        for f in report.findings[:20]:
            speedup = f"{f.estimated_speedup:.2f}x" if f.estimated_speedup else "—"
            rows.append(f"| {f.code} | {f.title.replace('|', '/')} | {finding_where(f)} | {speedup} |")
        step = report.summary.steps_total if report.summary else 0
        self.writer.add_text("torchdoctor/findings", "\n".join(rows), global_step=step)
        self.writer.flush()

    def close(self) -> None:
        for writer in self.rank_writers.values():
            writer.close()
        self.writer.close()


class PrometheusExporter:
    def __init__(self, port: int | None = None, textfile: Path | None = None, addr: str = "0.0.0.0",
                 per_rank: bool = False) -> None:
        try:
            import prometheus_client as prom
        except ImportError:
            raise UsageError("--prometheus-port and --prometheus-textfile need prometheus_client: "
                             "pip install 'torchdoctor[prometheus]'") from None
        self._prom = prom
        self.registry = prom.CollectorRegistry()
        # `--nproc-per-node`: every figure and event labelled with the rank it is of
        self.per_rank = per_rank
        rank = ["rank"] if per_rank else []
        self.gauges = {name: prom.Gauge(name, doc, rank, registry=self.registry)
                       for name, doc in {**PROMETHEUS_GAUGES, **(PROMETHEUS_RANK_GAUGES if per_rank else {})}.items()}
        self.changes = prom.Counter("torchdoctor_changes", "Changes found along the run", ["kind", *rank],
                                    registry=self.registry)
        self.change_step = prom.Gauge("torchdoctor_change_step", "The step the latest change of a kind began at",
                                      ["kind", *rank], registry=self.registry)
        self.stopped = prom.Gauge("torchdoctor_stopped", "1 once the run crashed, was stopped by a signal or stalled",
                                  ["reason", *rank], registry=self.registry)
        self.findings = prom.Gauge("torchdoctor_finding", "A finding of the run's report: its estimated speedup "
                                   "(0 when not estimated)", ["code", "slug", "severity", "where"],
                                   registry=self.registry)
        self.port, self.textfile, self.server = port, textfile, None
        if port is not None:
            try:
                started = prom.start_http_server(port, addr=addr, registry=self.registry)
            except OSError as exc:
                raise UsageError(f"--prometheus-port {port}: cannot listen there ({exc.strerror or exc}); "
                                 "pick a free port") from None
            self.server = started[0] if isinstance(started, tuple) else None
        self._write()

    def describe(self) -> str:
        where = []
        if self.port is not None:
            where.append(f"Prometheus on :{self.port}/metrics")
        if self.textfile is not None:
            where.append(f"Prometheus textfile {self.textfile}")
        return ", ".join(where)

    def _rank(self, rank: int | None) -> dict[str, str]:
        return {"rank": str(rank if rank is not None else 0)} if self.per_rank else {}

    def _gauge(self, name: str, rank: int | None):
        gauge = self.gauges[name]
        return gauge.labels(**self._rank(rank)) if self.per_rank else gauge

    def on_points(self, points: list[TimelinePoint], rank: int | None = None) -> None:
        if not points:
            return
        self._gauge("torchdoctor_step", rank).set(points[-1].step)
        clean = [p for p in points if not p.sampled and not p.warmup] or points
        self._gauge("torchdoctor_step_time_seconds", rank).set(statistics.median(p.step_s for p in clean))
        self._gauge("torchdoctor_data_wait_seconds", rank).set(statistics.median(p.data_wait_s for p in clean))
        rates = [p.samples / p.step_s for p in clean if p.samples and p.step_s > 0]
        if rates:
            self._gauge("torchdoctor_samples_per_second", rank).set(statistics.median(rates))
        mem = [p.mem_bytes for p in points if p.mem_bytes is not None]
        if mem:
            self._gauge("torchdoctor_memory_high_water_bytes", rank).set(max(mem))
        comm = [p.comm_wait_s for p in clean if p.comm_wait_s is not None]
        if comm and self.per_rank:
            self._gauge("torchdoctor_collective_wait_seconds", rank).set(statistics.median(comm))
        for key, value in gpu_figures(points).items():
            self._gpu_gauge(key, rank).set(value)
        self._write()

    def _gpu_gauge(self, key: str, rank: int | None):
        name = {"util": "torchdoctor_gpu_utilization_percent", "power": "torchdoctor_gpu_power_watts",
                "memory": "torchdoctor_gpu_memory_used_bytes"}[key]
        if name not in self.gauges:
            self.gauges[name] = self._prom.Gauge(name, PROMETHEUS_GPU_GAUGES[name], ["rank"] if self.per_rank else [],
                                                 registry=self.registry)
        return self._gauge(name, rank)

    def on_change(self, change: ChangePoint) -> None:
        self.changes.labels(kind=change.kind, **self._rank(change.rank)).inc()
        self.change_step.labels(kind=change.kind, **self._rank(change.rank)).set(change.step)
        self._write()

    def on_blackbox(self, box: BlackBox, rank: int | None = None) -> None:
        self.stopped.labels(reason=box.reason, **self._rank(rank if rank is not None else box.rank)).set(1)
        self._write()

    def on_report(self, report) -> None:
        for f in report.findings[:50]:
            self.findings.labels(code=f.code, slug=f.slug, severity=f.severity.value,
                                 where=finding_where(f)).set(f.estimated_speedup or 0.0)
        self._write()

    def _write(self) -> None:
        if self.textfile is not None:
            self._prom.write_to_textfile(str(self.textfile), self.registry)

    def close(self) -> None:
        self._write()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


class OtlpExporter:
    """OpenTelemetry over OTLP/HTTP: metrics pushed at every timeline write, events as log records."""

    def __init__(self, endpoint: str) -> None:
        try:
            from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
            from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
            from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
            from opentelemetry.sdk.metrics import MeterProvider
            from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
            from opentelemetry.sdk.resources import Resource
        except ImportError:
            raise UsageError("--otlp-endpoint needs the OpenTelemetry SDK and its OTLP/HTTP exporter: "
                             "pip install 'torchdoctor[otlp]'") from None
        import logging

        if not endpoint.startswith(("http://", "https://")):
            raise UsageError(f"--otlp-endpoint takes the collector's OTLP/HTTP address, e.g. http://localhost:4318, "
                             f"not {endpoint!r}")
        self.endpoint = endpoint.rstrip("/")
        resource = Resource.create({"service.name": "torchdoctor"})
        # exported when asked (every timeline write), not on a timer of its own
        self.reader = PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=f"{self.endpoint}/v1/metrics"),
                                                    export_interval_millis=24 * 3600 * 1000)
        self.meters = MeterProvider(resource=resource, metric_readers=[self.reader])
        meter = self.meters.get_meter("torchdoctor")
        self.gauges = {
            "step": meter.create_gauge("torchdoctor.step", description="The last training step the run finished"),
            "step_time": meter.create_gauge("torchdoctor.step_time", unit="s", description="Median step time"),
            "data_wait": meter.create_gauge("torchdoctor.data_wait", unit="s", description="Median wait for a batch"),
            "samples": meter.create_gauge("torchdoctor.samples_per_second", description="Median samples per second"),
            "memory": meter.create_gauge("torchdoctor.memory.high_water", unit="By",
                                         description="Memory high-water mark"),
            # set only where NVML measured them: an OpenTelemetry gauge never set is not exported
            "gpu_util": meter.create_gauge("torchdoctor.gpu.utilization", unit="%",
                                           description="The GPU's utilization (NVML), median"),
            "gpu_power": meter.create_gauge("torchdoctor.gpu.power", unit="W",
                                            description="The GPU's power draw (NVML), median"),
            "gpu_memory": meter.create_gauge("torchdoctor.gpu.memory.used", unit="By",
                                             description="Memory used on the GPU (NVML, every process's), maximum"),
        }
        self.changes = meter.create_counter("torchdoctor.changes", description="Changes found along the run")
        self.logs = LoggerProvider(resource=resource)
        self.logs.add_log_record_processor(SimpleLogRecordProcessor(OTLPLogExporter(endpoint=f"{self.endpoint}/v1/logs")))
        self.logger = logging.getLogger(f"torchdoctor.follow.otlp.{id(self)}")
        self.logger.propagate = False  # the user's logging configuration never sees these
        self.logger.setLevel(logging.INFO)
        self.handler = LoggingHandler(level=logging.INFO, logger_provider=self.logs)
        self.logger.addHandler(self.handler)

    def describe(self) -> str:
        return f"OpenTelemetry ({self.endpoint})"

    def on_points(self, points: list[TimelinePoint], rank: int | None = None) -> None:
        if not points:
            return
        attributes = {"torchdoctor.rank": rank} if rank is not None else None  # `--nproc-per-node`: per rank
        clean = [p for p in points if not p.sampled and not p.warmup] or points
        self.gauges["step"].set(points[-1].step, attributes)
        self.gauges["step_time"].set(statistics.median(p.step_s for p in clean), attributes)
        self.gauges["data_wait"].set(statistics.median(p.data_wait_s for p in clean), attributes)
        rates = [p.samples / p.step_s for p in clean if p.samples and p.step_s > 0]
        if rates:
            self.gauges["samples"].set(statistics.median(rates), attributes)
        mem = [p.mem_bytes for p in points if p.mem_bytes is not None]
        if mem:
            self.gauges["memory"].set(max(mem), attributes)
        for key, value in gpu_figures(points).items():
            self.gauges[f"gpu_{key}"].set(value, attributes)
        self.meters.force_flush(timeout_millis=10_000)

    def on_change(self, change: ChangePoint) -> None:
        ranked = {"torchdoctor.rank": change.rank} if change.rank is not None else {}
        self.changes.add(1, {"kind": change.kind, **ranked})
        self.logger.warning(change_text(change), extra={"torchdoctor.event": "change", "torchdoctor.kind": change.kind,
                                                        "torchdoctor.step": change.step, **ranked})

    def on_blackbox(self, box: BlackBox, rank: int | None = None) -> None:
        rank = rank if rank is not None else box.rank
        extra = {"torchdoctor.event": "stopped", "torchdoctor.reason": box.reason, "torchdoctor.step": box.step,
                 **({"torchdoctor.rank": rank} if rank is not None else {})}
        if box.where is not None:
            extra.update({"code.filepath": box.where.path, "code.lineno": box.where.line})
        if box.waiting_in:
            extra["torchdoctor.waiting_in"] = box.waiting_in
        self.logger.error(stopped_text(box, rank), extra=extra)

    def on_report(self, report) -> None:
        for f in report.findings[:50]:
            extra = {"torchdoctor.event": "finding", "torchdoctor.code": f.code, "torchdoctor.slug": f.slug,
                     "torchdoctor.severity": f.severity.value}
            if f.location is not None:
                extra.update({"code.filepath": f.location.path, "code.lineno": f.location.line})
            if f.estimated_speedup is not None:
                extra["torchdoctor.estimated_speedup"] = f.estimated_speedup
            self.logger.info(f"{f.code} {f.title}", extra=extra)

    def close(self) -> None:
        self.meters.force_flush(timeout_millis=10_000)
        self.meters.shutdown()
        self.logger.removeHandler(self.handler)
        self.logs.shutdown()
