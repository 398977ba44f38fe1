"""`torchdoctor memory`: peak memory and throughput at several batch sizes, the fit
`peak(b) = fixed + b * per_sample`, the largest batch that fits, and estimates on fake tensors.

search.py is pure (no torch; the fit it searches with is rules/memory_fit.py); trials.py runs each batch size in a fresh process
(child.py inside it, one per rank under DDP); estimate.py runs a step on fake tensors.
"""
