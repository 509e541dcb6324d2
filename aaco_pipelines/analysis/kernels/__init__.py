"""Why each GPU kernel takes its time: its occupancy, what the hardware counted, its class.

Entry points:

- `occupancy.kernel_occupancy` the occupancy of every kernel, from what its trace row carries.
- `counter_metrics.kernel_hardware_metrics` per-dispatch hardware metrics from counters.
- `diagnosis.diagnose_kernels` the two together: each kernel's roof, class and recommendation.
"""
