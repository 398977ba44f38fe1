"""The `comm` engine's detector: what a measured link between the ranks says on its own (the
all-reduce table of `torchdoctor comm`, or the check after a multi-rank run)."""

from __future__ import annotations

from torchdoctor.comm.verdict import judge
from torchdoctor.model.distributed_record import CommResult
from torchdoctor.model.findings import Finding, Severity
from torchdoctor.rules.base import detects, make_finding
from torchdoctor.rules.distributed import NcclTransportDisabled
from torchdoctor.rules.scaling import SlowInterconnect


@detects(SlowInterconnect, NcclTransportDisabled)
def link_findings(result: CommResult) -> list[Finding]:
    out = []
    verdict = judge(result)
    link = result.link
    if verdict.slow:
        out.append(make_finding(
            SlowInterconnect, title=f"all-reduce reaches {verdict.measured_gbps:.2f} GB/s of an expected "
                                    f"{verdict.expected_gbps:.1f}", message=verdict.text + ".", location=None,
            evidence={"busbw_gbps": verdict.measured_gbps, "expected_gbps": verdict.expected_gbps,
                      "share": round(verdict.share, 3)}, speedup=None, severity=Severity.HIGH,
            basis="a link measurement: what it costs a training step, `torchdoctor run` measures"))
    if link is not None and link.crippling_env:
        out.append(make_finding(
            NcclTransportDisabled, title=", ".join(f"{k}={v}" for k, v in link.crippling_env.items()),
            message=" ".join(n for n in link.notes if n.startswith("NCCL_")), location=None,
            evidence={"settings": dict(link.crippling_env)}, speedup=None, severity=Severity.MEDIUM,
            basis="a setting, not a measurement"))
    return out
