"""Rules of reading a pod's group (model/pod_group.py) that a one-line change would break unseen
(issue 52 item 0): a Job's pod is a JobSet group only with JobSet's own label."""

from __future__ import annotations

from gpuextender.extender.model.pod_group import NO_GROUP, read_group
from tests.extender.model.test_pod_group import pod


def test_a_job_pod_with_the_exclusive_topology_annotation_but_no_jobset_label_is_a_single_pod() -> None:
    job_only = pod({"batch.kubernetes.io/job-name": "train-0"}, {"alpha.jobset.sigs.k8s.io/exclusive-topology": "rack"})
    assert read_group(job_only) == NO_GROUP  # no group, and nothing for explain to report
