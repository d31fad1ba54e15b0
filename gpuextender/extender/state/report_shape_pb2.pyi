from gpuextender.v1 import gpu_state_pb2 as _gpu_state_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GpuShape(_message.Message):
    __slots__ = ("index", "uuid", "name", "pci_bus_id", "compute_capability", "memory_total_bytes", "healthy", "unhealthy_reasons", "holders", "sharing", "health", "health_reasons", "errors", "xids", "numa_node", "mig_instances", "dra_device")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PCI_BUS_ID_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_CAPABILITY_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    UNHEALTHY_REASONS_FIELD_NUMBER: _ClassVar[int]
    HOLDERS_FIELD_NUMBER: _ClassVar[int]
    SHARING_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    HEALTH_REASONS_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    XIDS_FIELD_NUMBER: _ClassVar[int]
    NUMA_NODE_FIELD_NUMBER: _ClassVar[int]
    MIG_INSTANCES_FIELD_NUMBER: _ClassVar[int]
    DRA_DEVICE_FIELD_NUMBER: _ClassVar[int]
    index: int
    uuid: str
    name: str
    pci_bus_id: str
    compute_capability: _gpu_state_pb2.ComputeCapability
    memory_total_bytes: int
    healthy: bool
    unhealthy_reasons: _containers.RepeatedScalarFieldContainer[str]
    holders: _containers.RepeatedCompositeFieldContainer[_gpu_state_pb2.Holder]
    sharing: _gpu_state_pb2.Sharing
    health: _gpu_state_pb2.HealthState
    health_reasons: _containers.RepeatedScalarFieldContainer[str]
    errors: _gpu_state_pb2.ErrorCounters
    xids: _containers.RepeatedCompositeFieldContainer[_gpu_state_pb2.XidEvent]
    numa_node: int
    mig_instances: _containers.RepeatedCompositeFieldContainer[_gpu_state_pb2.MigInstance]
    dra_device: str
    def __init__(self, index: _Optional[int] = ..., uuid: _Optional[str] = ..., name: _Optional[str] = ..., pci_bus_id: _Optional[str] = ..., compute_capability: _Optional[_Union[_gpu_state_pb2.ComputeCapability, _Mapping]] = ..., memory_total_bytes: _Optional[int] = ..., healthy: _Optional[bool] = ..., unhealthy_reasons: _Optional[_Iterable[str]] = ..., holders: _Optional[_Iterable[_Union[_gpu_state_pb2.Holder, _Mapping]]] = ..., sharing: _Optional[_Union[_gpu_state_pb2.Sharing, _Mapping]] = ..., health: _Optional[_Union[_gpu_state_pb2.HealthState, str]] = ..., health_reasons: _Optional[_Iterable[str]] = ..., errors: _Optional[_Union[_gpu_state_pb2.ErrorCounters, _Mapping]] = ..., xids: _Optional[_Iterable[_Union[_gpu_state_pb2.XidEvent, _Mapping]]] = ..., numa_node: _Optional[int] = ..., mig_instances: _Optional[_Iterable[_Union[_gpu_state_pb2.MigInstance, _Mapping]]] = ..., dra_device: _Optional[str] = ...) -> None: ...

class ReportShape(_message.Message):
    __slots__ = ("node_name", "agent_version", "driver_version", "gpus", "node_error", "allocation_source", "allocation_problem", "topology", "sharing_labels", "heartbeat_of", "heartbeat_utilization_percent", "heartbeat_memory_used_bytes", "heartbeat_sm_active_percent")
    class SharingLabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    DRIVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    NODE_ERROR_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_SOURCE_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_PROBLEM_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    SHARING_LABELS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_OF_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_UTILIZATION_PERCENT_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_SM_ACTIVE_PERCENT_FIELD_NUMBER: _ClassVar[int]
    node_name: str
    agent_version: str
    driver_version: str
    gpus: _containers.RepeatedCompositeFieldContainer[GpuShape]
    node_error: str
    allocation_source: _gpu_state_pb2.AllocationSource
    allocation_problem: str
    topology: _gpu_state_pb2.Topology
    sharing_labels: _containers.ScalarMap[str, str]
    heartbeat_of: int
    heartbeat_utilization_percent: _containers.RepeatedScalarFieldContainer[int]
    heartbeat_memory_used_bytes: _containers.RepeatedScalarFieldContainer[int]
    heartbeat_sm_active_percent: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, node_name: _Optional[str] = ..., agent_version: _Optional[str] = ..., driver_version: _Optional[str] = ..., gpus: _Optional[_Iterable[_Union[GpuShape, _Mapping]]] = ..., node_error: _Optional[str] = ..., allocation_source: _Optional[_Union[_gpu_state_pb2.AllocationSource, str]] = ..., allocation_problem: _Optional[str] = ..., topology: _Optional[_Union[_gpu_state_pb2.Topology, _Mapping]] = ..., sharing_labels: _Optional[_Mapping[str, str]] = ..., heartbeat_of: _Optional[int] = ..., heartbeat_utilization_percent: _Optional[_Iterable[int]] = ..., heartbeat_memory_used_bytes: _Optional[_Iterable[int]] = ..., heartbeat_sm_active_percent: _Optional[_Iterable[float]] = ...) -> None: ...
