"""An OTLP/HTTP receiver for tests: what an exporter POSTs to /v1/metrics and /v1/logs, kept and
decoded with OpenTelemetry's own protobufs (the collector's side of the wire)."""

from __future__ import annotations

import http.server
import threading
from contextlib import contextmanager


@contextmanager
def otlp_receiver():
    """(endpoint, received): received[path] is the list of request bodies POSTed there."""
    received: dict[str, list[bytes]] = {"/v1/metrics": [], "/v1/logs": []}

    class Collector(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the stdlib's name
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.setdefault(self.path, []).append(body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def log_records(received) -> list[tuple[str, dict]]:
    """Every log record received: (its body, its attributes as OpenTelemetry AnyValues)."""
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2

    records = []
    for body in received["/v1/logs"]:
        for rl in logs_service_pb2.ExportLogsServiceRequest.FromString(body).resource_logs:
            for sl in rl.scope_logs:
                records += [(r.body.string_value, {a.key: a.value for a in r.attributes}) for r in sl.log_records]
    return records


def gauge_points(received) -> dict[str, list]:
    """Every gauge data point received, by metric name."""
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2

    out: dict[str, list] = {}
    for body in received["/v1/metrics"]:
        for rm in metrics_service_pb2.ExportMetricsServiceRequest.FromString(body).resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.HasField("gauge"):
                        out.setdefault(metric.name, []).extend(metric.gauge.data_points)
    return out
