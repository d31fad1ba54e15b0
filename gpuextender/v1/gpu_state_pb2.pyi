import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AllocationSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ALLOCATION_SOURCE_UNSPECIFIED: _ClassVar[AllocationSource]
    ALLOCATION_KUBELET: _ClassVar[AllocationSource]
    ALLOCATION_UNAVAILABLE: _ClassVar[AllocationSource]

class SharingMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SHARING_MODE_UNSPECIFIED: _ClassVar[SharingMode]
    SHARING_EXCLUSIVE: _ClassVar[SharingMode]
    SHARING_TIME_SLICING: _ClassVar[SharingMode]
    SHARING_MPS: _ClassVar[SharingMode]
    SHARING_MIG: _ClassVar[SharingMode]

class HealthState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HEALTH_STATE_UNSPECIFIED: _ClassVar[HealthState]
    HEALTH_HEALTHY: _ClassVar[HealthState]
    HEALTH_DEGRADED: _ClassVar[HealthState]
    HEALTH_UNHEALTHY: _ClassVar[HealthState]

class PcieRelation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PCIE_RELATION_UNSPECIFIED: _ClassVar[PcieRelation]
    PCIE_INTERNAL: _ClassVar[PcieRelation]
    PCIE_SINGLE: _ClassVar[PcieRelation]
    PCIE_MULTIPLE: _ClassVar[PcieRelation]
    PCIE_HOSTBRIDGE: _ClassVar[PcieRelation]
    PCIE_NODE: _ClassVar[PcieRelation]
    PCIE_SYSTEM: _ClassVar[PcieRelation]
ALLOCATION_SOURCE_UNSPECIFIED: AllocationSource
ALLOCATION_KUBELET: AllocationSource
ALLOCATION_UNAVAILABLE: AllocationSource
SHARING_MODE_UNSPECIFIED: SharingMode
SHARING_EXCLUSIVE: SharingMode
SHARING_TIME_SLICING: SharingMode
SHARING_MPS: SharingMode
SHARING_MIG: SharingMode
HEALTH_STATE_UNSPECIFIED: HealthState
HEALTH_HEALTHY: HealthState
HEALTH_DEGRADED: HealthState
HEALTH_UNHEALTHY: HealthState
PCIE_RELATION_UNSPECIFIED: PcieRelation
PCIE_INTERNAL: PcieRelation
PCIE_SINGLE: PcieRelation
PCIE_MULTIPLE: PcieRelation
PCIE_HOSTBRIDGE: PcieRelation
PCIE_NODE: PcieRelation
PCIE_SYSTEM: PcieRelation

class RelayBatch(_message.Message):
    __slots__ = ("reports",)
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    reports: _containers.RepeatedCompositeFieldContainer[RelayedReport]
    def __init__(self, reports: _Optional[_Iterable[_Union[RelayedReport, _Mapping]]] = ...) -> None: ...

class RelayedReport(_message.Message):
    __slots__ = ("stream", "report", "closed")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    stream: int
    report: bytes
    closed: bool
    def __init__(self, stream: _Optional[int] = ..., report: _Optional[bytes] = ..., closed: _Optional[bool] = ...) -> None: ...

class RelayAck(_message.Message):
    __slots__ = ("accepted", "refused", "agent_ack")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    AGENT_ACK_FIELD_NUMBER: _ClassVar[int]
    accepted: int
    refused: _containers.RepeatedCompositeFieldContainer[RelayRefusal]
    agent_ack: ReportAck
    def __init__(self, accepted: _Optional[int] = ..., refused: _Optional[_Iterable[_Union[RelayRefusal, _Mapping]]] = ..., agent_ack: _Optional[_Union[ReportAck, _Mapping]] = ...) -> None: ...

class RelayRefusal(_message.Message):
    __slots__ = ("stream", "node_name", "sequence", "reason")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    stream: int
    node_name: str
    sequence: int
    reason: str
    def __init__(self, stream: _Optional[int] = ..., node_name: _Optional[str] = ..., sequence: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class NodeReport(_message.Message):
    __slots__ = ("node_name", "sequence", "sample_time", "agent_version", "driver_version", "gpus", "node_error", "allocation_source", "allocation_problem", "topology", "sharing_labels", "heartbeat_of", "heartbeat_utilization_percent", "heartbeat_memory_used_bytes", "heartbeat_sm_active_percent")
    class SharingLabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_TIME_FIELD_NUMBER: _ClassVar[int]
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
    sequence: int
    sample_time: _timestamp_pb2.Timestamp
    agent_version: str
    driver_version: str
    gpus: _containers.RepeatedCompositeFieldContainer[GpuSample]
    node_error: str
    allocation_source: AllocationSource
    allocation_problem: str
    topology: Topology
    sharing_labels: _containers.ScalarMap[str, str]
    heartbeat_of: int
    heartbeat_utilization_percent: _containers.RepeatedScalarFieldContainer[int]
    heartbeat_memory_used_bytes: _containers.RepeatedScalarFieldContainer[int]
    heartbeat_sm_active_percent: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, node_name: _Optional[str] = ..., sequence: _Optional[int] = ..., sample_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., agent_version: _Optional[str] = ..., driver_version: _Optional[str] = ..., gpus: _Optional[_Iterable[_Union[GpuSample, _Mapping]]] = ..., node_error: _Optional[str] = ..., allocation_source: _Optional[_Union[AllocationSource, str]] = ..., allocation_problem: _Optional[str] = ..., topology: _Optional[_Union[Topology, _Mapping]] = ..., sharing_labels: _Optional[_Mapping[str, str]] = ..., heartbeat_of: _Optional[int] = ..., heartbeat_utilization_percent: _Optional[_Iterable[int]] = ..., heartbeat_memory_used_bytes: _Optional[_Iterable[int]] = ..., heartbeat_sm_active_percent: _Optional[_Iterable[float]] = ...) -> None: ...

class Holder(_message.Message):
    __slots__ = ("namespace", "pod", "container", "resource_name", "device_id", "dra_claim_namespace", "dra_claim_name", "dra_pool")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    POD_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    DRA_CLAIM_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    DRA_CLAIM_NAME_FIELD_NUMBER: _ClassVar[int]
    DRA_POOL_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    pod: str
    container: str
    resource_name: str
    device_id: str
    dra_claim_namespace: str
    dra_claim_name: str
    dra_pool: str
    def __init__(self, namespace: _Optional[str] = ..., pod: _Optional[str] = ..., container: _Optional[str] = ..., resource_name: _Optional[str] = ..., device_id: _Optional[str] = ..., dra_claim_namespace: _Optional[str] = ..., dra_claim_name: _Optional[str] = ..., dra_pool: _Optional[str] = ...) -> None: ...

class Sharing(_message.Message):
    __slots__ = ("mode", "replicas")
    MODE_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    mode: SharingMode
    replicas: int
    def __init__(self, mode: _Optional[_Union[SharingMode, str]] = ..., replicas: _Optional[int] = ...) -> None: ...

class ErrorCounters(_message.Message):
    __slots__ = ("ecc_uncorrected_volatile", "ecc_corrected_volatile", "remapped_rows_correctable", "remapped_rows_uncorrectable", "remap_pending", "remap_failure", "retired_pages_pending")
    ECC_UNCORRECTED_VOLATILE_FIELD_NUMBER: _ClassVar[int]
    ECC_CORRECTED_VOLATILE_FIELD_NUMBER: _ClassVar[int]
    REMAPPED_ROWS_CORRECTABLE_FIELD_NUMBER: _ClassVar[int]
    REMAPPED_ROWS_UNCORRECTABLE_FIELD_NUMBER: _ClassVar[int]
    REMAP_PENDING_FIELD_NUMBER: _ClassVar[int]
    REMAP_FAILURE_FIELD_NUMBER: _ClassVar[int]
    RETIRED_PAGES_PENDING_FIELD_NUMBER: _ClassVar[int]
    ecc_uncorrected_volatile: int
    ecc_corrected_volatile: int
    remapped_rows_correctable: int
    remapped_rows_uncorrectable: int
    remap_pending: bool
    remap_failure: bool
    retired_pages_pending: bool
    def __init__(self, ecc_uncorrected_volatile: _Optional[int] = ..., ecc_corrected_volatile: _Optional[int] = ..., remapped_rows_correctable: _Optional[int] = ..., remapped_rows_uncorrectable: _Optional[int] = ..., remap_pending: _Optional[bool] = ..., remap_failure: _Optional[bool] = ..., retired_pages_pending: _Optional[bool] = ...) -> None: ...

class XidEvent(_message.Message):
    __slots__ = ("xid", "time")
    XID_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    xid: int
    time: _timestamp_pb2.Timestamp
    def __init__(self, xid: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class MigInstance(_message.Message):
    __slots__ = ("uuid", "profile", "gpu_instance_id", "compute_instance_id", "memory_total_bytes", "memory_used_bytes", "holders", "gpm")
    UUID_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    GPU_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    HOLDERS_FIELD_NUMBER: _ClassVar[int]
    GPM_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    profile: str
    gpu_instance_id: int
    compute_instance_id: int
    memory_total_bytes: int
    memory_used_bytes: int
    holders: _containers.RepeatedCompositeFieldContainer[Holder]
    gpm: GpmReadings
    def __init__(self, uuid: _Optional[str] = ..., profile: _Optional[str] = ..., gpu_instance_id: _Optional[int] = ..., compute_instance_id: _Optional[int] = ..., memory_total_bytes: _Optional[int] = ..., memory_used_bytes: _Optional[int] = ..., holders: _Optional[_Iterable[_Union[Holder, _Mapping]]] = ..., gpm: _Optional[_Union[GpmReadings, _Mapping]] = ...) -> None: ...

class GpmReadings(_message.Message):
    __slots__ = ("sm_active_percent", "sm_occupancy_percent", "tensor_active_percent", "dram_active_percent", "graphics_active_percent")
    SM_ACTIVE_PERCENT_FIELD_NUMBER: _ClassVar[int]
    SM_OCCUPANCY_PERCENT_FIELD_NUMBER: _ClassVar[int]
    TENSOR_ACTIVE_PERCENT_FIELD_NUMBER: _ClassVar[int]
    DRAM_ACTIVE_PERCENT_FIELD_NUMBER: _ClassVar[int]
    GRAPHICS_ACTIVE_PERCENT_FIELD_NUMBER: _ClassVar[int]
    sm_active_percent: float
    sm_occupancy_percent: float
    tensor_active_percent: float
    dram_active_percent: float
    graphics_active_percent: float
    def __init__(self, sm_active_percent: _Optional[float] = ..., sm_occupancy_percent: _Optional[float] = ..., tensor_active_percent: _Optional[float] = ..., dram_active_percent: _Optional[float] = ..., graphics_active_percent: _Optional[float] = ...) -> None: ...

class GpuLink(_message.Message):
    __slots__ = ("a", "b", "nvlinks", "pcie")
    A_FIELD_NUMBER: _ClassVar[int]
    B_FIELD_NUMBER: _ClassVar[int]
    NVLINKS_FIELD_NUMBER: _ClassVar[int]
    PCIE_FIELD_NUMBER: _ClassVar[int]
    a: int
    b: int
    nvlinks: int
    pcie: PcieRelation
    def __init__(self, a: _Optional[int] = ..., b: _Optional[int] = ..., nvlinks: _Optional[int] = ..., pcie: _Optional[_Union[PcieRelation, str]] = ...) -> None: ...

class Topology(_message.Message):
    __slots__ = ("links",)
    LINKS_FIELD_NUMBER: _ClassVar[int]
    links: _containers.RepeatedCompositeFieldContainer[GpuLink]
    def __init__(self, links: _Optional[_Iterable[_Union[GpuLink, _Mapping]]] = ...) -> None: ...

class ComputeCapability(_message.Message):
    __slots__ = ("major", "minor")
    MAJOR_FIELD_NUMBER: _ClassVar[int]
    MINOR_FIELD_NUMBER: _ClassVar[int]
    major: int
    minor: int
    def __init__(self, major: _Optional[int] = ..., minor: _Optional[int] = ...) -> None: ...

class GpuSample(_message.Message):
    __slots__ = ("index", "uuid", "name", "pci_bus_id", "compute_capability", "memory_total_bytes", "memory_used_bytes", "memory_free_bytes", "memory_reserved_bytes", "utilization_gpu_percent", "utilization_memory_percent", "temperature_celsius", "power_watts", "healthy", "unhealthy_reasons", "holders", "sharing", "health", "health_reasons", "errors", "xids", "clock_event_reasons", "sm_clock_mhz", "memory_clock_mhz", "energy_millijoules", "numa_node", "mig_instances", "dra_device", "gpm")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PCI_BUS_ID_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_CAPABILITY_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_RESERVED_BYTES_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_GPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_MEMORY_PERCENT_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_CELSIUS_FIELD_NUMBER: _ClassVar[int]
    POWER_WATTS_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    UNHEALTHY_REASONS_FIELD_NUMBER: _ClassVar[int]
    HOLDERS_FIELD_NUMBER: _ClassVar[int]
    SHARING_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    HEALTH_REASONS_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    XIDS_FIELD_NUMBER: _ClassVar[int]
    CLOCK_EVENT_REASONS_FIELD_NUMBER: _ClassVar[int]
    SM_CLOCK_MHZ_FIELD_NUMBER: _ClassVar[int]
    MEMORY_CLOCK_MHZ_FIELD_NUMBER: _ClassVar[int]
    ENERGY_MILLIJOULES_FIELD_NUMBER: _ClassVar[int]
    NUMA_NODE_FIELD_NUMBER: _ClassVar[int]
    MIG_INSTANCES_FIELD_NUMBER: _ClassVar[int]
    DRA_DEVICE_FIELD_NUMBER: _ClassVar[int]
    GPM_FIELD_NUMBER: _ClassVar[int]
    index: int
    uuid: str
    name: str
    pci_bus_id: str
    compute_capability: ComputeCapability
    memory_total_bytes: int
    memory_used_bytes: int
    memory_free_bytes: int
    memory_reserved_bytes: int
    utilization_gpu_percent: int
    utilization_memory_percent: int
    temperature_celsius: int
    power_watts: float
    healthy: bool
    unhealthy_reasons: _containers.RepeatedScalarFieldContainer[str]
    holders: _containers.RepeatedCompositeFieldContainer[Holder]
    sharing: Sharing
    health: HealthState
    health_reasons: _containers.RepeatedScalarFieldContainer[str]
    errors: ErrorCounters
    xids: _containers.RepeatedCompositeFieldContainer[XidEvent]
    clock_event_reasons: int
    sm_clock_mhz: int
    memory_clock_mhz: int
    energy_millijoules: int
    numa_node: int
    mig_instances: _containers.RepeatedCompositeFieldContainer[MigInstance]
    dra_device: str
    gpm: GpmReadings
    def __init__(self, index: _Optional[int] = ..., uuid: _Optional[str] = ..., name: _Optional[str] = ..., pci_bus_id: _Optional[str] = ..., compute_capability: _Optional[_Union[ComputeCapability, _Mapping]] = ..., memory_total_bytes: _Optional[int] = ..., memory_used_bytes: _Optional[int] = ..., memory_free_bytes: _Optional[int] = ..., memory_reserved_bytes: _Optional[int] = ..., utilization_gpu_percent: _Optional[int] = ..., utilization_memory_percent: _Optional[int] = ..., temperature_celsius: _Optional[int] = ..., power_watts: _Optional[float] = ..., healthy: _Optional[bool] = ..., unhealthy_reasons: _Optional[_Iterable[str]] = ..., holders: _Optional[_Iterable[_Union[Holder, _Mapping]]] = ..., sharing: _Optional[_Union[Sharing, _Mapping]] = ..., health: _Optional[_Union[HealthState, str]] = ..., health_reasons: _Optional[_Iterable[str]] = ..., errors: _Optional[_Union[ErrorCounters, _Mapping]] = ..., xids: _Optional[_Iterable[_Union[XidEvent, _Mapping]]] = ..., clock_event_reasons: _Optional[int] = ..., sm_clock_mhz: _Optional[int] = ..., memory_clock_mhz: _Optional[int] = ..., energy_millijoules: _Optional[int] = ..., numa_node: _Optional[int] = ..., mig_instances: _Optional[_Iterable[_Union[MigInstance, _Mapping]]] = ..., dra_device: _Optional[str] = ..., gpm: _Optional[_Union[GpmReadings, _Mapping]] = ...) -> None: ...

class ReportAck(_message.Message):
    __slots__ = ("sequence", "status", "reason", "requested_interval_ms", "idle_max_utilization_percent", "idle_max_memory_used_percent", "stale_after_ms", "idle_max_sm_active_percent", "light_heartbeats")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATUS_UNSPECIFIED: _ClassVar[ReportAck.Status]
        ACCEPTED: _ClassVar[ReportAck.Status]
        REJECTED: _ClassVar[ReportAck.Status]
    STATUS_UNSPECIFIED: ReportAck.Status
    ACCEPTED: ReportAck.Status
    REJECTED: ReportAck.Status
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    IDLE_MAX_UTILIZATION_PERCENT_FIELD_NUMBER: _ClassVar[int]
    IDLE_MAX_MEMORY_USED_PERCENT_FIELD_NUMBER: _ClassVar[int]
    STALE_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    IDLE_MAX_SM_ACTIVE_PERCENT_FIELD_NUMBER: _ClassVar[int]
    LIGHT_HEARTBEATS_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    status: ReportAck.Status
    reason: str
    requested_interval_ms: int
    idle_max_utilization_percent: float
    idle_max_memory_used_percent: float
    stale_after_ms: int
    idle_max_sm_active_percent: float
    light_heartbeats: bool
    def __init__(self, sequence: _Optional[int] = ..., status: _Optional[_Union[ReportAck.Status, str]] = ..., reason: _Optional[str] = ..., requested_interval_ms: _Optional[int] = ..., idle_max_utilization_percent: _Optional[float] = ..., idle_max_memory_used_percent: _Optional[float] = ..., stale_after_ms: _Optional[int] = ..., idle_max_sm_active_percent: _Optional[float] = ..., light_heartbeats: _Optional[bool] = ...) -> None: ...
