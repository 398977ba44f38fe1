"""TD607 nccl-transport-disabled: NCCL environment variables that turn its fast transports off,
set in code (`os.environ["NCCL_P2P_DISABLE"] = "1"`, `os.environ.setdefault(...)`,
`os.putenv(...)`, `os.environ.update(...)`). Set before `init_process_group`, they hold for
the whole job, long after the driver problem they worked around."""

from __future__ import annotations

from typing import Iterator

from torchdoctor.comm.environment import CRIPPLING_NCCL_ENV, crippling_settings, what_it_does
from torchdoctor.model.findings import Severity
from torchdoctor.lint.checks.base import Check, Hit
from torchdoctor.lint.environment import environment_writes
from torchdoctor.lint.facts import Facts
from torchdoctor.lint.values import Unknown


class NcclEnvInCode(Check):
    codes = ("TD607",)

    def run(self, facts: Facts) -> Iterator[Hit]:
        if "NCCL_" not in facts.model.text:
            return
        writes: dict[str, list] = {}
        for variable, node, value, block in environment_writes(facts, CRIPPLING_NCCL_ENV):
            writes.setdefault(variable, []).append((node, value, block))
        # variable by variable, in the table's order: of two hits on one line the engine keeps the first
        for variable in CRIPPLING_NCCL_ENV:
            for node, value, block in writes.get(variable, ()):
                result = facts.values.evaluate(value, block.scope)
                if isinstance(result, Unknown):
                    yield Hit("TD607", node, f"{variable} set from a run-time value",
                              f"{variable} is set in code; its value {result.why}. If it is "
                              f"{' or '.join(CRIPPLING_NCCL_ENV[variable][0])}, it {what_it_does(variable)}",
                              Severity.INFO, {"variable": variable})
                elif crippling_settings({variable: str(result)}):
                    yield Hit("TD607", node, f"{variable}={result} set in code",
                              f"{variable}={result} {what_it_does(variable)}; every collective of the job takes the "
                              f"slower path. Remove it, and check the transport NCCL picks with `torchdoctor comm`",
                              Severity.MEDIUM, {"variable": variable, "value": str(result)})
