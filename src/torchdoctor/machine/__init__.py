"""Facts about this machine, each through one door: NVML (`nvml`), the CPUs this process may use (`cpus`)."""
