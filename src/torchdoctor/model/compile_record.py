"""What torch.compile did in a run, as plain typed data (part of the RunRecord, schema 7).

The compile probe (run/probes/compile.py) reads torch's own sources: Dynamo's compile start
and end callbacks (when each compile ran, and the user line that called the compiled code),
its compilation metrics (which function, why it recompiled, whether it hit the recompile
limit), its `graph_breaks` log (each break's reason and user line) and the compiled graphs
it counts as they run. A source the installed torch lacks is named in `unavailable`, never
guessed. Times are seconds since the run started; durations seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torchdoctor.model.location import Location

DYNAMO, BACKWARD = "dynamo", "backward"  # what started a compile: a frame traced, or a lazy backward


@dataclass
class CompileEvent:
    """One compilation: a frame Dynamo traced (first compile or recompile), or a backward graph
    compiled lazily at its first backward."""

    compile_id: str  # Dynamo's "frame/attempt" id: "0/0" is frame 0's first compile, "0/3" its 4th
    trigger: str  # DYNAMO | BACKWARD
    start: float  # since the run started
    seconds: float
    step: int  # the optimizer step it fell in (StepSample.index of the open interval; 0: before any step)
    function: str = ""  # the compiled code's name (co_name)
    module: str = ""  # the class of the nn.Module whose call compiled, when a module's was
    location: Location | None = None  # the compiled code (its first line)
    library: str | None = None  # the installed package that code belongs to; None: the user's or torch's
    called_from: Location | None = None  # the innermost user line on the stack when it compiled
    call_text: str = ""  # that line's source
    recompile_reason: str = ""  # Dynamo's guard failure, verbatim ("0/0: tensor 'x' size mismatch at index 1...")
    failed: str = ""  # why the compile failed, when it did (Dynamo's message, first line)
    limit_hit: bool = False  # the recompile limit: from here this code runs without compiling new variants
    graph_ops: int | None = None  # ops in the captured graph
    restart_reasons: list[str] = field(default_factory=list)  # graph breaks that restarted the trace


@dataclass
class GraphBreak:
    """Where Dynamo split a compiled function's graph, and why."""

    location: Location  # the innermost user line (or the library line, with `library` set)
    reason: str  # Dynamo's reason, first line
    detail: str = ""  # the explanation that followed it
    library: str | None = None  # the break is inside this installed package, not the user's code
    called_from: Location | None = None  # for a break inside a library: the user line that led there
    text: str = ""  # the source line
    count: int = 1  # compiles that broke there
    host_sync: bool = False  # the break is a host read of a tensor value (.item(), .tolist(), a bool test)


@dataclass
class CompiledSync:
    """A host read of a tensor value compiled into a graph (`capture_scalar_outputs`): the
    compiled region waits for the device there."""

    location: Location
    op: str  # item, _local_scalar_dense, nonzero, ...
    text: str = ""


@dataclass
class CompileInfo:
    """torch.compile in one run. `compiled_at`: each torch.compile (or `module.compile()`) call."""

    torch_version: str = ""
    compiled_at: list[Location] = field(default_factory=list)
    events: list[CompileEvent] = field(default_factory=list)
    breaks: list[GraphBreak] = field(default_factory=list)
    syncs_in_graph: list[CompiledSync] = field(default_factory=list)
    recompile_limit: int | None = None  # torch._dynamo.config.recompile_limit (cache_size_limit) when read
    # step index -> compiled graphs run in its training (outside evaluation regions; schema 10: before, all)
    graph_calls: dict[str, int] = field(default_factory=dict)
    compiled_calls: dict[str, int] = field(default_factory=dict)  # step index -> calls into compiled code, training
    eval_graph_calls: dict[str, int] = field(default_factory=dict)  # step index -> graphs its evaluation ran
    unavailable: list[str] = field(default_factory=list)  # "graph counts: OutputGraph.call_user_compiler is missing"
    probe_modes: str = "suspended"  # how the doctor's op windows met compiled code: suspended | off
    logging_overhead_s: float = 0.0  # Dynamo's own measure of structured-logging time inside the compiles

    @property
    def compiled(self) -> bool:
        return bool(self.compiled_at or self.events)

    @property
    def compile_s(self) -> float:
        return sum(e.seconds for e in self.events)

    def seconds_by_step(self) -> dict[int, float]:
        """Compiling per step (StepSample.index): the script's own work, whatever probes ran there."""
        by_step: dict[int, float] = {}
        for event in self.events:
            by_step[event.step] = by_step.get(event.step, 0.0) + event.seconds
        return by_step

    def recompiles(self) -> list[CompileEvent]:
        return [e for e in self.events if e.trigger == DYNAMO and e.recompile_reason]
