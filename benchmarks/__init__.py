"""Benchmarks (each script runs by path: `python3 dev.py bench NAME`) and the GPU check
(`benchmarks.gpucheck`). A regular package, so that no installed top-level `benchmarks`
package can stand in for this folder when the GPU check runs `python -m benchmarks.gpucheck.X`."""
