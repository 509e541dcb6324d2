"""The pipeline: one module per stage, each doing its stage's whole job (compute, store, hold
the session folder while it works) and returning a small result.

In order, for one session:

    prepare       (onnx_graph)          the model frozen at its content hash, its graph extracted
    measure       (benchmark_run)       one isolated, measured session: the raw evidence bundle
    collect       (collected_traces)    the bundle's evidence parsed into TraceLake tables
    load          (tracelake_session)   those tables and the device trace in one transaction
    attribute     (kernel_attribution)  kernel time per ONNX node and op type, derived metrics
    critical_path (critical_path)       each iteration's critical path, slack, 2x gain per node
    diagnose      (bottleneck_report)   the envelope it is judged against, roofline, bottleneck
    judge_drift   (performance_drift)   each metric's history and the verdict; the session is
                                        complete (visible to readers) when it commits; its
                                        structural diff, computed once and kept
    publish       (performance_drift)   the session's HTML report and Perfetto trace as files,
                                        as `aaco run` and `aaco ingest` end too

and beside them `review_night` (nightly_review), `ingest_trace` (`aaco ingest`: a trace
collected elsewhere, up to `load`) and `restore` (`aaco restore`: a lost TraceLake rebuilt from
the bundles by the stages above, in the order history was made). `pipeline` calls the same functions in order for `aaco run`,
`aaco ingest` and the benchmarks; the Dagster assets call them one each (hardware_envelope
calls analysis.envelope.choice.measure_and_save, which a diagnosis also calls on demand).
Stages may import everything below them (analysis, governance, producers, storage); nothing
below imports a stage.
"""
