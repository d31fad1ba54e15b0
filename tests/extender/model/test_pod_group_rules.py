"""Rules of reading a pod's group (model/pod_group.py) that a one-line change would break unseen
(issue 52 item 0): a Job's pod is a JobSet group only with JobSet's own label."""

from __future__ import annotations

from gpuextender.extender.model.pod_group import NO_GROUP, read_group
from tests.extender.model.test_pod_group import pod


def test_a_job_pod_with_the_exclusive_topology_annotation_but_no_jobset_label_is_a_single_pod() -> None:
    job_only = pod({"batch.kubernetes.io/job-name": "train-0"}, {"alpha.jobset.sigs.k8s.io/exclusive-topology": "rack"})
    assert read_group(job_only) == NO_GROUP  # no group, and nothing for explain to report


def test_a_pod_naming_only_the_1_35_workload_ref_is_a_single_pod() -> None:
    """kube-scheduler 1.35's alpha Workload API (`spec.workloadRef`) is not read (deploy/README.md,
    "Multi-pod jobs", says why): only 1.36's `spec.schedulingGroup` names a Workload group."""
    ref = {"name": "training", "podGroup": "workers", "podGroupReplicaKey": "0"}
    assert read_group(pod(workloadRef=ref)) == NO_GROUP


def test_a_jobset_job_without_exclusive_topology_is_single_pods() -> None:
    labels = {"jobset.sigs.k8s.io/jobset-name": "train", "batch.kubernetes.io/job-name": "train-workers-0"}
    assert read_group(pod(labels)) == NO_GROUP
