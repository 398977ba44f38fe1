"""Step clock shared by the overhead workloads: the wall time and the process CPU time of
each step (process CPU counts every thread of the process, the doctor's included, and not
the time other processes take the core away), written as JSON {"wall": [...], "cpu": [...],
"start": t0, "end": t1} where `start` is the perf_counter time the first step began and `end`
the time the script wrote the file (its end: a run the doctor stopped ends inside its last
step), plus any extra series the workload passes."""
import json
import time


class StepTimes:
    def __init__(self, path: str):
        self.path = path
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self._last = (time.perf_counter(), time.process_time())
        self.start = self._last[0]  # the first step starts here

    def __len__(self) -> int:
        return len(self.wall)

    def tick(self) -> None:
        """Close the current step."""
        now = (time.perf_counter(), time.process_time())
        self.wall.append(now[0] - self._last[0])
        self.cpu.append(now[1] - self._last[1])
        self._last = now

    def write(self, **extra) -> None:
        with open(self.path, "w") as fh:
            json.dump({"wall": self.wall, "cpu": self.cpu, "start": self.start, "end": time.perf_counter(), **extra},
                      fh)
