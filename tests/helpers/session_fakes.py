"""Stand-ins for a session's clock and window probes: the session and the budgets take any
`() -> float` clock, and any object with `active`, `activate(phase)` and `deactivate()` as a probe."""


class FakeClock:
    def __init__(self, start: float = 100.0):
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeWindow:
    def __init__(self, session=None, name=""):
        self.active = False
        self.activations = 0

    def activate(self, phase):
        self.active = True
        self.activations += 1

    def deactivate(self):
        self.active = False
