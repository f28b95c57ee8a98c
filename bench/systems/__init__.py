"""One module per benchmarked system; each measurement runs in a fresh process.

`bench.worker` imports the module a measurement names and calls its function
with the measurement's settings; every module returns plain dicts of numbers.
"""
