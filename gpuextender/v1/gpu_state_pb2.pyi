import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NodeReport(_message.Message):
    __slots__ = ("node_name", "sequence", "sample_time", "agent_version", "driver_version", "gpus", "node_error")
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_TIME_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    DRIVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    NODE_ERROR_FIELD_NUMBER: _ClassVar[int]
    node_name: str
    sequence: int
    sample_time: _timestamp_pb2.Timestamp
    agent_version: str
    driver_version: str
    gpus: _containers.RepeatedCompositeFieldContainer[GpuSample]
    node_error: str
    def __init__(self, node_name: _Optional[str] = ..., sequence: _Optional[int] = ..., sample_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., agent_version: _Optional[str] = ..., driver_version: _Optional[str] = ..., gpus: _Optional[_Iterable[_Union[GpuSample, _Mapping]]] = ..., node_error: _Optional[str] = ...) -> None: ...

class ComputeCapability(_message.Message):
    __slots__ = ("major", "minor")
    MAJOR_FIELD_NUMBER: _ClassVar[int]
    MINOR_FIELD_NUMBER: _ClassVar[int]
    major: int
    minor: int
    def __init__(self, major: _Optional[int] = ..., minor: _Optional[int] = ...) -> None: ...

class GpuSample(_message.Message):
    __slots__ = ("index", "uuid", "name", "pci_bus_id", "compute_capability", "memory_total_bytes", "memory_used_bytes", "memory_free_bytes", "memory_reserved_bytes", "utilization_gpu_percent", "utilization_memory_percent", "temperature_celsius", "power_watts", "healthy", "unhealthy_reasons")
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
    def __init__(self, index: _Optional[int] = ..., uuid: _Optional[str] = ..., name: _Optional[str] = ..., pci_bus_id: _Optional[str] = ..., compute_capability: _Optional[_Union[ComputeCapability, _Mapping]] = ..., memory_total_bytes: _Optional[int] = ..., memory_used_bytes: _Optional[int] = ..., memory_free_bytes: _Optional[int] = ..., memory_reserved_bytes: _Optional[int] = ..., utilization_gpu_percent: _Optional[int] = ..., utilization_memory_percent: _Optional[int] = ..., temperature_celsius: _Optional[int] = ..., power_watts: _Optional[float] = ..., healthy: _Optional[bool] = ..., unhealthy_reasons: _Optional[_Iterable[str]] = ...) -> None: ...

class ReportAck(_message.Message):
    __slots__ = ("sequence", "status", "reason", "requested_interval_ms")
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
    sequence: int
    status: ReportAck.Status
    reason: str
    requested_interval_ms: int
    def __init__(self, sequence: _Optional[int] = ..., status: _Optional[_Union[ReportAck.Status, str]] = ..., reason: _Optional[str] = ..., requested_interval_ms: _Optional[int] = ...) -> None: ...
