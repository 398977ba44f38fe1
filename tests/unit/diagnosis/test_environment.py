"""One environment table for the run and trace reports: the same facts under the same names."""

import pytest
from helpers.real_fixtures import cases

from torchdoctor.diagnosis.run import analyze
from torchdoctor.diagnosis.trace import trace_report
from torchdoctor.pipeline import load_record


@pytest.mark.parametrize("rec", cases("host_sync_item/record.json"))
def test_a_run_and_its_trace_name_the_machine_alike(rec):
    record = load_record(rec / "host_sync_item")
    run_env = analyze(record).environment
    trace_env = trace_report(record.trace).environment
    assert run_env["device"] == trace_env["device"] == record.environment.device_name
    assert run_env["compute capability"] == trace_env["compute capability"]
    for key in ("trace files", "profiled steps"):  # a run with a profiler window shows the trace's facts too
        assert run_env[key] == trace_env[key]
    assert "cpus usable" in run_env and "python" not in trace_env  # a trace alone knows no interpreter
