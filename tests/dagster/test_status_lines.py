"""`aaco ui`'s status lines: one per finished measurement, from the run's own records."""

from __future__ import annotations

from aaco_pipelines.instance.status_lines import status_line


def test_a_measured_model_is_one_line_with_its_p50_and_why_it_is_suspect():
    suspect = {
        "status": "SUCCESS",
        "p50_ms": "1.1634",
        "measurement": "Measurement SUSPECT: other processes took 70% of the host's CPU time "
        "meanwhile; p99 is 4.0x p50.",
    }
    assert status_line(3, 7, "resnet_cnn|cpu", suspect) == (
        "3/7 measured: resnet_cnn|cpu p50 1.16 ms, SUSPECT: other processes took 70% of the "
        "host's CPU time meanwhile"
    )
    trusted = {"status": "SUCCESS", "p50_ms": "0.052", "measurement": "Measurement ok (40 ...)."}
    assert status_line(1, 7, "mlp|cpu", trusted) == "1/7 measured: mlp|cpu p50 0.052 ms"
    failed = {"status": "FAILURE"}
    assert status_line(2, 7, "corrupt|cpu", failed) == (
        "2/7 failed: corrupt|cpu (the run's log in the UI says why)"
    )
